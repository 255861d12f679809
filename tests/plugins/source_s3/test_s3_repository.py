"""The S3 source against a real S3 server (moto's server mode): listing (all, by prefix, page
by page), downloads, tags, and every way reaching the store can fail."""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor

import pytest
from moto_s3_server import REGION
from s3_buckets import PREFIX, new_bucket_name

from naiad.errors import InferenceServerError, Status
from naiad.plugins import PluginManager
from naiad.testing.server import free_port
from naiad.types import RepositoryFile


def open_repository(uri: str):
    return PluginManager().source("s3").open(uri)


def failure(call, status: Status) -> str:
    """The message of the error ``call`` raises, checked to have ``status`` and one line."""
    with pytest.raises(InferenceServerError) as caught:
        call()
    assert caught.value.status is status, caught.value
    assert "\n" not in caught.value.message
    assert "Traceback" not in caught.value.message
    return caught.value.message


def count_calls(repository, operation: str) -> list[str]:
    """Records each HTTP request of ``operation`` the repository's client sends (retries
    included)."""
    sent: list[str] = []
    repository._client.meta.events.register(
        f"before-send.s3.{operation}", lambda request, **_: sent.append(request.url))
    return sent


# --- listing ----------------------------------------------------------------------------------


def test_lists_every_file_of_the_repository_and_nothing_beside_it(bucket):
    repository = open_repository(bucket.uri)
    try:
        listed = repository.list_files()
    finally:
        repository.close()
    assert repository.local_path is None
    assert [file.path for file in listed] == sorted(bucket.files)
    assert {file.path: file.size for file in listed} == {
        path: len(content) for path, content in bucket.files.items()}
    assert all(file.tag for file in listed)
    assert "add_sub/1/model.py" in bucket.files  # the example itself is there


def test_lists_under_a_prefix(bucket):
    repository = open_repository(bucket.uri)
    listed = repository.list_files("identity/")
    assert [file.path for file in listed] == ["identity/1/weights/part-0.bin",
                                              "identity/config.pbtxt"]
    assert repository.list_files("absent/") == []


def test_a_repository_at_the_bucket_root(bucket):
    repository = open_repository(bucket.server.uri(bucket.name))
    paths = {file.path for file in repository.list_files()}
    assert {"README.md", f"{PREFIX}/add_sub/config.pbtxt",
            f"{PREFIX}-old/add_sub/config.pbtxt"} <= paths
    assert f"{PREFIX}/add_sub/2/" not in paths


def test_lists_page_by_page(bucket, monkeypatch):
    monkeypatch.setenv("NAIAD_S3_LIST_PAGE_SIZE", "2")
    repository = open_repository(bucket.uri)
    sent = count_calls(repository, "ListObjectsV2")
    listed = repository.list_files()
    assert [file.path for file in listed] == sorted(bucket.files)
    # Five files and a folder marker, two keys a page.
    assert len(bucket.files) == 5
    assert len(sent) == 3
    assert all("max-keys=2" in url for url in sent)


def test_lists_more_objects_than_one_page_of_s3(bucket):
    many = {f"many/1/part-{index:04d}.bin": str(index).encode() for index in range(1005)}
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda item: bucket.put(*item), many.items()))
    repository = open_repository(bucket.uri)
    sent = count_calls(repository, "ListObjectsV2")
    listed = repository.list_files("many/")
    assert [file.path for file in listed] == sorted(many)
    assert len(sent) == 2  # S3 answers at most 1000 keys a call


def test_keys_that_are_not_paths_are_skipped_with_a_log_line(bucket, caplog):
    for key in (f"{PREFIX}/evil/../../escape.txt", f"{PREFIX}//rooted.txt",
                f"{PREFIX}/odd/./dot.txt"):
        bucket.put_key(key, b"x")
    repository = open_repository(bucket.uri)
    with caplog.at_level(logging.WARNING, logger="naiad.source.s3"):
        listed = repository.list_files()
        repository.list_files()  # said once, not at every poll
    assert [file.path for file in listed] == sorted(bucket.files)
    refused = [record.getMessage() for record in caplog.records]
    assert len(refused) == 3
    assert all(bucket.uri in line and "skipping object" in line for line in refused)
    assert any("evil/../../escape.txt" in line for line in refused)


# --- downloading ------------------------------------------------------------------------------


def test_downloads_each_file_as_uploaded(bucket, tmp_path):
    repository = open_repository(bucket.uri)
    for index, file in enumerate(repository.list_files()):
        destination = tmp_path / f"file-{index}"
        repository.download(file, destination)
        assert destination.read_bytes() == bucket.files[file.path], file.path


def test_downloads_several_files_at_once(bucket, tmp_path):
    repository = open_repository(bucket.uri)
    listed = repository.list_files()
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda pair: repository.download(pair[1], tmp_path / str(pair[0])),
                      enumerate(listed)))
    for index, file in enumerate(listed):
        assert (tmp_path / str(index)).read_bytes() == bucket.files[file.path]


def test_the_tag_changes_with_the_content(bucket):
    repository = open_repository(bucket.uri)
    before = {file.path: file.tag for file in repository.list_files()}
    bucket.put("add_sub/labels.txt", b"other labels\n")
    after = {file.path: file.tag for file in repository.list_files()}
    assert after["add_sub/labels.txt"] != before["add_sub/labels.txt"]
    assert {p: t for p, t in after.items() if p != "add_sub/labels.txt"} == {
        p: t for p, t in before.items() if p != "add_sub/labels.txt"}


