"""PyTriton's client exceptions (``pytriton.client.exceptions``), same names and bases."""

from __future__ import annotations


class PyTritonClientError(Exception):
    """Base of the client's errors; ``message`` is the text it was raised with."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self._message = message

    def __str__(self) -> str:
        return self._message

    @property
    def message(self) -> str:
        """The error's text."""
        return self._message


class PyTritonClientValueError(PyTritonClientError):
    """A value passed to the client is not valid."""


class PyTritonClientInvalidUrlError(PyTritonClientValueError):
    """The server URL cannot be parsed."""


class PyTritonClientTimeoutError(PyTritonClientError):
    """The server, the model or an inference did not answer in time."""


class PyTritonClientModelUnavailableError(PyTritonClientError):
    """The model (or that version of it) is not on the server."""


class PyTritonClientClosedError(PyTritonClientError):
    """The client was closed."""


class PyTritonClientModelDoesntSupportBatchingError(PyTritonClientError):
    """``infer_batch`` on a model with ``max_batch_size`` 0."""


class PyTritonClientInferenceServerError(PyTritonClientError):
    """The server or the inference callable answered with an error."""


class PyTritonClientQueueFullError(PyTritonClientError):
    """The FuturesModelClient's queue is full."""
