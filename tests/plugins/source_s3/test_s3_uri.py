"""The S3 source's URI forms (Triton's), its credential choice (Triton's cloud credential
file) and its settings, without a store."""

from __future__ import annotations

import json

import pytest

from naiad.errors import InferenceServerError, Status
from naiad.plugins import PluginManager
from naiad.types import RepositorySource
from naiad_source_s3.credentials import STANDARD_CHAIN, resolve_credentials
from naiad_source_s3.settings import S3Settings, read_settings
from naiad_source_s3.uri import parse_s3_uri


@pytest.mark.parametrize(("uri", "endpoint", "bucket", "prefix"), [
    ("s3://models", None, "models", ""),
    ("s3://models/", None, "models", ""),
    ("s3://my-bucket/path/to/repo", None, "my-bucket", "path/to/repo/"),
    ("s3://my-bucket//path///to/repo//", None, "my-bucket", "path/to/repo/"),
    ("s3://minio.local:9000/bucket/repo", "http://minio.local:9000", "bucket", "repo/"),
    ("s3://10.0.0.5:9000/bucket", "http://10.0.0.5:9000", "bucket", ""),
    ("s3://http://127.0.0.1:5000/bucket/a/b", "http://127.0.0.1:5000", "bucket", "a/b/"),
    ("s3://https://s3.us-west-004.backblazeb2.com:443/my-bucket/models",
     "https://s3.us-west-004.backblazeb2.com:443", "my-bucket", "models/"),
    ("s3://https://storage.example.com/bucket/repo", "https://storage.example.com", "bucket",
     "repo/"),
    ("s3://http://[::1]:9000/bucket/repo", "http://[::1]:9000", "bucket", "repo/"),
    ("s3://bucket.with.dots/model repo/v 1", None, "bucket.with.dots", "model repo/v 1/"),
])
def test_triton_uri_forms(uri, endpoint, bucket, prefix):
    location = parse_s3_uri(uri)
    assert (location.endpoint_url, location.bucket, location.prefix) == (endpoint, bucket,
                                                                          prefix)
    assert location.uri == uri


@pytest.mark.parametrize(("uri", "why"), [
    ("s3://", "names no bucket"),
    ("s3:///", "names no bucket"),
    ("gs://bucket/repo", "does not start with s3://"),
    ("s3://host:9000", "names no bucket after the endpoint"),
    ("s3://https://host:9000/", "names no bucket after the endpoint"),
    ("s3://host:99999/bucket", "port 99999 is out of range"),
    ("s3://host:port/bucket", "'host:port' is not a host name"),
    ("s3://https://ho_st:9000/bucket", "'ho_st:9000' is not a host name"),
    ("s3://ab/repo", "'ab' is not an S3 bucket name"),
    ("s3://-bucket-/repo", "'-bucket-' is not an S3 bucket name"),
    ("s3://bucket/repo/../other", "holds a '..' folder"),
    ("s3://bucket/./repo", "holds a '.' folder"),
])
def test_malformed_uri_is_refused_naming_it_and_the_forms(uri, why):
    with pytest.raises(InferenceServerError) as caught:
        parse_s3_uri(uri)
    assert caught.value.status is Status.INVALID_ARG
    assert f"'{uri}'" in caught.value.message
    assert why in caught.value.message
    assert "s3://BUCKET/PATH" in caught.value.message
    assert "\n" not in caught.value.message


def test_the_s3_entry_point_gives_the_source():
    source = PluginManager().source("s3")
    assert isinstance(source, RepositorySource)
    assert type(source).__module__ == "naiad_source_s3.repository"


def test_malformed_uri_is_refused_when_opened():
    with pytest.raises(InferenceServerError) as caught:
        PluginManager().source("s3").open("s3://x")
    assert caught.value.status is Status.INVALID_ARG


# --- credentials ------------------------------------------------------------------------------


def credential_file(tmp_path, document) -> dict[str, str]:
    path = tmp_path / "cloud_credential.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return {"TRITON_CLOUD_CREDENTIAL_PATH": str(path)}


def test_without_the_credential_file_the_aws_chain_decides():
    assert resolve_credentials("s3://bucket/repo", environ={}) is STANDARD_CHAIN
    assert STANDARD_CHAIN.session_arguments() == {}


