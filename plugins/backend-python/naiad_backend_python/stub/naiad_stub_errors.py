"""The exceptions of the Python backend's model API (``pb_utils.TritonModelException``,
``pb_utils.TritonError``), in a module of their own: ``triton_python_backend_utils`` and the
custom metrics (``naiad_stub_metrics``) both raise them, and neither imports the other for
it. A model sees them as ``pb_utils`` attributes, as in Triton.

Like every ``naiad_stub_*`` module it runs in a worker process under any Python 3.9+ with
the standard library and numpy only.
"""

from __future__ import annotations

import enum


class TritonModelException(Exception):
    """Raised by this module when a model misuses it (and by models, to fail a batch)."""

    def message(self) -> str:
        return str(self)


class ErrorCode(enum.IntEnum):
    """TRITONSERVER_Error_Code."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7


class TritonError(Exception):
    """An error a model puts in an :class:`InferenceResponse` (``error=``).

    ``code`` is one of the class attributes (``TritonError.INVALID_ARG``...); the default
    is ``INTERNAL``, which clients see as HTTP 500 / gRPC INTERNAL, as with Triton. Unlike
    Triton's, this class is also an exception: raising it from ``execute`` fails the batch
    with its code.
    """

    UNKNOWN = ErrorCode.UNKNOWN
    INTERNAL = ErrorCode.INTERNAL
    NOT_FOUND = ErrorCode.NOT_FOUND
    INVALID_ARG = ErrorCode.INVALID_ARG
    UNAVAILABLE = ErrorCode.UNAVAILABLE
    UNSUPPORTED = ErrorCode.UNSUPPORTED
    ALREADY_EXISTS = ErrorCode.ALREADY_EXISTS
    CANCELLED = ErrorCode.CANCELLED

    def __init__(self, message: str, code: int = ErrorCode.INTERNAL) -> None:
        if message is None:
            raise TypeError("TritonError(): message must be a str, not None")
        super().__init__(message)
        self._message = str(message)
        self._code = ErrorCode(code)

    def message(self) -> str:
        return self._message

    def code(self) -> ErrorCode:
        return self._code
