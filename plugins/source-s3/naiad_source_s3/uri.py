"""``s3://`` repository URIs, in the forms tritonserver reads them.

- ``s3://bucket/path/to/repository``: Amazon S3 (the region from the AWS configuration).
- ``s3://host:port/bucket/path``: an S3-compatible store over HTTP (Triton's default).
- ``s3://http://host:port/bucket/path`` and ``s3://https://host:port/bucket/path``: the same
  with the protocol named. naiad also takes the port away (``s3://https://host/bucket``: the
  protocol's own port), which Triton's parser does not.

As in Triton, repeated and trailing slashes are dropped. Anything else malformed (no bucket,
a bucket name S3 cannot have, a ``.`` or ``..`` folder, a port out of range) is refused with
INVALID_ARG naming the URI and the forms expected.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from naiad.errors import InferenceServerError, invalid_arg

SCHEME = "s3://"
EXPECTED_FORMS = ("s3://BUCKET/PATH, s3://HOST:PORT/BUCKET/PATH or "
                  "s3://https://HOST[:PORT]/BUCKET/PATH")

# Bucket names as S3 allows them: lowercase letters, digits, dots and hyphens, 3 to 63
# characters, a letter or digit at each end (legacy us-east-1 buckets may also hold capitals
# and underscores, so those are let through).
_BUCKET = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{1,253}[A-Za-z0-9]")
# A host name or IPv4 address, or an IPv6 address in brackets; then an optional port.
_HOST_PORT = re.compile(r"(?P<host>[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::(?P<port>[0-9]+))?")
_PROTOCOLS = ("http://", "https://")


@dataclass(frozen=True)
class S3Location:
    """Where a repository lies: the store (``endpoint_url`` None for Amazon S3), the bucket and
    the key prefix of the repository's root (empty, or ending in "/")."""

    uri: str
    bucket: str
    prefix: str
    endpoint_url: str | None = None


def _refuse(uri: str, why: str) -> InferenceServerError:
    return invalid_arg(f"model repository '{uri}' is not a valid S3 URI: {why} "
                       f"(expected {EXPECTED_FORMS})")


def _endpoint(uri: str, protocol: str, host_port: str, *, port_required: bool) -> str:
    match = _HOST_PORT.fullmatch(host_port)
    if match is None:
        raise _refuse(uri, f"'{host_port}' is not a host name with an optional port")
    port = match["port"]
    if port is None and port_required:
        raise _refuse(uri, f"'{host_port}' has no port")
    if port is not None and not 1 <= int(port) <= 65535:
        raise _refuse(uri, f"port {port} is out of range (1-65535)")
    return f"{protocol}{host_port}"


def parse_s3_uri(uri: str) -> S3Location:
    """The location ``uri`` names; raises INVALID_ARG naming the URI when it is malformed."""
    if not uri.startswith(SCHEME):
        raise _refuse(uri, "it does not start with s3://")
    rest = uri[len(SCHEME):]
    protocol = next((p for p in _PROTOCOLS if rest.startswith(p)), None)
    if protocol is not None:
        rest = rest[len(protocol):]
    parts = [part for part in rest.split("/") if part]
    if not parts:
        raise _refuse(uri, "it names no bucket")
    endpoint_url = None
    if protocol is not None:
        endpoint_url = _endpoint(uri, protocol, parts.pop(0), port_required=False)
    elif ":" in parts[0]:
        # "host:port": a bucket name never holds a colon. Triton speaks HTTP to it.
        endpoint_url = _endpoint(uri, "http://", parts.pop(0), port_required=True)
    if not parts:
        raise _refuse(uri, "it names no bucket after the endpoint")
    bucket = parts.pop(0)
    if _BUCKET.fullmatch(bucket) is None:
        raise _refuse(uri, f"'{bucket}' is not an S3 bucket name (3-63 letters, digits, "
                           f"dots and hyphens)")
    for part in parts:
        if part in (".", ".."):
            raise _refuse(uri, f"the path holds a '{part}' folder")
    prefix = "".join(f"{part}/" for part in parts)
    return S3Location(uri=uri, bucket=bucket, prefix=prefix, endpoint_url=endpoint_url)
