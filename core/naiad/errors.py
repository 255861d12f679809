"""Errors as values: one exception type with a status, mapped to HTTP and gRPC in one place.

Every failure a client can see is an :class:`InferenceServerError` whose message names the
model, the tensor and what was expected. Frontends never invent their own codes: they call
:func:`http_status` or :func:`grpc_status`.
"""

from __future__ import annotations

import enum

import grpc


class Status(enum.Enum):
    """Triton's error kinds (``TRITONSERVER_Error_Code``), used by every layer."""

    INVALID_ARG = "INVALID_ARG"
    NOT_FOUND = "NOT_FOUND"
    UNAVAILABLE = "UNAVAILABLE"
    UNSUPPORTED = "UNSUPPORTED"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    CANCELLED = "CANCELLED"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    INTERNAL = "INTERNAL"
    # a Python model's TritonError.UNKNOWN: Triton answers it 500 / gRPC UNKNOWN
    UNKNOWN = "UNKNOWN"


class InferenceServerError(Exception):
    """A failure reported to the client with ``status`` and a human-readable ``message``."""

    def __init__(self, message: str, status: Status = Status.INVALID_ARG) -> None:
        super().__init__(message)
        self.message = message
        self.status = status

    def __repr__(self) -> str:
        return f"InferenceServerError({self.status.name}: {self.message!r})"


def invalid_arg(message: str) -> InferenceServerError:
    return InferenceServerError(message, Status.INVALID_ARG)


def not_found(message: str) -> InferenceServerError:
    return InferenceServerError(message, Status.NOT_FOUND)


def unavailable(message: str) -> InferenceServerError:
    return InferenceServerError(message, Status.UNAVAILABLE)


def unsupported(message: str) -> InferenceServerError:
    return InferenceServerError(message, Status.UNSUPPORTED)


# The tables follow what tritonserver 2.51 sends (tests/compat/TRITON_OBSERVED.md), except
# that naiad never answers 500 for something the client sent.
_HTTP = {
    Status.INVALID_ARG: 400,
    Status.NOT_FOUND: 404,
    Status.UNAVAILABLE: 503,
    Status.UNSUPPORTED: 400,
    Status.ALREADY_EXISTS: 409,
    Status.RESOURCE_EXHAUSTED: 413,
    Status.CANCELLED: 499,
    Status.DEADLINE_EXCEEDED: 504,
    Status.INTERNAL: 500,
    Status.UNKNOWN: 500,
}

_GRPC = {
    Status.INVALID_ARG: grpc.StatusCode.INVALID_ARGUMENT,
    Status.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    Status.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    Status.UNSUPPORTED: grpc.StatusCode.UNIMPLEMENTED,
    Status.ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    Status.RESOURCE_EXHAUSTED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Status.CANCELLED: grpc.StatusCode.CANCELLED,
    Status.DEADLINE_EXCEEDED: grpc.StatusCode.DEADLINE_EXCEEDED,
    Status.INTERNAL: grpc.StatusCode.INTERNAL,
    Status.UNKNOWN: grpc.StatusCode.UNKNOWN,
}


def http_status(error: InferenceServerError) -> int:
    """The HTTP status code for ``error``."""
    return _HTTP[error.status]


def grpc_status(error: InferenceServerError) -> grpc.StatusCode:
    """The gRPC status code for ``error``."""
    return _GRPC[error.status]
