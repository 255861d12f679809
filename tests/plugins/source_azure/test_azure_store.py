"""The Azure source against a real Azurite: listing (all, by prefix, every page), downloads,
tags that follow the content, and the errors a user meets (a missing container, a refused
key, an endpoint that is down), each one line naming the URI and the cause."""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path

import pytest
from azure.storage.blob import ContainerClient
from azurite_server import ACCOUNT, Azurite, connection_string, upload_folder

from naiad.errors import InferenceServerError, Status
from naiad.testing.server import free_port
from naiad_source_azure import AzureRepository, AzureSource, parse_uri, settings_from_env
from naiad_source_azure.credentials import resolve_connection

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "model_repository"
WRONG_KEY = "d3Jvbmcta2V5LW9mLXRoZS1yaWdodC1sZW5ndGgtZm9yLWF6dXJpdGUtdGVzdHM="


@pytest.fixture
def env(azurite: Azurite, monkeypatch: pytest.MonkeyPatch) -> None:
    """The process environment a user of the emulator sets: its connection string."""
    for name in ("TRITON_CLOUD_CREDENTIAL_PATH", "AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)


def uri_of(container: ContainerClient, path: str = "repo") -> str:
    return f"as://{ACCOUNT}/{container.container_name}/{path}"


@pytest.fixture
def repository(env: None, container: ContainerClient) -> AzureRepository:
    """add_sub and a few extra files under ``repo/``, with folder markers and files
    outside the root; opened through the plugin as the server opens it."""
    upload_folder(container, EXAMPLES / "add_sub", "repo/add_sub/")
    upload_folder(container, EXAMPLES / "mul", "repo/mul/")
    container.upload_blob("repo/add_sub/1/data/weights.bin", bytes(range(256)) * 40)
    container.upload_blob("repo/README", b"a file at the root")
    container.upload_blob("repo/add_sub/", b"")  # folder markers
    container.upload_blob("repo/mul/1/", b"")
    container.upload_blob("repository-next/x/config.pbtxt", b"")  # beside the root
    container.upload_blob("other/add_sub/config.pbtxt", b"")
    return AzureSource().open(uri_of(container))


def test_lists_every_file_under_the_root(repository: AzureRepository,
                                        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "naiad.source.azure"):
        listed = repository.list_files()
    assert "skipping" not in caplog.text  # folder markers are left out without a word
    assert [f.path for f in listed] == [
        "README", "add_sub/1/data/weights.bin", "add_sub/1/model.py", "add_sub/config.pbtxt",
        "mul/1/model.py", "mul/config.pbtxt"]
    sizes = {f.path: f.size for f in listed}
    assert sizes["add_sub/1/data/weights.bin"] == 10240
    assert sizes["add_sub/config.pbtxt"] == (EXAMPLES / "add_sub/config.pbtxt").stat().st_size
    assert all(f.tag for f in listed)
    assert repository.local_path is None


def test_lists_by_prefix(repository: AzureRepository) -> None:
    assert [f.path for f in repository.list_files("mul/")] == [
        "mul/1/model.py", "mul/config.pbtxt"]
    assert repository.list_files("absent/") == []


def test_root_of_the_whole_container(env: None, container: ContainerClient) -> None:
    container.upload_blob("add_sub/config.pbtxt", b"name: 'add_sub'")
    repository = AzureSource().open(f"as://{ACCOUNT}/{container.container_name}")
    assert [f.path for f in repository.list_files()] == ["add_sub/config.pbtxt"]


def test_lists_every_page(env: None, container: ContainerClient, azurite: Azurite) -> None:
    names = [f"big/{i // 10}/file-{i:03d}" for i in range(53)]
    for name in names:
        container.upload_blob(f"repo/{name}", name.encode())
    uri = parse_uri(uri_of(container))
    settings = dataclasses.replace(settings_from_env({}), list_page_size=7)
    repository = AzureRepository(uri, resolve_connection(uri), settings)
    assert [f.path for f in repository.list_files()] == sorted(names)
    assert len(repository.list_files("big/3/")) == 10


def test_download_writes_the_content(repository: AzureRepository, tmp_path: Path) -> None:
    listed = {f.path: f for f in repository.list_files()}
    for path, local in (("add_sub/1/model.py", EXAMPLES / "add_sub/1/model.py"),
                        ("add_sub/config.pbtxt", EXAMPLES / "add_sub/config.pbtxt")):
        destination = tmp_path / path.replace("/", "_")
        destination.touch()  # the core hands over a file that exists
        repository.download(listed[path], destination)
        assert destination.read_bytes() == local.read_bytes()
    destination = tmp_path / "weights"
    repository.download(listed["add_sub/1/data/weights.bin"], destination)
    assert destination.read_bytes() == bytes(range(256)) * 40


def test_tag_changes_when_a_blob_is_overwritten(repository: AzureRepository,
                                                container: ContainerClient,
                                                tmp_path: Path) -> None:
    before = {f.path: f for f in repository.list_files()}
    container.upload_blob("repo/mul/config.pbtxt", b"name: 'mul'\n# changed\n", overwrite=True)
    after = {f.path: f for f in repository.list_files()}
    assert after["mul/config.pbtxt"].tag != before["mul/config.pbtxt"].tag
    unchanged = [p for p in before if p != "mul/config.pbtxt"]
    assert all(after[p].tag == before[p].tag for p in unchanged)
    # The same content uploaded again is a new write: a new tag (the core then finds the
    # content it already has by its hash)
    container.upload_blob("repo/mul/1/model.py", (EXAMPLES / "mul/1/model.py").read_bytes(),
                          overwrite=True)
    assert repository.list_files("mul/1/")[0].tag != before["mul/1/model.py"].tag
    # A download of what was listed before the overwrite fails rather than mix contents
    with pytest.raises(InferenceServerError) as caught:
        repository.download(before["mul/config.pbtxt"], tmp_path / "stale")
    assert caught.value.status is Status.UNAVAILABLE
    assert "changed after it was listed" in caught.value.message
    repository.download(after["mul/config.pbtxt"], tmp_path / "fresh")
    assert (tmp_path / "fresh").read_bytes() == b"name: 'mul'\n# changed\n"


def test_unsafe_names_are_skipped_with_a_warning(env: None, container: ContainerClient,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    container.upload_blob("repo/m/config.pbtxt", b"")
    container.upload_blob("repo//m/1/model.py", b"")  # an empty segment
    # The HTTP client removes "." and ".." from a URL's path, but the service reads "\\" as
    # "/": this blob is listed as "repo/m/../../evil"
    container.upload_blob("repo/m\\..\\..\\evil", b"")
    repository = AzureSource().open(uri_of(container))
    with caplog.at_level(logging.WARNING, "naiad.source.azure"):
        assert [f.path for f in repository.list_files()] == ["m/config.pbtxt"]
    assert "skipping blob 'repo//m/1/model.py'" in caplog.text
    assert "skipping blob 'repo/m/../../evil'" in caplog.text


def test_hierarchical_namespace_folders_are_skipped(env: None,
                                                    container: ContainerClient) -> None:
    container.upload_blob("repo/m/1", b"", metadata={"hdi_isfolder": "true"})
    container.upload_blob("repo/m/1/model.py", b"pass")
    repository = AzureSource().open(uri_of(container))
    assert [f.path for f in repository.list_files()] == ["m/1/model.py"]


def assert_one_line(error: InferenceServerError, uri: str) -> None:
    message = error.message
    assert f"'{uri}'" in message
    assert "\n" not in message
    assert "Traceback" not in message and "object at 0x" not in message
    assert "RequestId" not in message


def test_missing_container_is_not_found(env: None, azurite: Azurite) -> None:
    uri = f"as://{ACCOUNT}/no-such-container/repo"
    repository = AzureSource().open(uri)
    with pytest.raises(InferenceServerError) as caught:
        repository.list_files()
    assert caught.value.status is Status.NOT_FOUND
    assert "the container does not exist" in caught.value.message
    assert f"http://127.0.0.1:{azurite.port}/{ACCOUNT}" in caught.value.message
    assert_one_line(caught.value, uri)


def test_wrong_key_is_access_denied(container: ContainerClient, azurite: Azurite,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    container.upload_blob("repo/m/config.pbtxt", b"")
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING",
                       connection_string(azurite.port, key=WRONG_KEY))
    uri = uri_of(container)
    repository = AzureSource().open(uri)
    with pytest.raises(InferenceServerError) as caught:
        repository.list_files()
    assert caught.value.status is Status.UNAVAILABLE
    assert "access denied while listing (AuthorizationFailure)" in caught.value.message
    assert WRONG_KEY not in caught.value.message
    assert_one_line(caught.value, uri)


def test_endpoint_down_fails_within_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()  # nothing listens there
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", connection_string(port))
    uri = f"as://{ACCOUNT}/models/repo"
    repository = AzureSource().open(uri)
    started = time.monotonic()
    with pytest.raises(InferenceServerError) as caught:
        repository.list_files()
    took = time.monotonic() - started
    assert caught.value.status is Status.UNAVAILABLE
    message = caught.value.message
    assert f"cannot reach http://127.0.0.1:{port}/{ACCOUNT} while listing" in message
    assert "Connection refused" in message
    assert_one_line(caught.value, uri)
    # two retries, half a second apart by default: the settings bound the wait, not the SDK's
    # 15-second backoffs (the bound is generous: this checks the order of magnitude)
    assert took < 20, took
