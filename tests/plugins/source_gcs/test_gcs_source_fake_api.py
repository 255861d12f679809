"""naiad-source-gcs against FakeGcsServer (the test double of the JSON API, fake_gcs.py) for
what the emulator cannot show: listings of several pages, object names that are not safe
paths, a download of a generation overwritten since it was listed, and credentials (Triton's
credential file, application default credentials) that the store accepts or refuses."""

from __future__ import annotations

import json
import logging
import socket
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from fake_gcs import FakeGcsServer
from gcs_emulator import uploader_client
from google.cloud.storage import Bucket

from naiad.errors import InferenceServerError, Status
from naiad.testing.server import free_port
from naiad.types import RepositoryFile
from naiad_source_gcs import GcsRepository, GcsSource

READER = "reader@naiad-test.iam.gserviceaccount.com"
OUTSIDER = "outsider@naiad-test.iam.gserviceaccount.com"


def fill(fake: FakeGcsServer, bucket_name: str, objects: dict[str, bytes]) -> Bucket:
    bucket = uploader_client(fake.url).create_bucket(bucket_name)
    for name, data in objects.items():
        bucket.blob(name).upload_from_string(data)
    return bucket


def open_repository(uri: str) -> GcsRepository:
    return GcsSource().open(uri)


def listed(uri: str) -> list[RepositoryFile]:
    repository = open_repository(uri)
    try:
        return repository.list_files()
    finally:
        repository.close()


# --- listing -------------------------------------------------------------------------------


