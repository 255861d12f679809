"""What went wrong, in one line: the Google client's exceptions as naiad errors that name the
repository URI and the cause, never a traceback or a repr of the client's objects."""

from __future__ import annotations

import re
import socket
import ssl

import requests
from google.api_core import exceptions as api_exceptions
from google.auth import exceptions as auth_exceptions

from naiad.errors import InferenceServerError, unavailable
from naiad_source_gcs.settings import (
    CONNECT_TIMEOUT_ENV,
    READ_TIMEOUT_ENV,
    RETRY_DEADLINE_ENV,
    GcsSettings,
)

# "GET http://host/storage/v1/b/x/o?...: reason": the client prefixes the request.
_REQUEST_PREFIX = re.compile(r"^[A-Z]+ \S+: ")
_MAX_REASON_CHARS = 300


def is_client_failure(exc: BaseException) -> bool:
    """True for what the Google client raises about the store (as opposed to an error
    writing a local file, which the caller leaves to the core)."""
    return isinstance(exc, (api_exceptions.GoogleAPIError, auth_exceptions.GoogleAuthError,
                            requests.RequestException))


def failure(uri: str, doing: str, exc: BaseException, settings: GcsSettings,
            credentials_origin: str) -> InferenceServerError:
    """UNAVAILABLE: ``model repository 'URI': DOING failed: CAUSE``."""
    return unavailable(f"model repository '{uri}': {doing} failed: "
                       f"{describe(exc, settings, credentials_origin)}")


def describe(exc: BaseException, settings: GcsSettings, credentials_origin: str) -> str:
    """The cause of ``exc`` in a few words, with the setting to change where one applies."""
    if isinstance(exc, api_exceptions.RetryError):
        cause = exc.cause if exc.cause is not None else exc.__cause__
        tried = (f"retried for {settings.retry_deadline_s:g} s, {RETRY_DEADLINE_ENV}")
        if cause is None:
            return f"gave up ({tried})"
        return f"{describe(cause, settings, credentials_origin)} ({tried})"
    if isinstance(exc, (api_exceptions.Unauthorized, api_exceptions.Forbidden)):
        return (f"access denied (HTTP {exc.code}: {api_reason(exc)}); check the credentials: "
                f"{credentials_origin}")
    if isinstance(exc, api_exceptions.GoogleAPICallError):
        return f"HTTP {exc.code}: {api_reason(exc)}"
    if isinstance(exc, auth_exceptions.RefreshError):
        return (f"the credentials were refused ({one_line(exc)}): {credentials_origin}")
    if isinstance(exc, auth_exceptions.TransportError):
        # google-auth raises it only while it fetches an access token (from the token
        # endpoint the credentials name, or the metadata server), never for storage calls
        return (f"cannot get an access token ({connection_cause(exc)}) for the credentials: "
                f"{credentials_origin}")
    if isinstance(exc, requests.Timeout):
        return timeout_cause(exc, settings)
    if isinstance(exc, requests.ConnectionError):
        return f"cannot reach {settings.endpoint.describe()}: {connection_cause(exc)}"
    if isinstance(exc, api_exceptions.GoogleAPIError | auth_exceptions.GoogleAuthError):
        return one_line(exc)
    return f"{type(exc).__name__}: {one_line(exc)}"


def api_reason(exc: api_exceptions.GoogleAPICallError) -> str:
    """The store's own words, without the request line the client puts before them."""
    reason = _REQUEST_PREFIX.sub("", one_line(exc.message or ""))
    return reason or "no reason given"


def timeout_cause(exc: BaseException, settings: GcsSettings) -> str:
    if isinstance(exc, requests.ConnectTimeout):
        return (f"no connection to {settings.endpoint.describe()} within "
                f"{settings.connect_timeout_s:g} s ({CONNECT_TIMEOUT_ENV})")
    return (f"{settings.endpoint.describe()} did not answer within "
            f"{settings.read_timeout_s:g} s ({READ_TIMEOUT_ENV})")


def connection_cause(exc: BaseException) -> str:
    """The innermost operating-system error of a connection failure ("connection
    refused", "name or service not known"), found through the exception chain and the
    wrapped exceptions requests and urllib3 keep in ``args`` and ``reason``."""
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    found: BaseException | None = None
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, (socket.gaierror, ssl.SSLError)) or (
                isinstance(current, OSError) and current.strerror
                and not isinstance(current, requests.RequestException)):
            found = current
        nested = [current.__cause__, current.__context__, getattr(current, "reason", None),
                  *current.args]
        pending.extend(item for item in nested if isinstance(item, BaseException))
    if found is None:
        return one_line(exc)
    if isinstance(found, socket.gaierror):
        return f"host name not resolved ({found.strerror or one_line(found)})"
    if isinstance(found, ssl.SSLError):
        return f"TLS failed ({found.reason or one_line(found)})"
    return (found.strerror or one_line(found)).lower()


def one_line(exc: BaseException | str) -> str:
    """Text on one line, cut to a length a log line can hold."""
    if isinstance(exc, BaseException):
        text = exc.args[0] if exc.args and isinstance(exc.args[0], str) else str(exc)
    else:
        text = exc
    text = " ".join(text.split())
    if len(text) > _MAX_REASON_CHARS:
        text = text[:_MAX_REASON_CHARS - 3] + "..."
    return text
