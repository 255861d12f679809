"""Which AWS credentials open a repository, chosen as tritonserver chooses them.

Without ``TRITON_CLOUD_CREDENTIAL_PATH``: the standard AWS chain (``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, then ``AWS_PROFILE``, then ``~/.aws``'s
default profile, then what the machine offers: container or instance roles), the region from
``AWS_DEFAULT_REGION`` or the profile.

With ``TRITON_CLOUD_CREDENTIAL_PATH`` (Triton's cloud credential file, JSON): its ``"s3"``
section maps URI prefixes to credentials, and the longest prefix that starts the repository
URI wins (``""`` matches every URI)::

    {"s3": {"": {"key_id": "...", "secret_key": "...", "region": "us-west-2",
                 "session_token": "", "profile": ""},
            "s3://other-bucket": {"profile": "other"}}}

An entry with ``key_id`` and ``secret_key`` uses them (with ``session_token`` when given);
else one with ``profile`` uses that profile of ``~/.aws``; else the standard chain. When the
file is set, no entry matching the URI is an error, as in Triton.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass

from naiad.errors import invalid_arg

CREDENTIAL_FILE_ENV = "TRITON_CLOUD_CREDENTIAL_PATH"
SECTION = "s3"
ENTRY_KEYS = frozenset({"key_id", "secret_key", "session_token", "region", "profile"})


@dataclass(frozen=True)
class S3Credentials:
    """How to build the boto3 session: explicit keys, a named profile, or (all None) the
    standard AWS chain. ``source`` says where they came from, for messages (never a secret)."""

    source: str
    key_id: str | None = None
    secret_key: str | None = None
    session_token: str | None = None
    profile: str | None = None
    region: str | None = None

    def session_arguments(self) -> dict[str, str]:
        """Keyword arguments of ``boto3.session.Session``."""
        arguments = {
            "aws_access_key_id": self.key_id,
            "aws_secret_access_key": self.secret_key,
            "aws_session_token": self.session_token,
            "profile_name": self.profile,
            "region_name": self.region,
        }
        return {name: value for name, value in arguments.items() if value}


STANDARD_CHAIN = S3Credentials(source="the AWS environment variables and configuration")


def _read_file(path: str) -> object:
    try:
        with open(path, encoding="utf-8") as file:
            return json.load(file)
    except OSError as exc:
        raise invalid_arg(f"{CREDENTIAL_FILE_ENV}={path}: cannot read it "
                          f"({exc.strerror or exc})") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise invalid_arg(f"{CREDENTIAL_FILE_ENV}={path}: not a JSON file ({exc})") from None


def _entry(path: str, name: str, entry: object) -> S3Credentials:
    where = f"{CREDENTIAL_FILE_ENV}={path}, \"{SECTION}\" entry '{name}'"
    if not isinstance(entry, dict):
        raise invalid_arg(f"{where}: expected an object with "
                          f"{', '.join(sorted(ENTRY_KEYS))}")
    unknown = sorted(set(entry) - ENTRY_KEYS)
    if unknown:
        raise invalid_arg(f"{where}: unknown key '{unknown[0]}' (known: "
                          f"{', '.join(sorted(ENTRY_KEYS))})")
    for key, value in entry.items():
        if not isinstance(value, str):
            raise invalid_arg(f"{where}: '{key}' must be a string")
    region = entry.get("region") or None
    if entry.get("key_id") and entry.get("secret_key"):
        return S3Credentials(source=where, key_id=entry["key_id"],
                             secret_key=entry["secret_key"],
                             session_token=entry.get("session_token") or None, region=region)
    if entry.get("key_id") or entry.get("secret_key"):
        # Triton falls back to the profile chain silently; a half key is a mistake to show.
        raise invalid_arg(f"{where}: 'key_id' and 'secret_key' go together")
    return S3Credentials(source=where, profile=entry.get("profile") or None, region=region)


def resolve_credentials(uri: str, environ: Mapping[str, str] | None = None) -> S3Credentials:
    """The credentials for the repository at ``uri``; INVALID_ARG naming the file when the
    credential file is unreadable, malformed or has no entry for ``uri``."""
    environ = os.environ if environ is None else environ
    path = environ.get(CREDENTIAL_FILE_ENV)
    if path is None:
        return STANDARD_CHAIN
    document = _read_file(path)
    section = document.get(SECTION, {}) if isinstance(document, dict) else None
    if not isinstance(section, dict):
        raise invalid_arg(f"{CREDENTIAL_FILE_ENV}={path}: expected a JSON object with an "
                          f"\"{SECTION}\" object of URI prefixes")
    matching = [name for name in section if uri.startswith(name)]
    if not matching:
        raise invalid_arg(f"{CREDENTIAL_FILE_ENV}={path}: no \"{SECTION}\" entry matches "
                          f"'{uri}' (add one keyed by a prefix of it, or \"\" for every URI)")
    name = max(matching, key=len)
    return _entry(path, name, section[name])