def test_listing_follows_every_page(fake_gcs: FakeGcsServer, bucket_name: str,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    names = [f"models/m/{version}/model.bin" for version in range(1, 8)]
    fill(fake_gcs, bucket_name, {name: name.encode() for name in names})
    monkeypatch.setenv("CLOUD_STORAGE_EMULATOR_ENDPOINT", fake_gcs.url)
    monkeypatch.setenv("NAIAD_GCS_LIST_PAGE_SIZE", "2")
    files = listed(f"gs://{bucket_name}/models")
    assert [file.path for file in files] == [name.removeprefix("models/") for name in names]
    pages = fake_gcs.list_requests(bucket_name)
    assert [page.get("maxResults") for page in pages] == [["2"]] * 4
    assert [page.get("pageToken") for page in pages] == [
        None, ["models/m/2/model.bin"], ["models/m/4/model.bin"], ["models/m/6/model.bin"]]


def test_unsafe_names_and_folder_markers_are_skipped(
        fake_gcs: FakeGcsServer, bucket_name: str, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    unsafe = ["models/m/../../etc/passwd", "models//m/config.pbtxt", "models/m/./1/x",
              "models/m/1/.."]
    fill(fake_gcs, bucket_name, {"models/m/config.pbtxt": b"ok", "models/m/1/": b"",
                                 **{name: b"bad" for name in unsafe}})
    monkeypatch.setenv("CLOUD_STORAGE_EMULATOR_ENDPOINT", fake_gcs.url)
    repository = open_repository(f"gs://{bucket_name}/models")
    try:
        with caplog.at_level(logging.WARNING, logger="naiad.source.gcs"):
            for _ in range(2):
                assert [file.path for file in repository.list_files()] == ["m/config.pbtxt"]
    finally:
        repository.close()
    warned = [record.getMessage() for record in caplog.records]
    # one line per refused name, not one per listing
    assert len(warned) == len(unsafe)
    for name in unsafe:
        assert sum(f"skipping the object '{name}'" in line for line in warned) == 1


def test_a_download_gets_the_generation_that_was_listed(
        fake_gcs: FakeGcsServer, bucket_name: str, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    bucket = fill(fake_gcs, bucket_name, {"models/m/config.pbtxt": b"first"})
    monkeypatch.setenv("CLOUD_STORAGE_EMULATOR_ENDPOINT", fake_gcs.url)
    repository = open_repository(f"gs://{bucket_name}/models")
    try:
        [first] = repository.list_files()
        bucket.blob("models/m/config.pbtxt").upload_from_string(b"second")
        with pytest.raises(InferenceServerError) as caught:
            repository.download(first, tmp_path / "old")
        assert caught.value.status is Status.NOT_FOUND
        assert caught.value.message == (
            f"model repository 'gs://{bucket_name}/models': 'm/config.pbtxt' (generation "
            f"{first.tag}) is gone: removed or overwritten since it was listed")
        [second] = repository.list_files()
        repository.download(second, tmp_path / "new")
        assert (tmp_path / "new").read_bytes() == b"second"
    finally:
        repository.close()


# --- credentials ---------------------------------------------------------------------------


def new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def service_account_file(folder: Path, name: str, email: str, key: rsa.RSAPrivateKey,
                         fake: FakeGcsServer) -> Path:
    """A service account key file, as Google's console makes them, whose token endpoint is
    the fake's."""
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    path = folder / f"{name}.json"
    path.write_text(json.dumps({
        "type": "service_account", "project_id": "naiad-test", "private_key_id": name,
        "private_key": pem, "client_email": email, "client_id": "1",
        "token_uri": f"{fake.url}/token"}))
    return path


@dataclass
class Guarded:
    """A repository behind the fake with credentials required, and key files for it: one
    of a reader, one of an account without access, one whose key was deleted."""

    uri: str
    reader: Path
    outsider: Path
    deleted: Path


@pytest.fixture
def guarded(fake_gcs: FakeGcsServer, bucket_name: str, tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch) -> Guarded:
    """The source dials the fake as a non-emulator endpoint (NAIAD_GCS_ENDPOINT), so it
    sends the credentials it chose."""
    fill(fake_gcs, bucket_name, {"models/m/config.pbtxt": b"guarded"})
    fake_gcs.state.require_auth = True
    reader_key, outsider_key = new_key(), new_key()
    fake_gcs.register_key(READER, reader_key.public_key(), "token-reader")
    fake_gcs.register_key(OUTSIDER, outsider_key.public_key(), "token-outsider", reader=False)
    monkeypatch.setenv("NAIAD_GCS_ENDPOINT", fake_gcs.url)
    monkeypatch.setenv("NAIAD_GCS_RETRY_DEADLINE_S", "0")
    return Guarded(
        uri=f"gs://{bucket_name}/models",
        reader=service_account_file(tmp_path, "reader", READER, reader_key, fake_gcs),
        outsider=service_account_file(tmp_path, "outsider", OUTSIDER, outsider_key, fake_gcs),
        # the reader's account, signed with a key the store no longer knows
        deleted=service_account_file(tmp_path, "deleted", READER, new_key(), fake_gcs))


def credential_table(folder: Path, entries: dict[str, str]) -> Path:
    """Triton's TRITON_CLOUD_CREDENTIAL_PATH file with a "gs" section (and an "s3" one that
    the source leaves alone)."""
    path = folder / "cloud_credential.json"
    path.write_text(json.dumps({"gs": entries, "s3": {"": {"key_id": "x"}}}))
    return path


def refusal(uri: str) -> InferenceServerError:
    with pytest.raises(InferenceServerError) as caught:
        listed(uri)
    assert "\n" not in caught.value.message
    return caught.value


def test_tritons_credential_file_longest_prefix_wins(guarded: Guarded, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    bucket_uri = guarded.uri.removesuffix("/models")
    monkeypatch.setenv("TRITON_CLOUD_CREDENTIAL_PATH", str(credential_table(tmp_path, {
        "": str(guarded.deleted), bucket_uri: str(guarded.reader),
        "gs://other": str(guarded.deleted)})))
    assert [file.path for file in listed(guarded.uri)] == ["m/config.pbtxt"]


def test_refused_credentials(guarded: Guarded, tmp_path: Path,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_CLOUD_CREDENTIAL_PATH", str(credential_table(
        tmp_path, {"": str(guarded.reader), "gs://": str(guarded.deleted)})))
    error = refusal(guarded.uri)
    assert error.status is Status.UNAVAILABLE
    assert error.message == (
        f"model repository '{guarded.uri}': listing failed: the credentials were refused "
        f"(invalid_grant: Invalid JWT Signature.): {guarded.deleted} "
        f"(TRITON_CLOUD_CREDENTIAL_PATH entry 'gs://')")


def test_credentials_without_access(guarded: Guarded, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(guarded.outsider))
    error = refusal(guarded.uri)
    assert error.status is Status.UNAVAILABLE
    assert error.message.startswith(f"model repository '{guarded.uri}': listing failed: "
                                    f"access denied (HTTP 403: {OUTSIDER} does not have ")
    assert error.message.endswith(f"check the credentials: {guarded.outsider} "
                                  f"(GOOGLE_APPLICATION_CREDENTIALS)")


def test_anonymous_requests_to_a_store_that_wants_credentials(
        guarded: Guarded, fake_gcs: FakeGcsServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # an emulator endpoint means anonymous requests; this one wants credentials
    monkeypatch.setenv("CLOUD_STORAGE_EMULATOR_ENDPOINT", fake_gcs.url)
    error = refusal(guarded.uri)
    assert error.status is Status.UNAVAILABLE
    assert error.message == (
        f"model repository '{guarded.uri}': listing failed: access denied (HTTP 401: "
        f"Anonymous caller does not have storage.objects.list access to the Google Cloud "
        f"Storage bucket.); check the credentials: anonymous (CLOUD_STORAGE_EMULATOR_ENDPOINT "
        f"is set)")


def test_application_default_credentials(guarded: Guarded, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(guarded.reader))
    repository = open_repository(guarded.uri)
    try:
        [file] = repository.list_files()
        repository.download(file, tmp_path / "config.pbtxt")
        assert (tmp_path / "config.pbtxt").read_bytes() == b"guarded"
    finally:
        repository.close()


@pytest.mark.timeout(60)
def test_a_token_endpoint_that_is_down(guarded: Guarded, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    unreachable = json.loads(guarded.reader.read_text())
    unreachable["token_uri"] = f"http://127.0.0.1:{free_port()}/token"
    path = tmp_path / "unreachable.json"
    path.write_text(json.dumps(unreachable))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(path))
    error = refusal(guarded.uri)
    assert error.status is Status.UNAVAILABLE
    assert error.message == (
        f"model repository '{guarded.uri}': listing failed: cannot get an access token "
        f"(connection refused) for the credentials: {path} (GOOGLE_APPLICATION_CREDENTIALS)")


def test_credential_files_that_cannot_be_used(guarded: Guarded, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "missing.json"
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(missing))
    with pytest.raises(InferenceServerError) as caught:
        open_repository(guarded.uri)
    assert caught.value.status is Status.UNAVAILABLE
    assert caught.value.message == (f"model repository '{guarded.uri}': "
                                    f"GOOGLE_APPLICATION_CREDENTIALS='{missing}' cannot be "
                                    f"used: File {missing} was not found.")
    monkeypatch.setenv("TRITON_CLOUD_CREDENTIAL_PATH",
                       str(credential_table(tmp_path, {"gs://": str(missing)})))
    with pytest.raises(InferenceServerError) as caught:
        open_repository(guarded.uri)
    assert caught.value.status is Status.UNAVAILABLE
    assert caught.value.message == (
        f"model repository '{guarded.uri}': the credential file '{missing}' "
        f"(TRITON_CLOUD_CREDENTIAL_PATH entry 'gs://') cannot be used: File {missing} was "
        f"not found.")


@pytest.mark.parametrize(("table", "why"), [
    ({"gs": {"gs://other-bucket": "/x.json"}},
     "no \"gs\" entry of TRITON_CLOUD_CREDENTIAL_PATH="),
    ({"s3": {"": {}}}, "no \"gs\" entry of TRITON_CLOUD_CREDENTIAL_PATH="),
    ({"gs": {"": {"path": "/x.json"}}}, 'expected {"gs": {"URI PREFIX": "CREDENTIAL FILE"'),
    ("not json", "is not JSON"),
])
def test_a_credential_table_that_does_not_serve(guarded: Guarded, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                table: object, why: str) -> None:
    path = tmp_path / "cloud_credential.json"
    path.write_text(table if isinstance(table, str) else json.dumps(table))
    monkeypatch.setenv("TRITON_CLOUD_CREDENTIAL_PATH", str(path))
    with pytest.raises(InferenceServerError) as caught:
        open_repository(guarded.uri)
    assert caught.value.status is Status.INVALID_ARG
    assert caught.value.message.startswith(f"model repository '{guarded.uri}': ")
    assert why in caught.value.message


# --- endpoints and settings ----------------------------------------------------------------


def test_tritons_emulator_variable_comes_first(fake_gcs: FakeGcsServer, bucket_name: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    fill(fake_gcs, bucket_name, {"models/m/config.pbtxt": b"x"})
    monkeypatch.setenv("CLOUD_STORAGE_EMULATOR_ENDPOINT", fake_gcs.url)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"127.0.0.1:{free_port()}")  # nothing there
    assert [file.path for file in listed(f"gs://{bucket_name}/models")] == ["m/config.pbtxt"]


@pytest.mark.timeout(60)
def test_an_endpoint_that_never_answers(bucket_name: str,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # a socket that listens and never reads: connections complete, answers never come
    with socket.create_server(("127.0.0.1", 0)) as silent:
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        monkeypatch.setenv("CLOUD_STORAGE_EMULATOR_ENDPOINT", url)
        monkeypatch.setenv("NAIAD_GCS_READ_TIMEOUT_S", "0.5")
        monkeypatch.setenv("NAIAD_GCS_RETRY_DEADLINE_S", "0")
        error = refusal(f"gs://{bucket_name}/models")
    assert error.status is Status.UNAVAILABLE
    assert error.message == (
        f"model repository 'gs://{bucket_name}/models': listing failed: {url} (from "
        f"CLOUD_STORAGE_EMULATOR_ENDPOINT) did not answer within 0.5 s "
        f"(NAIAD_GCS_READ_TIMEOUT_S)")


@pytest.mark.parametrize(("name", "value", "why"), [
    ("NAIAD_GCS_CONNECT_TIMEOUT_S", "soon", "NAIAD_GCS_CONNECT_TIMEOUT_S=soon: expected a "
                                            "number of seconds greater than 0"),
    ("NAIAD_GCS_READ_TIMEOUT_S", "0", "NAIAD_GCS_READ_TIMEOUT_S=0: expected a number of "
                                      "seconds"),
    ("NAIAD_GCS_RETRY_DEADLINE_S", "-1", "NAIAD_GCS_RETRY_DEADLINE_S=-1: expected a number of "
                                         "seconds, at least 0"),
    ("NAIAD_GCS_LIST_PAGE_SIZE", "5000", "NAIAD_GCS_LIST_PAGE_SIZE=5000: expected a whole "
                                         "number of objects from 1 to 1000"),
    ("NAIAD_GCS_MAX_CONNECTIONS", "many", "NAIAD_GCS_MAX_CONNECTIONS=many: expected a whole "
                                          "number"),
    ("CLOUD_STORAGE_EMULATOR_ENDPOINT", "ftp://127.0.0.1:21",
     "CLOUD_STORAGE_EMULATOR_ENDPOINT='ftp://127.0.0.1:21' is not an endpoint"),
    ("NAIAD_GCS_ENDPOINT", "http://127.0.0.1:99999", "NAIAD_GCS_ENDPOINT="),
])
def test_settings_that_cannot_be_read(monkeypatch: pytest.MonkeyPatch, name: str, value: str,
                                      why: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(InferenceServerError) as caught:
        open_repository("gs://bucket/models")
    assert caught.value.status is Status.INVALID_ARG
    assert why in caught.value.message
