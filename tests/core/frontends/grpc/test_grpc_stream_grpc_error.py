"""The ``triton_grpc_error: true`` stream header, end to end with ``tritonclient.grpc``:
as in tritonserver 2.51 (L0_backend_python's lifecycle subtest), the first error of such
a stream ends the whole call with that error's gRPC status instead of going out as a
message; without the header the error is a message and the stream goes on."""

from __future__ import annotations

import queue

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from streaming_models import write_streaming_repository
from tritonclient.utils import InferenceServerException

from naiad.testing import naiad_server

TIMEOUT_S = 30


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = write_streaming_repository(tmp_path_factory.mktemp("grpc-error-header"))
    with naiad_server("--model-repository", str(repo)) as process:
        yield process


def repeat_inputs(*values: int) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("IN", [len(values)], "INT32")
    tensor.set_data_from_numpy(np.array(values, dtype=np.int32))
    return [tensor]


def open_stream(url: str, headers: dict[str, str] | None):
    client = grpcclient.InferenceServerClient(url)
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)),
                        headers=headers)
    return client, results


def test_an_inference_error_ends_the_stream_with_its_status(server):
    client, results = open_stream(server.grpc_url, {"triton_grpc_error": "true"})
    try:
        client.async_stream_infer("repeat", repeat_inputs(1, -2, 3), request_id="mixed")
        result, error = results.get(timeout=TIMEOUT_S)
        assert error is None and int(result.as_numpy("OUT")[0]) == 1
        result, error = results.get(timeout=TIMEOUT_S)
        assert result is None and isinstance(error, InferenceServerException)
        assert error.status() == "StatusCode.INTERNAL"
        assert "repeat: negative value -2 at index 1" in error.message()
        # The call is over: nothing more comes (the 3 is never sent).
        with pytest.raises(queue.Empty):
            results.get(timeout=1)
    finally:
        client.stop_stream()
        client.close()


def test_a_refusal_ends_the_stream_with_the_unary_status(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    with pytest.raises(InferenceServerException) as unary:
        client.infer("nope", repeat_inputs(1))
    client.close()
    client, results = open_stream(server.grpc_url, {"triton_grpc_error": "true"})
    try:
        client.async_stream_infer("nope", repeat_inputs(1), request_id="unknown")
        result, error = results.get(timeout=TIMEOUT_S)
        assert result is None and isinstance(error, InferenceServerException)
        assert error.status() == unary.value.status() != "StatusCode.INTERNAL"
        assert "'nope'" in error.message()
    finally:
        client.stop_stream()
        client.close()


def test_without_the_header_the_error_is_a_message_and_the_stream_goes_on(server):
    client, results = open_stream(server.grpc_url, {"triton_grpc_error": "false"})
    try:
        client.async_stream_infer("repeat", repeat_inputs(-1), request_id="bad")
        result, error = results.get(timeout=TIMEOUT_S)
        assert result is None and isinstance(error, InferenceServerException)
        assert "negative value -1" in error.message()
        client.async_stream_infer("repeat", repeat_inputs(4), request_id="later")
        result, error = results.get(timeout=TIMEOUT_S)
        assert error is None and int(result.as_numpy("OUT")[0]) == 4
    finally:
        client.stop_stream()
        client.close()
