"""``naiad serve --model-repository s3://...`` for real: a server process reading a bucket of
moto's S3 server, the official clients inferring over HTTP and gRPC, poll mode picking up a
version uploaded to the bucket, and a bucket it cannot read stopping start-up with one line
naming the URI and the cause."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from moto_s3_server import MotoS3Server
from s3_buckets import PREFIX, Bucket, add_sub_files, new_bucket_name
from source_serving import add_sub_over_http, start_up_failure

from naiad.testing import ServerProcess, naiad_server
from naiad.testing.server import free_port

SECONDS = 1.0
POLL_S = 1
# Safety nets for waits that end as soon as the server shows the change (not measures).
CHANGE_TIMEOUT_S = 60 * SECONDS


@pytest.fixture
def add_sub_bucket(aws_env: MotoS3Server) -> Iterator[Bucket]:
    """A new bucket holding only the examples' add_sub under ``models/``."""
    client = aws_env.client()
    name = new_bucket_name()
    client.create_bucket(Bucket=name)
    found = Bucket(aws_env, name, PREFIX, {}, client)
    for path, content in add_sub_files().items():
        found.put(path, content)
    try:
        yield found
    finally:
        client.close()


def serve(bucket: Bucket, cache: Path, *args: str) -> AbstractContextManager[ServerProcess]:
    """``naiad serve`` on the bucket's repository, ready on entry, stopped on exit."""
    return naiad_server("--model-repository", bucket.uri, "--repository-cache-dir",
                        str(cache), *args)


def test_serves_add_sub_from_the_bucket(add_sub_bucket, tmp_path):
    with serve(add_sub_bucket, tmp_path / "cache") as server:
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


def test_poll_mode_serves_a_version_uploaded_to_the_bucket(add_sub_bucket, tmp_path):
    with serve(add_sub_bucket, tmp_path / "cache", "--model-control-mode=poll",
               f"--repository-poll-secs={POLL_S}") as server:
        add_sub_over_http(server)
        add_sub_bucket.put("add_sub/2/model.py", add_sub_bucket.files["add_sub/1/model.py"])
        with httpclient.InferenceServerClient(server.http_url) as client:
            deadline = time.monotonic() + CHANGE_TIMEOUT_S
            while not client.is_model_ready("add_sub", "2"):
                assert time.monotonic() < deadline, server.log()
                time.sleep(POLL_S / 4)
        add_sub_over_http(server, "2")
        assert "mirrored model 'add_sub'" in server.log()


def test_explicit_mode_fetches_a_model_when_it_is_loaded(add_sub_bucket, tmp_path):
    with serve(add_sub_bucket, tmp_path / "cache", "--model-control-mode=explicit") as server:
        with httpclient.InferenceServerClient(server.http_url) as client:
            assert client.get_model_repository_index() == [{"name": "add_sub"}]  # not loaded
            add_sub_bucket.put("add_sub/2/model.py",
                               add_sub_bucket.files["add_sub/1/model.py"])
            client.load_model("add_sub")
            assert client.is_model_ready("add_sub", "2")
        add_sub_over_http(server, "2")


def test_wrong_credentials_stop_start_up_naming_the_uri(add_sub_bucket, tmp_path,
                                                        monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    output = start_up_failure(add_sub_bucket.uri, tmp_path / "cache")
    assert f"'{add_sub_bucket.uri}'" in output and "access refused" in output, output
    assert "not-the-secret" not in output


def test_an_endpoint_that_is_down_stops_start_up_naming_the_uri(aws_env, tmp_path,
                                                                monkeypatch):
    uri = f"s3://http://127.0.0.1:{free_port()}/bucket/models"
    output = start_up_failure(uri, tmp_path / "cache")
    assert f"'{uri}'" in output and "connection refused" in output, output


def test_a_missing_bucket_stops_start_up_naming_it(aws_env, tmp_path):
    uri = aws_env.uri(new_bucket_name(), "models")
    output = start_up_failure(uri, tmp_path / "cache")
    assert f"'{uri}'" in output and "does not exist" in output, output