def test_an_object_replaced_after_the_listing_is_not_downloaded(bucket, tmp_path):
    repository = open_repository(bucket.uri)
    (listed,) = [f for f in repository.list_files() if f.path == "add_sub/labels.txt"]
    bucket.put("add_sub/labels.txt", b"replaced\n")
    message = failure(lambda: repository.download(listed, tmp_path / "labels"),
                      Status.UNAVAILABLE)
    assert bucket.uri in message and "changed after it was listed" in message


def test_an_object_removed_after_the_listing_is_not_found(bucket, tmp_path):
    repository = open_repository(bucket.uri)
    (listed,) = [f for f in repository.list_files() if f.path == "add_sub/labels.txt"]
    bucket.delete("add_sub/labels.txt")
    message = failure(lambda: repository.download(listed, tmp_path / "labels"),
                      Status.NOT_FOUND)
    assert bucket.uri in message and f"{PREFIX}/add_sub/labels.txt" in message


def test_a_file_the_core_names_without_a_tag_it_knows_is_downloaded(bucket, tmp_path):
    repository = open_repository(bucket.uri)
    content = bucket.files["add_sub/config.pbtxt"]
    repository.download(RepositoryFile("add_sub/config.pbtxt", len(content), "1-2"),
                        tmp_path / "config")
    assert (tmp_path / "config").read_bytes() == content


# --- failures ---------------------------------------------------------------------------------


def test_a_missing_bucket_is_not_found(aws_env):
    uri = aws_env.uri(new_bucket_name(), "models")
    message = failure(lambda: open_repository(uri).list_files(), Status.NOT_FOUND)
    assert f"'{uri}'" in message and "does not exist" in message


@pytest.mark.parametrize("wrong", ["key_id", "secret_key"])
def test_wrong_credentials_are_refused(bucket, monkeypatch, wrong):
    if wrong == "key_id":
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE")
    else:
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    message = failure(lambda: open_repository(bucket.uri).list_files(), Status.UNAVAILABLE)
    assert f"'{bucket.uri}'" in message and "access refused" in message
    assert ("InvalidAccessKeyId" if wrong == "key_id" else "SignatureDoesNotMatch") in message
    assert "not-the-secret" not in message


def test_no_credentials_at_all_says_where_to_put_them(bucket, monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    message = failure(lambda: open_repository(bucket.uri).list_files(), Status.UNAVAILABLE)
    assert "no AWS credentials found" in message and "AWS_ACCESS_KEY_ID" in message


@pytest.mark.timeout(60)  # a guard against a hang, not a measure
def test_an_endpoint_that_is_down_fails_after_the_set_attempts(aws_env, monkeypatch):
    monkeypatch.setenv("NAIAD_S3_MAX_ATTEMPTS", "2")
    uri = f"s3://http://127.0.0.1:{free_port()}/bucket/models"
    repository = open_repository(uri)
    sent = count_calls(repository, "ListObjectsV2")
    message = failure(repository.list_files, Status.UNAVAILABLE)
    assert f"'{uri}'" in message and "cannot connect to http://127.0.0.1:" in message
    assert "connection refused" in message and "2 attempts" in message
    assert len(sent) == 2


def test_the_default_limits_are_small(aws_env):
    repository = open_repository(aws_env.uri("bucket"))
    config = repository._client.meta.config
    assert (config.connect_timeout, config.read_timeout) == (2, 10)
    assert config.retries == {"total_max_attempts": 3, "mode": "standard"}


# --- credentials as Triton reads them ---------------------------------------------------------


def test_the_credential_file_gives_the_key_of_the_longest_prefix(bucket, tmp_path,
                                                                 monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    server = bucket.server
    path = tmp_path / "cloud_credential.json"
    path.write_text(json.dumps({"s3": {
        "": {"key_id": "AKIAIOSFODNN7EXAMPLE", "secret_key": "wrong", "region": REGION},
        f"s3://{server.endpoint}/{bucket.name}": {
            "key_id": server.key_id, "secret_key": server.secret_key, "region": REGION,
            "session_token": "", "profile": ""},
    }}))
    monkeypatch.setenv("TRITON_CLOUD_CREDENTIAL_PATH", str(path))
    assert [f.path for f in open_repository(bucket.uri).list_files()] == sorted(bucket.files)
    other = server.uri(new_bucket_name(), "models")  # only "" matches: the wrong key
    message = failure(lambda: open_repository(other).list_files(), Status.UNAVAILABLE)
    assert "access refused" in message and "TRITON_CLOUD_CREDENTIAL_PATH" in message


def test_a_profile_of_the_aws_configuration(bucket, tmp_path, monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    credentials = tmp_path / "credentials"
    credentials.write_text(f"[naiad]\naws_access_key_id = {bucket.server.key_id}\n"
                           f"aws_secret_access_key = {bucket.server.secret_key}\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_PROFILE", "naiad")
    assert [f.path for f in open_repository(bucket.uri).list_files()] == sorted(bucket.files)
    monkeypatch.setenv("AWS_PROFILE", "absent")
    message = failure(lambda: open_repository(bucket.uri), Status.INVALID_ARG)
    assert f"'{bucket.uri}'" in message and "absent" in message
