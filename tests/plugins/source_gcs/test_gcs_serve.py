"""``naiad serve --model-repository gs://...`` for real: a server process reading a bucket of
a real Cloud Storage emulator, the official clients inferring over HTTP and gRPC, poll mode
serving a version uploaded to the bucket, and a repository it cannot read (a missing
bucket, an endpoint that is down, refused credentials) stopping start-up with one line
naming the URI and the cause."""

from __future__ import annotations

import json
import time
from contextlib import AbstractContextManager
from pathlib import Path

import numpy as np
import pytest
import source_serving as serving
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from fake_gcs import FakeGcsServer
from gcs_emulator import EXAMPLES, GcsEmulator, upload_tree, uploader_client
from google.cloud.storage import Bucket
from source_serving import add_sub_over_http

from naiad.testing import ServerProcess, naiad_server
from naiad.testing.server import free_port

SECONDS = 1.0
POLL_S = 1
# Safety nets for waits that end as soon as the server shows the change (not measures).
CHANGE_TIMEOUT_S = 60 * SECONDS


@pytest.fixture
def add_sub_bucket(gcs_emulator: GcsEmulator, bucket_name: str) -> Bucket:
    """A new bucket of the emulator holding the examples' add_sub under ``models/``."""
    bucket = uploader_client(gcs_emulator.url).create_bucket(bucket_name)
    upload_tree(bucket, EXAMPLES / "add_sub", "models/add_sub")
    return bucket


def serve(bucket: Bucket, emulator: GcsEmulator, cache: Path,
          *args: str) -> AbstractContextManager[ServerProcess]:
    """``naiad serve`` on ``gs://BUCKET/models`` through the emulator, ready on entry."""
    return naiad_server("--model-repository", f"gs://{bucket.name}/models",
                        "--repository-cache-dir", str(cache), *args,
                        env={"CLOUD_STORAGE_EMULATOR_ENDPOINT": emulator.url})


def test_serves_add_sub_from_the_bucket(add_sub_bucket: Bucket, gcs_emulator: GcsEmulator,
                                        tmp_path: Path) -> None:
    with serve(add_sub_bucket, gcs_emulator, tmp_path / "cache") as server:
        add_sub_over_http(server)
        a = np.arange(4, dtype=np.float32)
        inputs = [grpcclient.InferInput("INPUT0", [4], "FP32"),
                  grpcclient.InferInput("INPUT1", [4], "FP32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(a)
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            result = client.infer("add_sub", inputs)
            index = client.get_model_repository_index().models
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a * 2)
        assert [(m.name, m.version, m.state) for m in index] == [("add_sub", "1", "READY")]
        assert (f"model repository 'gs://{add_sub_bucket.name}/models': Cloud Storage at "
                f"{gcs_emulator.url} (from CLOUD_STORAGE_EMULATOR_ENDPOINT)") in server.log()


def test_poll_mode_serves_a_version_uploaded_to_the_bucket(
        add_sub_bucket: Bucket, gcs_emulator: GcsEmulator, tmp_path: Path) -> None:
    with serve(add_sub_bucket, gcs_emulator, tmp_path / "cache", "--model-control-mode=poll",
               f"--repository-poll-secs={POLL_S}") as server:
        add_sub_over_http(server)
        add_sub_bucket.blob("models/add_sub/2/model.py").upload_from_filename(
            str(EXAMPLES / "add_sub" / "1" / "model.py"))
        with httpclient.InferenceServerClient(server.http_url) as client:
            deadline = time.monotonic() + CHANGE_TIMEOUT_S
            while not client.is_model_ready("add_sub", "2"):
                assert time.monotonic() < deadline, server.log()
                time.sleep(POLL_S / 4)
        add_sub_over_http(server, "2")


def test_explicit_mode_fetches_a_model_when_it_is_loaded(
        add_sub_bucket: Bucket, gcs_emulator: GcsEmulator, tmp_path: Path) -> None:
    with serve(add_sub_bucket, gcs_emulator, tmp_path / "cache",
               "--model-control-mode=explicit") as server:
        with httpclient.InferenceServerClient(server.http_url) as client:
            assert client.get_model_repository_index() == [{"name": "add_sub"}]  # not loaded
            add_sub_bucket.blob("models/add_sub/2/model.py").upload_from_filename(
                str(EXAMPLES / "add_sub" / "1" / "model.py"))
            client.load_model("add_sub")
            assert client.is_model_ready("add_sub", "2")
        add_sub_over_http(server, "2")


# --- start-up failures -----------------------------------------------------------------------


def start_up_failure(uri: str, cache: Path, env: dict[str, str]) -> str:
    """The shared check (an error, no traceback), and the line names the URI."""
    output = serving.start_up_failure(uri, cache, env)
    assert f"'{uri}'" in output, output
    return output


def test_a_missing_bucket_stops_start_up(gcs_emulator: GcsEmulator, tmp_path: Path) -> None:
    output = start_up_failure("gs://no-such-bucket/models", tmp_path / "cache",
                              {"CLOUD_STORAGE_EMULATOR_ENDPOINT": gcs_emulator.url})
    assert "the bucket 'no-such-bucket' does not exist" in output, output


def test_an_endpoint_that_is_down_stops_start_up(tmp_path: Path) -> None:
    output = start_up_failure("gs://bucket/models", tmp_path / "cache", {
        "CLOUD_STORAGE_EMULATOR_ENDPOINT": f"http://127.0.0.1:{free_port()}",
        "NAIAD_GCS_RETRY_DEADLINE_S": "1"})
    assert "connection refused" in output, output


def test_refused_credentials_stop_start_up(tmp_path: Path) -> None:
    fake = FakeGcsServer().start()
    try:
        uploader_client(fake.url).create_bucket("guarded")
        fake.state.require_auth = True
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(serialization.Encoding.PEM,
                                serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
        # an account the store does not know (its key was deleted)
        key_file = tmp_path / "deleted-key.json"
        key_file.write_text(json.dumps({
            "type": "service_account", "project_id": "naiad-test", "private_key_id": "gone",
            "private_key": pem, "client_email": "gone@naiad-test.iam.gserviceaccount.com",
            "client_id": "1", "token_uri": f"{fake.url}/token"}))
        output = start_up_failure("gs://guarded/models", tmp_path / "cache", {
            "NAIAD_GCS_ENDPOINT": fake.url, "GOOGLE_APPLICATION_CREDENTIALS": str(key_file)})
    finally:
        fake.stop()
    assert "the credentials were refused (invalid_grant: Invalid JWT Signature.)" in output
    assert "BEGIN PRIVATE KEY" not in output
