"""The Azure source's URI forms, settings and credential sources, without a store: what
``open`` accepts, refuses (INVALID_ARG naming the URI and the expected form) and dials."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from azurite_server import ACCOUNT_KEY, connection_string

from naiad.errors import InferenceServerError, Status
from naiad_source_azure import AzureSource, parse_uri, settings_from_env
from naiad_source_azure.credentials import resolve_connection
from naiad_source_azure.repository import safe_relative_path

KEY = ACCOUNT_KEY  # any base64 text serves as an account key here; nothing is dialled


@pytest.mark.parametrize(("uri", "account", "container", "root"), [
    ("as://acct/models", "acct", "models", ""),
    ("as://acct/models/", "acct", "models", ""),
    ("as://acct/models/path/to/repo", "acct", "models", "path/to/repo/"),
    ("as://acct/models/path/to/repo/", "acct", "models", "path/to/repo/"),
    # Triton's form with the account's host name
    ("as://acct.blob.core.windows.net/models/repo", "acct", "models", "repo/"),
    ("as://ACCT/my-models/repo", "acct", "my-models", "repo/"),
    ("as://acct/$root/repo", "acct", "$root", "repo/"),
])
def test_uri_forms(uri: str, account: str, container: str, root: str) -> None:
    parsed = parse_uri(uri)
    assert (parsed.uri, parsed.account, parsed.container, parsed.root) == \
        (uri, account, container, root)


@pytest.mark.parametrize(("uri", "why"), [
    ("as://", "the account is missing"),
    ("as:///models/repo", "the account is missing"),
    ("as://acct", "the container is missing"),
    ("as://acct/", "the container is missing"),
    ("as://a/models", "'a' is not a storage account name"),
    ("as://acct_1/models", "'acct_1' is not a storage account name"),
    ("as://acct/Models", "'Models' is not a container name"),
    ("as://acct/my--models", "'my--models' is not a container name"),
    ("as://acct/models/a/../b", "'..' segment"),
    ("as://acct/models/a//b", "empty"),
    ("as://acct/models/repo?sv=2020&sig=x", "a query or fragment is not read"),
    ("s3://acct/models", "the scheme must be 'as://'"),
])
def test_malformed_uri_is_invalid_arg(uri: str, why: str) -> None:
    with pytest.raises(InferenceServerError) as caught:
        AzureSource().open(uri)
    assert caught.value.status is Status.INVALID_ARG
    message = caught.value.message
    assert f"'{uri}'" in message
    assert why in message
    assert "as://ACCOUNT/CONTAINER[/PATH/TO/REPOSITORY]" in message


def test_settings_defaults_and_overrides() -> None:
    defaults = settings_from_env({})
    assert (defaults.connect_timeout_s, defaults.read_timeout_s, defaults.retries,
            defaults.retry_backoff_s, defaults.list_page_size) == (5.0, 30.0, 2, 0.5, 5000)
    given = settings_from_env({"NAIAD_AZURE_CONNECT_TIMEOUT_S": "1.5",
                               "NAIAD_AZURE_READ_TIMEOUT_S": "10",
                               "NAIAD_AZURE_RETRIES": "0",
                               "NAIAD_AZURE_RETRY_BACKOFF_S": "0",
                               "NAIAD_AZURE_LIST_PAGE_SIZE": "100"})
    assert (given.connect_timeout_s, given.read_timeout_s, given.retries,
            given.retry_backoff_s, given.list_page_size) == (1.5, 10.0, 0, 0.0, 100)


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("NAIAD_AZURE_CONNECT_TIMEOUT_S", "0", "greater than 0"),
    ("NAIAD_AZURE_READ_TIMEOUT_S", "soon", "greater than 0"),
    ("NAIAD_AZURE_RETRY_BACKOFF_S", "-1", "0 or more"),
    ("NAIAD_AZURE_RETRIES", "2.5", "whole number from 0 to 20"),
    ("NAIAD_AZURE_LIST_PAGE_SIZE", "5001", "whole number from 1 to 5000"),
])
def test_bad_setting_names_the_variable(name: str, value: str, expected: str) -> None:
    with pytest.raises(InferenceServerError) as caught:
        settings_from_env({name: value})
    assert caught.value.status is Status.INVALID_ARG
    assert name in caught.value.message and expected in caught.value.message


def test_account_and_key_dial_the_public_endpoint() -> None:
    connection = resolve_connection(parse_uri("as://acct/models/repo"),
                                    {"AZURE_STORAGE_KEY": KEY})
    assert connection.endpoint == "https://acct.blob.core.windows.net"
    assert connection.credential == {"account_name": "acct", "account_key": KEY}


def test_environment_account_wins_over_the_uri_as_in_triton(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "naiad.source.azure"):
        connection = resolve_connection(parse_uri("as://acct/models"),
                                        {"AZURE_STORAGE_ACCOUNT": "other",
                                         "AZURE_STORAGE_KEY": KEY})
    assert connection.account == "other"
    assert connection.endpoint == "https://other.blob.core.windows.net"
    assert "names storage account 'acct', but AZURE_STORAGE_ACCOUNT" in caplog.text


def test_no_key_is_anonymous() -> None:
    connection = resolve_connection(parse_uri("as://acct/models"), {})
    assert connection.credential is None
    assert connection.endpoint == "https://acct.blob.core.windows.net"


def test_key_that_is_not_base64_is_refused_without_showing_it() -> None:
    with pytest.raises(InferenceServerError) as caught:
        resolve_connection(parse_uri("as://acct/models"),
                           {"AZURE_STORAGE_KEY": "not a key!"})
    assert caught.value.status is Status.INVALID_ARG
    assert "AZURE_STORAGE_KEY" in caught.value.message
    assert "not a key!" not in caught.value.message


def test_other_auth_types_are_refused() -> None:
    with pytest.raises(InferenceServerError) as caught:
        resolve_connection(parse_uri("as://acct/models"),
                           {"AZURE_STORAGE_AUTH_TYPE": "managed_identity"})
    assert "AZURE_STORAGE_AUTH_TYPE" in caught.value.message
    assert "managed_identity" in caught.value.message


@pytest.mark.parametrize(("text", "endpoint"), [
    (connection_string(10000), "http://127.0.0.1:10000/devstoreaccount1"),
    ("UseDevelopmentStorage=true", "http://127.0.0.1:10000/devstoreaccount1"),
    (f"DefaultEndpointsProtocol=https;AccountName=devstoreaccount1;AccountKey={KEY};"
     f"EndpointSuffix=core.chinacloudapi.cn",
     "https://devstoreaccount1.blob.core.chinacloudapi.cn"),
    ("BlobEndpoint=https://devstoreaccount1.privatelink.blob.core.windows.net;"
     "SharedAccessSignature=sv=2020-08-04&sig=abc",
     "https://devstoreaccount1.privatelink.blob.core.windows.net"),
])
def test_connection_string_endpoint_is_honoured(text: str, endpoint: str) -> None:
    uri = parse_uri("as://devstoreaccount1/models/repo")
    connection = resolve_connection(uri, {"AZURE_STORAGE_CONNECTION_STRING": text,
                                          "AZURE_STORAGE_ACCOUNT": "ignored",
                                          "AZURE_STORAGE_KEY": KEY})
    assert connection.origin == "AZURE_STORAGE_CONNECTION_STRING"
    assert connection.endpoint == endpoint
    client = connection.client(settings_from_env({}))
    try:
        assert client.url.startswith(endpoint)
    finally:
        client.close()


def test_connection_string_of_another_account_is_refused() -> None:
    with pytest.raises(InferenceServerError) as caught:
        resolve_connection(parse_uri("as://acct/models/repo"),
                           {"AZURE_STORAGE_CONNECTION_STRING": connection_string(10000)})
    assert caught.value.status is Status.INVALID_ARG
    message = caught.value.message
    assert "'as://acct/models/repo' names storage account 'acct'" in message
    assert "AZURE_STORAGE_CONNECTION_STRING is for account 'devstoreaccount1'" in message
    assert ACCOUNT_KEY not in message


@pytest.mark.parametrize("text", ["garbage", "AccountKey=" + KEY])
def test_unusable_connection_string_is_refused_without_showing_it(text: str) -> None:
    with pytest.raises(InferenceServerError) as caught:
        resolve_connection(parse_uri("as://acct/models"),
                           {"AZURE_STORAGE_CONNECTION_STRING": text})
    assert caught.value.status is Status.INVALID_ARG
    assert "AZURE_STORAGE_CONNECTION_STRING" in caught.value.message
    assert KEY not in caught.value.message


def credential_file(tmp_path: Path, content: object) -> dict[str, str]:
    path = tmp_path / "cloud_credential.json"
    path.write_text(json.dumps(content))
    return {"TRITON_CLOUD_CREDENTIAL_PATH": str(path)}


def test_credential_file_longest_prefix_wins(tmp_path: Path) -> None:
    other_key = "b3RoZXIta2V5"
    env = credential_file(tmp_path, {
        "s3": {"": {"key_id": "x"}},
        "as": {"": {"account_str": "", "account_key": KEY},
               "as://acct/special": {"account_str": "acct", "account_key": other_key}}})
    env["AZURE_STORAGE_KEY"] = "bm90LXVzZWQ="  # the file, not the variables, decides
    special = resolve_connection(parse_uri("as://acct/special/repo"), env)
    assert special.credential == {"account_name": "acct", "account_key": other_key}
    assert "entry \"as://acct/special\"" in special.origin
    default = resolve_connection(parse_uri("as://acct/models"), env)
    assert default.credential == {"account_name": "acct", "account_key": KEY}


def test_credential_file_without_a_matching_entry_is_not_found(tmp_path: Path) -> None:
    env = credential_file(tmp_path, {"as": {"as://elsewhere": {"account_key": KEY}}})
    with pytest.raises(InferenceServerError) as caught:
        resolve_connection(parse_uri("as://acct/models"), env)
    assert caught.value.status is Status.NOT_FOUND
    assert "no credential for 'as://acct/models'" in caught.value.message
    assert "TRITON_CLOUD_CREDENTIAL_PATH" in caught.value.message


def test_credential_file_without_an_as_section_leaves_the_variables(tmp_path: Path) -> None:
    env = credential_file(tmp_path, {"gs": {"": "/path/to/key.json"}})
    env["AZURE_STORAGE_KEY"] = KEY
    connection = resolve_connection(parse_uri("as://acct/models"), env)
    assert connection.credential == {"account_name": "acct", "account_key": KEY}


@pytest.mark.parametrize(("content", "why"), [
    ("{not json", "is not JSON"),
    ("[]", "must hold a JSON object"),
    ('{"as": []}', "must be a JSON object of URI prefixes"),
    ('{"as": {"": {"account_key": 7}}}', "must be a JSON object of strings"),
])
def test_bad_credential_file_is_invalid_arg(tmp_path: Path, content: str, why: str) -> None:
    path = tmp_path / "cloud_credential.json"
    path.write_text(content)
    with pytest.raises(InferenceServerError) as caught:
        resolve_connection(parse_uri("as://acct/models"),
                           {"TRITON_CLOUD_CREDENTIAL_PATH": str(path)})
    assert caught.value.status is Status.INVALID_ARG
    assert why in caught.value.message and str(path) in caught.value.message


def test_missing_credential_file_is_invalid_arg(tmp_path: Path) -> None:
    with pytest.raises(InferenceServerError) as caught:
        resolve_connection(parse_uri("as://acct/models"),
                           {"TRITON_CLOUD_CREDENTIAL_PATH": str(tmp_path / "none.json")})
    assert "cannot read TRITON_CLOUD_CREDENTIAL_PATH" in caught.value.message


@pytest.mark.parametrize(("name", "safe"), [
    ("add_sub/1/model.py", True), ("config.pbtxt", True), ("a/../b", False),
    ("../b", False), ("/abs", False), ("a//b", False), ("a/./b", False), ("", False),
])
def test_safe_relative_path(name: str, safe: bool) -> None:
    assert (safe_relative_path(name) == name) is safe
