"""Errors as OpenAI clients read them: ``{"error": {"message", "type", "code"}}``."""

from __future__ import annotations

import orjson
from starlette.responses import Response

from naiad.errors import InferenceServerError, Status

#: naiad's status -> the HTTP status an OpenAI client expects
_HTTP_STATUS = {
    Status.INVALID_ARG: 400,
    Status.NOT_FOUND: 404,
    Status.UNAVAILABLE: 503,
    Status.UNSUPPORTED: 400,
    Status.ALREADY_EXISTS: 409,
    Status.CANCELLED: 499,
    Status.RESOURCE_EXHAUSTED: 503,
    Status.DEADLINE_EXCEEDED: 504,
}
_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
          405: "invalid_request_error", 409: "invalid_request_error",
          413: "invalid_request_error", 422: "invalid_request_error",
          499: "cancelled", 503: "service_unavailable"}


class OpenAIError(Exception):
    """A request the frontend answers with an OpenAI error body."""

    def __init__(self, status: int, message: str, code: str | None = None,
                 param: str | None = None, detail: object = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        #: Triton's frontend (FastAPI) answers ``{"detail": ...}``: kept beside ``error`` for
        #: the clients and tests written against it. None: ``error`` alone.
        self.detail = detail

    def body(self) -> dict:
        body: dict = {"error": {"message": self.message,
                                "type": _TYPES.get(self.status, "server_error"),
                                "param": self.param, "code": self.code}}
        if self.detail is not None:
            body["detail"] = self.detail
        return body

    def response(self) -> Response:
        return Response(orjson.dumps(self.body()), status_code=self.status,
                        media_type="application/json")


def bad_request(message: str, param: str | None = None, code: str = "invalid_value"
                ) -> OpenAIError:
    """A 400 naming what is wrong (Triton's ClientError)."""
    return OpenAIError(400, message, code, param, detail=message)


def invalid_field(message: str, location: list[str | int], kind: str = "value_error"
                  ) -> OpenAIError:
    """A 422 for a request that does not match the API's schema (FastAPI's validation
    error: ``detail`` is a list of ``{"loc", "msg", "type"}``)."""
    where = ".".join(str(part) for part in location)
    return OpenAIError(422, f"{where}: {message}", "invalid_request", where,
                       detail=[{"type": kind, "loc": ["body", *location], "msg": message}])


def server_error(message: str) -> OpenAIError:
    """A 500 (Triton's ServerError)."""
    return OpenAIError(500, message, "internal_error", detail=message)


def from_server_error(exc: InferenceServerError) -> OpenAIError:
    """The OpenAI error for a naiad error (a model's, the core's)."""
    status = _HTTP_STATUS.get(exc.status, 500)
    code = {404: "model_not_found", 503: "unavailable"}.get(status)
    return OpenAIError(status, exc.message, code, detail=exc.message)
