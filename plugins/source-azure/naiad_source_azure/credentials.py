"""Where to dial and with which credential, for one ``as://`` URI.

In this order (the first that is set decides; nothing is merged):

1. ``AZURE_STORAGE_CONNECTION_STRING`` (naiad only): its ``BlobEndpoint`` is dialled as
   given (private endpoints, the Azurite emulator), with its account key or SAS token. The
   URI's account must be the connection string's.
2. ``TRITON_CLOUD_CREDENTIAL_PATH``, a JSON file whose ``"as"`` section maps URI prefixes to
   ``{"account_str", "account_key"}``; the longest prefix of the URI wins, as in Triton. A
   file without an ``"as"`` section leaves Azure to the variables below.
3. ``AZURE_STORAGE_ACCOUNT`` / ``AZURE_STORAGE_KEY``, as in Triton; without a key, anonymous
   access (public containers only).

In 2 and 3 the endpoint is ``https://ACCOUNT.blob.core.windows.net`` and, as in Triton, an
account named there wins over the URI's (with a warning).
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from azure.storage.blob import BlobServiceClient, LinearRetry

from naiad.errors import invalid_arg, not_found
from naiad_source_azure.settings import AzureSettings
from naiad_source_azure.uri import AzureUri

log = logging.getLogger("naiad.source.azure")

CONNECTION_STRING_VAR = "AZURE_STORAGE_CONNECTION_STRING"
CREDENTIAL_FILE_VAR = "TRITON_CLOUD_CREDENTIAL_PATH"
ACCOUNT_VAR = "AZURE_STORAGE_ACCOUNT"
KEY_VAR = "AZURE_STORAGE_KEY"
# Newer Triton releases read an authentication type (managed identity, Azure's default
# credential chain); naiad reads account keys only and says so rather than ignore it.
AUTH_TYPE_VAR = "AZURE_STORAGE_AUTH_TYPE"
KEY_AUTH_TYPES = ("", "key")
# The account UseDevelopmentStorage=true stands for (the emulator's well-known account).
DEVELOPMENT_ACCOUNT = "devstoreaccount1"


@dataclass(frozen=True, slots=True)
class Connection:
    """How to reach the account of one URI. Holds secrets: never put it in a message."""

    #: the account dialled (lowercase)
    account: str
    #: where the credential came from, for messages ("AZURE_STORAGE_CONNECTION_STRING")
    origin: str
    #: a connection string, or else the endpoint and credential below (both kept out of
    #: the repr: they hold keys)
    connection_string: str | None = field(default=None, repr=False)
    account_url: str = ""
    #: an account key ({"account_name", "account_key"}) or None (anonymous)
    credential: dict[str, str] | None = field(default=None, repr=False)

    @property
    def endpoint(self) -> str:
        """The endpoint dialled, without secrets (a SAS token's query is left out)."""
        if self.connection_string is None:
            return self.account_url
        fields = connection_string_fields(self.connection_string)
        if fields.get("USEDEVELOPMENTSTORAGE", "").lower() == "true":
            return f"http://127.0.0.1:10000/{DEVELOPMENT_ACCOUNT}"
        blob_endpoint = fields.get("BLOBENDPOINT")
        if blob_endpoint:
            parts = urlsplit(blob_endpoint)
            return f"{parts.scheme}://{parts.netloc}{parts.path}"
        protocol = fields.get("DEFAULTENDPOINTSPROTOCOL", "https")
        suffix = fields.get("ENDPOINTSUFFIX", "core.windows.net")
        return f"{protocol}://{self.account}.blob.{suffix}"

    def client(self, settings: AzureSettings) -> BlobServiceClient:
        """A Blob service client with the settings' timeouts and retries."""
        options: dict[str, Any] = {
            "connection_timeout": settings.connect_timeout_s,
            "read_timeout": settings.read_timeout_s,
            # The storage SDK's default retry waits 15 s and more between tries; a linear,
            # short pause keeps a store that is down from holding start-up for minutes.
            "retry_policy": LinearRetry(backoff=settings.retry_backoff_s,  # type: ignore[arg-type]
                                        retry_total=settings.retries,
                                        random_jitter_range=0),
        }
        if self.connection_string is not None:
            return BlobServiceClient.from_connection_string(self.connection_string, **options)
        return BlobServiceClient(self.account_url, credential=self.credential, **options)


def connection_string_fields(text: str) -> dict[str, str]:
    """``Key=Value;...`` as a dict with upper-case keys (Azure reads keys in any case)."""
    fields = {}
    for part in text.strip().rstrip(";").split(";"):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise invalid_arg(f"{CONNECTION_STRING_VAR} is malformed: expected "
                              f"Key=Value pairs separated by ';'")
        fields[key.strip().upper()] = value.strip()
    return fields


def connection_string_account(fields: Mapping[str, str]) -> str | None:
    """The account a connection string is for: its AccountName, the development account,
    or what its BlobEndpoint says (``ACCOUNT.blob.HOST``, ``ACCOUNT.privatelink.blob.HOST``
    or an emulator's ``http://HOST:PORT/ACCOUNT``); None when none of these tells."""
    if fields.get("USEDEVELOPMENTSTORAGE", "").lower() == "true":
        return DEVELOPMENT_ACCOUNT
    if fields.get("ACCOUNTNAME"):
        return fields["ACCOUNTNAME"].lower()
    endpoint = urlsplit(fields.get("BLOBENDPOINT", ""))
    host = (endpoint.hostname or "").lower()
    labels = host.split(".")
    if len(labels) > 2 and (labels[1] == "blob" or labels[1:3] == ["privatelink", "blob"]):
        return labels[0]
    first_segment = endpoint.path.strip("/").split("/")[0]
    if first_segment and (host == "localhost" or _is_address(host)):
        return first_segment.lower()
    return None


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _checked_key(key: str, origin: str) -> str:
    try:
        base64.b64decode(key, validate=True)
    except (binascii.Error, ValueError):
        raise invalid_arg(f"the account key from {origin} is not an Azure Storage account "
                          f"key (base64 text)") from None
    return key


def _checked_auth_type(auth_type: str, origin: str) -> None:
    if auth_type.strip().lower() not in KEY_AUTH_TYPES:
        raise invalid_arg(f"{origin} asks for authentication type '{auth_type}': "
                          f"naiad-source-azure reads account keys, SAS tokens and connection "
                          f"strings only (set {CONNECTION_STRING_VAR}, or an account key)")


def resolve_connection(uri: AzureUri, environ: Mapping[str, str] | None = None
                       ) -> Connection:
    """Where and how to reach ``uri``'s account, from the environment (see the module's
    docstring); :func:`invalid_arg` / :func:`not_found` naming the URI and the variable or
    file at fault."""
    env = os.environ if environ is None else environ
    connection_string = env.get(CONNECTION_STRING_VAR, "").strip()
    if connection_string:
        return _from_connection_string(uri, connection_string, env)
    credential_file = env.get(CREDENTIAL_FILE_VAR, "").strip()
    if credential_file:
        entries = _credential_file_entries(uri, Path(credential_file))
        if entries is not None:
            return _from_credential_file(uri, entries, credential_file)
        log.info("%s (%s) has no \"as\" section: %s is reached with %s / %s",
                 CREDENTIAL_FILE_VAR, credential_file, uri.uri, ACCOUNT_VAR, KEY_VAR)
    _checked_auth_type(env.get(AUTH_TYPE_VAR, ""), AUTH_TYPE_VAR)
    return _account_and_key(uri, env.get(ACCOUNT_VAR, ""), env.get(KEY_VAR, ""),
                            f"{ACCOUNT_VAR} / {KEY_VAR}")


def _from_connection_string(uri: AzureUri, text: str, env: Mapping[str, str]) -> Connection:
    fields = connection_string_fields(text)
    account = connection_string_account(fields)
    if account is None:
        log.info("%s names no account (no AccountName, and its BlobEndpoint does not "
                 "show one): %s is read from that endpoint whatever account the URI names",
                 CONNECTION_STRING_VAR, uri.uri)
        account = uri.account
    elif account != uri.account:
        raise invalid_arg(f"'{uri.uri}' names storage account '{uri.account}', but "
                          f"{CONNECTION_STRING_VAR} is for account '{account}': write "
                          f"as://{account}/{uri.container}/{uri.root} or set the connection "
                          f"string of account '{uri.account}'")
    if fields.get("ACCOUNTKEY"):
        _checked_key(fields["ACCOUNTKEY"], CONNECTION_STRING_VAR)
    if env.get(CREDENTIAL_FILE_VAR, "").strip():
        log.info("%s is set: it, not the \"as\" section of %s, says how %s is reached",
                 CONNECTION_STRING_VAR, CREDENTIAL_FILE_VAR, uri.uri)
    connection = Connection(account=account, origin=CONNECTION_STRING_VAR,
                            connection_string=text)
    try:  # let the SDK check what it needs (an endpoint, a credential it can use)
        BlobServiceClient.from_connection_string(text).close()
    except ValueError as exc:
        raise invalid_arg(f"{CONNECTION_STRING_VAR} cannot be used for '{uri.uri}': "
                          f"{exc}") from None
    return connection


def _credential_file_entries(uri: AzureUri, path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise invalid_arg(f"cannot read {CREDENTIAL_FILE_VAR} '{path}' for '{uri.uri}': "
                          f"{exc.strerror or exc}") from None
    except ValueError as exc:
        raise invalid_arg(f"{CREDENTIAL_FILE_VAR} '{path}' is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise invalid_arg(f"{CREDENTIAL_FILE_VAR} '{path}' must hold a JSON object")
    section = data.get("as")
    if section is None:
        return None
    if not isinstance(section, dict):
        raise invalid_arg(f"the \"as\" section of {CREDENTIAL_FILE_VAR} '{path}' must be a "
                          f"JSON object of URI prefixes")
    return section


def _from_credential_file(uri: AzureUri, entries: dict[str, Any], path: str) -> Connection:
    # Triton's rule: the longest entry name the URI starts with ("" matches every URI).
    matches = sorted((name for name in entries if uri.uri.startswith(name)), key=len)
    if not matches:
        raise not_found(f"no credential for '{uri.uri}' in the \"as\" section of "
                        f"{CREDENTIAL_FILE_VAR} '{path}': add an entry named by a prefix "
                        f"of the URI, or \"\" for every as:// URI")
    name = matches[-1]
    entry = entries[name]
    origin = f"{CREDENTIAL_FILE_VAR} '{path}' (entry \"{name}\")"
    if not isinstance(entry, dict) or not all(
            isinstance(value, str) for value in entry.values()):
        raise invalid_arg(f"{origin} must be a JSON object of strings "
                          f"(\"account_str\", \"account_key\")")
    _checked_auth_type(entry.get("auth_type", ""), origin)
    return _account_and_key(uri, entry.get("account_str", ""), entry.get("account_key", ""),
                            origin)


def _account_and_key(uri: AzureUri, account: str, key: str, origin: str) -> Connection:
    account = account.strip().lower() or uri.account
    if account != uri.account:
        # Triton dials the configured account whatever the URI says; so does naiad.
        log.warning("'%s' names storage account '%s', but %s names '%s': reading account "
                    "'%s' (as Triton does)", uri.uri, uri.account, origin, account, account)
    key = key.strip()
    credential = None
    if key:
        credential = {"account_name": account, "account_key": _checked_key(key, origin)}
    else:
        log.info("no account key for %s in %s: anonymous access (public containers only)",
                 uri.uri, origin)
    return Connection(account=account, origin=origin,
                      account_url=f"https://{account}.blob.core.windows.net",
                      credential=credential)
