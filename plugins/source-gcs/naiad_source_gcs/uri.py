"""``gs://BUCKET[/PATH]``: the repository URI as Triton reads it, and the object names under
it that may become file paths on this machine."""

from __future__ import annotations

import re
from dataclasses import dataclass

from naiad.errors import invalid_arg

SCHEME = "gs"
EXPECTED_FORM = ("expected gs://BUCKET or gs://BUCKET/PATH, the bucket named with 3 to 63 "
                 "lowercase letters, digits, '-', '_' or '.' (from a letter or digit to a "
                 "letter or digit)")

# Google's bucket naming rules: 3-63 characters (up to 222 when dotted, each part at most
# 63), lowercase letters, digits, '-', '_' and '.', starting and ending with a letter or
# digit.
_BUCKET = re.compile(r"[a-z0-9](?:[a-z0-9_.-]*[a-z0-9])?")
_BUCKET_PART_MAX = 63
_BUCKET_MAX = 222
_BUCKET_MIN = 3
# Characters an object name may not hold (Google refuses them too): no path we make from a
# name should carry them.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class GcsLocation:
    """Where a repository lies: a bucket and the object name prefix of its root ("" for the
    bucket's root, else ending in "/")."""

    bucket: str
    prefix: str

    @property
    def uri(self) -> str:
        """The canonical URI, ``gs://bucket/path`` without a trailing "/"."""
        return f"gs://{self.bucket}/{self.prefix}".rstrip("/")


def parse_uri(uri: str) -> GcsLocation:
    """The bucket and root prefix of ``uri``; raises INVALID_ARG naming the URI and the
    expected form when it is not a ``gs://`` URI this source can read."""
    if not uri.startswith(f"{SCHEME}://"):
        raise invalid_arg(f"model repository '{uri}' is not a gs:// URI: {EXPECTED_FORM}")
    rest = uri[len(SCHEME) + 3:]
    bucket, _, path = rest.partition("/")
    if not _is_bucket_name(bucket):
        raise invalid_arg(f"model repository '{uri}': '{bucket}' is not a bucket name; "
                          f"{EXPECTED_FORM}")
    path = path.strip("/")
    if path and not is_safe_relative(path):
        raise invalid_arg(f"model repository '{uri}': the path '{path}' has an empty, '.' "
                          f"or '..' part or a control character; {EXPECTED_FORM}")
    return GcsLocation(bucket, f"{path}/" if path else "")


def is_safe_relative(path: str) -> bool:
    """True when ``path`` is a relative "/"-separated path that stays where it is put: no
    leading "/", no empty, "." or ".." part, no control character."""
    if not path or _CONTROL.search(path):
        return False
    return all(part not in ("", ".", "..") for part in path.split("/"))


def _is_bucket_name(name: str) -> bool:
    if not _BUCKET_MIN <= len(name) <= _BUCKET_MAX or not _BUCKET.fullmatch(name):
        return False
    parts = name.split(".")
    if len(parts) == 1:
        return len(name) <= _BUCKET_PART_MAX
    return all(0 < len(part) <= _BUCKET_PART_MAX for part in parts)
