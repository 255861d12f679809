"""PyTriton's exceptions (``pytriton.exceptions``), with the same names and bases."""

from __future__ import annotations


class PyTritonError(Exception):
    """Base of every naiad.pytriton error; ``message`` is the text it was raised with."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self._message = message

    def __str__(self) -> str:
        return self._message

    @property
    def message(self) -> str:
        """The error's text."""
        return self._message


class PyTritonValidationError(PyTritonError):
    """A value given to the API is not valid."""


class PyTritonInvalidOperationError(PyTritonError):
    """The operation is not allowed in the object's current state."""


class PyTritonBadParameterError(PyTritonError):
    """A parameter has a wrong value."""


class PyTritonModelConfigError(PyTritonError):
    """The model configuration is not valid."""


class PyTritonUnrecoverableError(PyTritonError):
    """Raised by an inference callable to take its model down (it reads not ready)."""


class PyTritonRuntimeError(PyTritonError):
    """An error while a model runs."""


class PyTritonNotSupportedError(PyTritonError):
    """A part of PyTriton's API that naiad.pytriton does not support; the message names it."""


def not_supported(what: str, why: str = "") -> PyTritonNotSupportedError:
    """The error for ``what`` (a PyTriton name or option) that naiad does not support."""
    text = f"{what} is not supported by naiad.pytriton"
    return PyTritonNotSupportedError(f"{text}: {why}" if why else text + " (docs/pytriton.md)")
