"""The storage SDK's exceptions as one-line naiad errors naming the URI and the cause (no
traceback, no SDK repr, no request ids)."""

from __future__ import annotations

import re

from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ResourceModifiedError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)

from naiad.errors import InferenceServerError, not_found, unavailable

# urllib3 puts "<urllib3.connection.HTTPConnection object at 0x7f...>: " before its reason.
OBJECT_REPR = re.compile(r"<[^<>]* object at 0x[0-9a-fA-F]+>:?\s*")
# Error codes that mean "these credentials may not do this" (403 and 401 answers).
ACCESS_CODES = {"AuthenticationFailed", "AuthorizationFailure",
                "AuthorizationPermissionMismatch", "InvalidAuthenticationInfo",
                "NoAuthenticationInformation", "AuthorizationResourceTypeMismatch"}


def _root_cause(exc: BaseException) -> str:
    """The deepest OS-level reason in ``exc``'s chain ("Connection refused"), or the first
    line of its message without object reprs."""
    seen: set[int] = set()
    current: BaseException | None = exc
    reason = ""
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.strerror:
            reason = current.strerror
        inner = getattr(current, "inner_exception", None)
        current = current.__cause__ or inner or current.__context__
    if reason:
        return reason
    text = OBJECT_REPR.sub("", str(exc)).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _service_message(exc: HttpResponseError) -> str:
    """The service's own sentence, without the RequestId/Time/ErrorCode lines it appends."""
    text = (exc.message or exc.reason or "").strip()
    first = text.splitlines()[0].strip() if text else ""
    return OBJECT_REPR.sub("", first).rstrip(".") or f"HTTP {exc.status_code}"


def storage_error(exc: AzureError, uri: str, endpoint: str, what: str
                  ) -> InferenceServerError:
    """``exc`` (raised while doing ``what``: "listing", "downloading 'a/1/model.py'") as an
    UNAVAILABLE or NOT_FOUND error naming ``uri``, the endpoint when it matters, and why."""
    if isinstance(exc, ServiceRequestError):
        return unavailable(f"Azure Storage repository '{uri}': cannot reach {endpoint} "
                           f"while {what}: {_root_cause(exc)}")
    if isinstance(exc, ServiceResponseError):
        return unavailable(f"Azure Storage repository '{uri}': {endpoint} stopped answering "
                           f"while {what}: {_root_cause(exc)}")
    if not isinstance(exc, HttpResponseError):
        return unavailable(f"Azure Storage repository '{uri}': {what} failed: "
                           f"{_root_cause(exc)}")
    # the SDK gives a StorageErrorCode (a str enum) or a plain str; messages show its value
    code = str(getattr(exc.error_code, "value", exc.error_code) or "")
    if code == "ContainerNotFound":
        return not_found(f"Azure Storage repository '{uri}': the container does not exist "
                         f"at {endpoint}")
    if isinstance(exc, ResourceModifiedError) or exc.status_code == 412:
        return unavailable(f"Azure Storage repository '{uri}': {what}: the blob changed "
                           f"after it was listed (the next listing sees the new content)")
    if isinstance(exc, ResourceNotFoundError):
        return not_found(f"Azure Storage repository '{uri}': {what}: "
                         f"{_service_message(exc)} ({code or exc.status_code})")
    if isinstance(exc, ClientAuthenticationError) or code in ACCESS_CODES \
            or exc.status_code in (401, 403):
        return unavailable(f"Azure Storage repository '{uri}': access denied while {what} "
                           f"({code or exc.status_code}): {_service_message(exc)}")
    return unavailable(f"Azure Storage repository '{uri}': {what} failed with HTTP "
                       f"{exc.status_code} ({code or 'no error code'}): "
                       f"{_service_message(exc)}")
