"""naiad-source-gcs against a real Cloud Storage emulator (gcp-storage-emulator): the
examples' add_sub and a few more files uploaded by the test, listed and downloaded through
the ``gs`` entry point, tags that follow overwrites, and the errors a user meets (a bucket
that does not exist, an endpoint nothing listens on)."""

from __future__ import annotations

from pathlib import Path

import pytest
from gcs_emulator import EXAMPLES, GcsEmulator, upload_tree, uploader_client
from google.cloud.storage import Bucket

from naiad.errors import InferenceServerError, Status
from naiad.plugins import PluginManager
from naiad.testing.server import free_port
from naiad.types import Repository, RepositoryFile
from naiad_source_gcs import GcsSource

ADD_SUB_FILES = {"add_sub/config.pbtxt", "add_sub/1/model.py"}
EXTRA = {"labels/labels.txt": b"cat\ndog\n", "labels/1/model.bin": bytes(range(256)) * 4,
         "labels/config.pbtxt": b'name: "labels"\n'}
# How long the endpoint-down tests retry (NAIAD_GCS_RETRY_DEADLINE_S), in seconds.
RETRY_DEADLINE_S = "1"


@pytest.fixture
def bucket(gcs_emulator: GcsEmulator, bucket_name: str,
           monkeypatch: pytest.MonkeyPatch) -> Bucket:
    """A bucket holding ``models/`` (add_sub, labels, a folder marker) and objects beside it;
    the source pointed at the emulator with Triton's variable."""
    monkeypatch.setenv("CLOUD_STORAGE_EMULATOR_ENDPOINT", gcs_emulator.url)
    created = uploader_client(gcs_emulator.url).create_bucket(bucket_name)
    upload_tree(created, EXAMPLES / "add_sub", "models/add_sub")
    for path, data in EXTRA.items():
        created.blob(f"models/{path}").upload_from_string(data)
    created.blob("models/add_sub/2/").upload_from_string(b"")  # a console-made "folder"
    created.blob("models-old/add_sub/config.pbtxt").upload_from_string(b"not under models/")
    created.blob("README.md").upload_from_string(b"outside the repository")
    return created


def open_repository(uri: str) -> Repository:
    """The repository through the plugin manager, as the server opens it."""
    source = PluginManager().source("gs")
    assert isinstance(source, GcsSource)
    return source.open(uri)


def by_path(files: list[RepositoryFile]) -> dict[str, RepositoryFile]:
    return {file.path: file for file in files}


def test_lists_every_file_under_the_root(bucket: Bucket) -> None:
    repository = open_repository(f"gs://{bucket.name}/models")
    try:
        assert repository.local_path is None
        files = by_path(repository.list_files())
        # no folder marker, nothing from models-old/ or the bucket's root
        assert set(files) == ADD_SUB_FILES | set(EXTRA)
        assert files["add_sub/1/model.py"].size == (
            EXAMPLES / "add_sub" / "1" / "model.py").stat().st_size
        assert files["labels/1/model.bin"].size == 1024
        assert all(file.tag for file in files.values())
    finally:
        repository.close()


def test_lists_by_prefix(bucket: Bucket) -> None:
    repository = open_repository(f"gs://{bucket.name}/models/")
    try:
        assert {file.path for file in repository.list_files("add_sub/")} == ADD_SUB_FILES
        assert repository.list_files("missing/") == []
    finally:
        repository.close()


def test_a_bucket_root_repository(bucket: Bucket) -> None:
    repository = open_repository(f"gs://{bucket.name}")
    try:
        paths = {file.path for file in repository.list_files()}
        assert {"README.md", "models/add_sub/config.pbtxt",
                "models-old/add_sub/config.pbtxt"} <= paths
        assert not any(path.endswith("/") for path in paths)
    finally:
        repository.close()


def test_downloads_each_file(bucket: Bucket, tmp_path: Path) -> None:
    repository = open_repository(f"gs://{bucket.name}/models")
    try:
        files = by_path(repository.list_files())
        for path, file in files.items():
            destination = tmp_path / path.replace("/", "__")
            repository.download(file, destination)
            if path in EXTRA:
                assert destination.read_bytes() == EXTRA[path]
            else:
                assert destination.read_bytes() == (EXAMPLES / path).read_bytes()
    finally:
        repository.close()


