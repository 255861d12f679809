"""botocore's exceptions as naiad errors: one line naming the repository URI and the cause,
never a traceback or an SDK object's repr.

- the store cannot be reached (refused, timed out, TLS failed), credentials missing or
  refused, an object that changed under a download: UNAVAILABLE (a later poll may succeed);
- the bucket, or an object listed a moment ago, does not exist: NOT_FOUND.
"""

from __future__ import annotations

import re

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
    SSLError,
)

from naiad.errors import InferenceServerError, not_found, unavailable
from naiad_source_s3.credentials import CREDENTIAL_FILE_ENV, S3Credentials
from naiad_source_s3.settings import CONNECT_TIMEOUT_ENV, READ_TIMEOUT_ENV, S3Settings
from naiad_source_s3.uri import S3Location

AMAZON_S3 = "Amazon S3"
# S3's answers that mean "these credentials are not good here".
REFUSED_CODES = frozenset({
    "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
    "InvalidToken", "TokenRefreshRequired", "AllAccessDisabled", "AccountProblem",
})
_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\"\)]+)")


def one_line(text: str) -> str:
    """``text`` with its line breaks and runs of blanks made single spaces."""
    return " ".join(text.split())


def _inner(exc: BaseException) -> str:
    """The text of the error botocore wrapped (urllib3's), or of ``exc`` itself."""
    return one_line(str(getattr(exc, "kwargs", {}).get("error", exc)))


def _connection_cause(exc: BaseException) -> str:
    """The operating system's reason inside urllib3's wrapped error ("connection refused")."""
    found = _ERRNO.search(_inner(exc))
    return found.group(1).strip().lower() if found else "the connection failed"


def _client_error(exc: ClientError, location: S3Location, credentials: S3Credentials,
                  key: str | None) -> InferenceServerError:
    error = exc.response.get("Error", {})
    code = str(error.get("Code", ""))
    message = one_line(str(error.get("Message", "") or ""))
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    said = f"{code}: {message}" if message else code or f"HTTP {status}"
    where = f"S3 model repository '{location.uri}'"
    if code == "NoSuchBucket":
        return not_found(f"{where}: bucket '{location.bucket}' does not exist")
    if key is not None and (code in ("NoSuchKey", "404") or status == 404):
        return not_found(f"{where}: object '{key}' is gone (removed after it was listed)")
    if key is not None and (code == "PreconditionFailed" or status == 412):
        return unavailable(f"{where}: object '{key}' changed after it was listed "
                           f"(the next listing will see the new content)")
    if code in REFUSED_CODES or status in (401, 403):
        return unavailable(f"{where}: access refused for the credentials from "
                           f"{credentials.source} ({said})")
    return unavailable(f"{where}: the store answered {said}")


def translate(exc: Exception, location: S3Location, credentials: S3Credentials,
              settings: S3Settings, key: str | None = None) -> InferenceServerError:
    """The naiad error for a failed call on ``location``; ``key`` is the object being read."""
    where = f"S3 model repository '{location.uri}'"
    endpoint = location.endpoint_url or AMAZON_S3
    if isinstance(exc, ClientError):
        return _client_error(exc, location, credentials, key)
    if isinstance(exc, NoCredentialsError):
        return unavailable(f"{where}: no AWS credentials found (set AWS_ACCESS_KEY_ID and "
                           f"AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or {CREDENTIAL_FILE_ENV})")
    if isinstance(exc, ConnectTimeoutError):
        return unavailable(f"{where}: no connection to {endpoint} within "
                           f"{settings.connect_timeout_s:g} s ({CONNECT_TIMEOUT_ENV}), "
                           f"{settings.max_attempts} attempts")
    if isinstance(exc, ReadTimeoutError):
        return unavailable(f"{where}: {endpoint} did not answer within "
                           f"{settings.read_timeout_s:g} s ({READ_TIMEOUT_ENV}), "
                           f"{settings.max_attempts} attempts")
    if isinstance(exc, SSLError):
        return unavailable(f"{where}: TLS with {endpoint} failed ({_inner(exc)}); "
                           f"AWS_CA_BUNDLE names the CA bundle that signs its certificate")
    if isinstance(exc, EndpointConnectionError):
        return unavailable(f"{where}: cannot connect to {endpoint} "
                           f"({_connection_cause(exc)}, {settings.max_attempts} attempts)")
    if isinstance(exc, BotoCoreError):
        return unavailable(f"{where}: {one_line(str(exc))}")
    return unavailable(f"{where}: {type(exc).__name__}: {one_line(str(exc))}")
