"""Which Google credentials a repository is read with, as Triton chooses them.

1. An emulator endpoint (``CLOUD_STORAGE_EMULATOR_ENDPOINT``, ``STORAGE_EMULATOR_HOST``):
   anonymous requests.
2. ``TRITON_CLOUD_CREDENTIAL_PATH`` set: its ``"gs"`` section maps URI prefixes to
   credential files (``{"gs": {"": "/default.json", "gs://bucket-2": "/other.json"}}``); the
   longest prefix of the repository URI wins, as in Triton, and an empty file name means
   application default credentials. No matching entry is an error, as in Triton.
3. Otherwise application default credentials (``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's
   file, the metadata server) and, when there are none at all, anonymous requests (public
   buckets), as Triton falls back to them.

Where Triton quietly falls back to anonymous requests when a named credential file cannot be
read, naiad refuses: a typo in a path should not look like "access denied" later.
"""

from __future__ import annotations

import json
import logging
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import google.auth
from google.auth.credentials import AnonymousCredentials, Credentials
from google.auth.exceptions import DefaultCredentialsError

from naiad.errors import invalid_arg, unavailable
from naiad_source_gcs.settings import Endpoint

log = logging.getLogger("naiad.source.gcs")

CREDENTIAL_FILE_ENV = "TRITON_CLOUD_CREDENTIAL_PATH"
ADC_ENV = "GOOGLE_APPLICATION_CREDENTIALS"
SECTION = "gs"
# A repository source only reads.
SCOPES = ("https://www.googleapis.com/auth/devstorage.read_only",)


@dataclass(frozen=True)
class ChosenCredentials:
    """Credentials and where they came from (logged once when the repository opens)."""

    credentials: Credentials
    origin: str


def choose_credentials(uri: str, endpoint: Endpoint) -> ChosenCredentials:
    """The credentials for the repository at ``uri``; raises INVALID_ARG or UNAVAILABLE
    naming the URI and the file when a configured credential cannot be read. Reads
    ``os.environ`` (as google-auth does)."""
    env = os.environ
    if endpoint.emulator:
        return ChosenCredentials(AnonymousCredentials(), f"anonymous ({endpoint.env} is set)")
    table_path = env.get(CREDENTIAL_FILE_ENV, "")
    if table_path:
        prefix, file = _match_credential_file(uri, table_path)
        where = f"{CREDENTIAL_FILE_ENV} entry '{prefix}'"
        if file:
            return ChosenCredentials(_from_file(uri, file, where), f"{file} ({where})")
        return _application_default(uri, env, where)
    return _application_default(uri, env, "application default credentials")


def _match_credential_file(uri: str, table_path: str) -> tuple[str, str]:
    """The longest key of the file's "gs" section that ``uri`` starts with, and its value."""
    try:
        with open(table_path, encoding="utf-8") as table_file:
            table = json.load(table_file)
    except OSError as exc:
        raise invalid_arg(f"model repository '{uri}': cannot read {CREDENTIAL_FILE_ENV}="
                          f"'{table_path}': {exc.strerror or exc}") from None
    except ValueError as exc:
        raise invalid_arg(f"model repository '{uri}': {CREDENTIAL_FILE_ENV}='{table_path}' "
                          f"is not JSON: {exc}") from None
    section = table.get(SECTION, {}) if isinstance(table, dict) else None
    if not isinstance(section, dict) or not all(
            isinstance(value, str) for value in section.values()):
        raise invalid_arg(f"model repository '{uri}': {CREDENTIAL_FILE_ENV}='{table_path}': "
                          f"expected {{\"{SECTION}\": {{\"URI PREFIX\": \"CREDENTIAL FILE\", "
                          f"...}}}}")
    matches = sorted((key for key in section if uri.startswith(key)), key=len, reverse=True)
    if not matches:
        known = ", ".join(f"'{key}'" for key in sorted(section)) or "none"
        raise invalid_arg(f"model repository '{uri}': no \"{SECTION}\" entry of "
                          f"{CREDENTIAL_FILE_ENV}='{table_path}' is a prefix of it (entries: "
                          f"{known}; \"\" matches every gs:// URI)")
    return matches[0], section[matches[0]]


def _from_file(uri: str, path: str, where: str) -> Credentials:
    try:
        # google-auth warns (DeprecationWarning) that a credential file from an untrusted
        # source may be unsafe to load; this one is named by the operator, as
        # google.auth.default() itself treats GOOGLE_APPLICATION_CREDENTIALS.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            credentials, _ = google.auth.load_credentials_from_file(path, scopes=SCOPES)
    except DefaultCredentialsError as exc:
        raise unavailable(f"model repository '{uri}': the credential file '{path}' ({where}) "
                          f"cannot be used: {_first_line(exc)}") from None
    return credentials  # type: ignore[no-any-return]


def _application_default(uri: str, env: Mapping[str, str], where: str) -> ChosenCredentials:
    try:
        credentials, _ = google.auth.default(scopes=SCOPES)
    except DefaultCredentialsError as exc:
        if env.get(ADC_ENV):
            raise unavailable(f"model repository '{uri}': {ADC_ENV}='{env[ADC_ENV]}' cannot "
                              f"be used: {_first_line(exc)}") from None
        log.warning("model repository '%s': no Google credentials found (%s); reading it "
                    "anonymously, which only a public bucket allows", uri, where)
        return ChosenCredentials(AnonymousCredentials(), "anonymous (no credentials found)")
    origin = f"{env[ADC_ENV]} ({ADC_ENV})" if env.get(ADC_ENV) else where
    return ChosenCredentials(credentials, origin)


def _first_line(exc: BaseException) -> str:
    text = exc.args[0] if exc.args and isinstance(exc.args[0], str) else str(exc)
    return " ".join(text.split())