def test_tags_change_when_an_object_is_overwritten(bucket: Bucket, tmp_path: Path) -> None:
    repository = open_repository(f"gs://{bucket.name}/models")
    try:
        before = by_path(repository.list_files())
        bucket.blob("models/labels/labels.txt").upload_from_string(b"cat\ndog\nbird\n")
        after = by_path(repository.list_files())
        assert after["labels/labels.txt"].tag != before["labels/labels.txt"].tag
        unchanged = set(before) - {"labels/labels.txt"}
        assert {path: after[path].tag for path in unchanged} == {
            path: before[path].tag for path in unchanged}
        repository.download(after["labels/labels.txt"], tmp_path / "labels.txt")
        assert (tmp_path / "labels.txt").read_bytes() == b"cat\ndog\nbird\n"
    finally:
        repository.close()


def test_the_python_clients_emulator_variable(bucket: Bucket, gcs_emulator: GcsEmulator,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # STORAGE_EMULATOR_HOST as the Python client reads it, here without a scheme
    monkeypatch.delenv("CLOUD_STORAGE_EMULATOR_ENDPOINT")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"127.0.0.1:{gcs_emulator.port}")
    repository = open_repository(f"gs://{bucket.name}/models")
    try:
        assert {file.path for file in repository.list_files("add_sub/")} == ADD_SUB_FILES
    finally:
        repository.close()


def test_a_bucket_that_does_not_exist(gcs_emulator: GcsEmulator,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLOUD_STORAGE_EMULATOR_ENDPOINT", gcs_emulator.url)
    repository = open_repository("gs://no-such-bucket/models")
    with pytest.raises(InferenceServerError) as caught:
        repository.list_files()
    assert caught.value.status is Status.NOT_FOUND
    assert caught.value.message == ("model repository 'gs://no-such-bucket/models': the "
                                    "bucket 'no-such-bucket' does not exist")


@pytest.mark.timeout(60)  # the Google client's own retry deadline is 120 s
def test_an_endpoint_that_is_down(bucket: Bucket, monkeypatch: pytest.MonkeyPatch,
                                  tmp_path: Path) -> None:
    listed = by_path(open_repository(f"gs://{bucket.name}/models").list_files())
    down = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("CLOUD_STORAGE_EMULATOR_ENDPOINT", down)
    monkeypatch.setenv("NAIAD_GCS_RETRY_DEADLINE_S", RETRY_DEADLINE_S)
    repository = open_repository(f"gs://{bucket.name}/models")
    with pytest.raises(InferenceServerError) as caught:
        repository.list_files()
    assert caught.value.status is Status.UNAVAILABLE
    assert caught.value.message == (
        f"model repository 'gs://{bucket.name}/models': listing failed: cannot reach {down} "
        f"(from CLOUD_STORAGE_EMULATOR_ENDPOINT): connection refused (retried for 1 s, "
        f"NAIAD_GCS_RETRY_DEADLINE_S)")
    with pytest.raises(InferenceServerError) as caught:
        repository.download(listed["add_sub/config.pbtxt"], tmp_path / "config.pbtxt")
    assert caught.value.status is Status.UNAVAILABLE
    assert caught.value.message.startswith(
        f"model repository 'gs://{bucket.name}/models': downloading 'add_sub/config.pbtxt' "
        f"failed: cannot reach {down}")
    assert "\n" not in caught.value.message


@pytest.mark.parametrize(("uri", "why"), [
    ("gs://", "'' is not a bucket name"),
    ("gs:///models", "'' is not a bucket name"),
    ("gs://My_Bucket/models", "'My_Bucket' is not a bucket name"),
    ("gs://ab/models", "'ab' is not a bucket name"),
    ("gs://-bucket/models", "'-bucket' is not a bucket name"),
    ("gs://bucket/models/../secrets", "the path 'models/../secrets' has an empty, '.' or '..'"),
    ("gs://bucket/models//add_sub", "the path 'models//add_sub' has an empty"),
    ("s3://bucket/models", "is not a gs:// URI"),
])
def test_malformed_uris(uri: str, why: str) -> None:
    with pytest.raises(InferenceServerError) as caught:
        open_repository(uri)
    assert caught.value.status is Status.INVALID_ARG
    assert caught.value.message.startswith(f"model repository '{uri}'")
    assert why in caught.value.message
    assert "expected gs://BUCKET or gs://BUCKET/PATH" in caught.value.message