def test_the_longest_matching_prefix_of_the_credential_file_wins(tmp_path):
    environ = credential_file(tmp_path, {
        "gs": {"": "/path/to/gcs.json"},
        "s3": {
            "": {"key_id": "DEFAULT", "secret_key": "d", "region": "us-east-1",
                 "session_token": "", "profile": ""},
            "s3://bucket-002": {"key_id": "SECOND", "secret_key": "s", "region": "eu-west-1",
                                "session_token": "token", "profile": ""},
            "s3://bucket-002/deeper": {"profile": "deeper"},
        },
    })
    second = resolve_credentials("s3://bucket-002/repo", environ)
    assert second.session_arguments() == {
        "aws_access_key_id": "SECOND", "aws_secret_access_key": "s",
        "aws_session_token": "token", "region_name": "eu-west-1"}
    assert "s3://bucket-002" in second.source
    assert resolve_credentials("s3://bucket-002/deeper/repo", environ).session_arguments() \
        == {"profile_name": "deeper"}
    assert resolve_credentials("s3://other/repo", environ).session_arguments() == {
        "aws_access_key_id": "DEFAULT", "aws_secret_access_key": "d",
        "region_name": "us-east-1"}


def test_an_empty_entry_means_the_aws_chain(tmp_path):
    environ = credential_file(tmp_path, {"s3": {"": {"key_id": "", "secret_key": "",
                                                     "profile": ""}}})
    assert resolve_credentials("s3://bucket", environ).session_arguments() == {}


@pytest.mark.parametrize(("document", "expected"), [
    ({"s3": {"s3://other": {"key_id": "k", "secret_key": "s"}}},
     "no \"s3\" entry matches 's3://bucket/repo'"),
    ({"gs": {}}, "no \"s3\" entry matches"),
    ("{not json", "not a JSON file"),
    ({"s3": []}, "expected a JSON object"),
    ({"s3": {"": "a path"}}, "expected an object"),
    ({"s3": {"": {"key_id": "k", "secret": "s"}}}, "unknown key 'secret'"),
    ({"s3": {"": {"key_id": "k"}}}, "'key_id' and 'secret_key' go together"),
    ({"s3": {"": {"key_id": 1, "secret_key": "s"}}}, "'key_id' must be a string"),
])
def test_a_bad_credential_file_is_refused_naming_it(tmp_path, document, expected):
    environ = credential_file(tmp_path, document)
    with pytest.raises(InferenceServerError) as caught:
        resolve_credentials("s3://bucket/repo", environ)
    assert caught.value.status is Status.INVALID_ARG
    assert environ["TRITON_CLOUD_CREDENTIAL_PATH"] in caught.value.message
    assert expected in caught.value.message


def test_a_missing_credential_file_is_refused(tmp_path):
    environ = {"TRITON_CLOUD_CREDENTIAL_PATH": str(tmp_path / "absent.json")}
    with pytest.raises(InferenceServerError) as caught:
        resolve_credentials("s3://bucket/repo", environ)
    assert "cannot read it" in caught.value.message


# --- settings ---------------------------------------------------------------------------------


def test_settings_defaults_and_values():
    assert read_settings({}) == S3Settings()
    assert read_settings({
        "NAIAD_S3_CONNECT_TIMEOUT_S": "0.5", "NAIAD_S3_READ_TIMEOUT_S": "30",
        "NAIAD_S3_MAX_ATTEMPTS": "1", "NAIAD_S3_MAX_POOL_CONNECTIONS": "4",
        "NAIAD_S3_LIST_PAGE_SIZE": "2",
    }) == S3Settings(0.5, 30.0, 1, 4, 2)


@pytest.mark.parametrize(("name", "value"), [
    ("NAIAD_S3_CONNECT_TIMEOUT_S", "0"),
    ("NAIAD_S3_CONNECT_TIMEOUT_S", "soon"),
    ("NAIAD_S3_READ_TIMEOUT_S", "-1"),
    ("NAIAD_S3_READ_TIMEOUT_S", "inf"),
    ("NAIAD_S3_MAX_ATTEMPTS", "0"),
    ("NAIAD_S3_MAX_ATTEMPTS", "2.5"),
    ("NAIAD_S3_MAX_POOL_CONNECTIONS", "none"),
    ("NAIAD_S3_LIST_PAGE_SIZE", "1001"),
])
def test_a_bad_setting_is_refused_naming_the_variable(name, value):
    with pytest.raises(InferenceServerError) as caught:
        read_settings({name: value})
    assert caught.value.status is Status.INVALID_ARG
    assert f"{name}={value}" in caught.value.message
