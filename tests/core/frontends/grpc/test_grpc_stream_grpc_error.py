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


@pytest.fixture
def small_output_region(server):
    """A registered system shared memory region of 2 bytes: too small for repeat's OUT (an
    INT32, 4 bytes), so encoding the response fails after the model answered."""
    import tritonclient.utils.shared_memory as shm

    key = f"/naiad-test-small-{id(server)}"
    handle = shm.create_shared_memory_region("small_out", key, 2)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.register_system_shared_memory("small_out", key, 2)
    try:
        yield "small_out"
    finally:
        client.unregister_system_shared_memory("small_out")
        client.close()
        shm.destroy_shared_memory_region(handle)


def out_to_region(region: str) -> list[grpcclient.InferRequestedOutput]:
    out = grpcclient.InferRequestedOutput("OUT")
    out.set_shared_memory(region, 2)
    return [out]


def test_an_encoding_error_ends_the_stream_with_its_status(server, small_output_region):
    """tritonserver 2.51 ends a ``triton_grpc_error`` stream with the error's status also
    when the response fails while it is written (an output too large for its shared memory
    region), not only when the model fails; naiad's status is the one its ModelInfer gives
    for the same error (docs/compatibility.md: INVALID_ARGUMENT where Triton says INTERNAL)."""
    client, results = open_stream(server.grpc_url, {"triton_grpc_error": "true"})
    try:
        client.async_stream_infer("repeat", repeat_inputs(1, 2),
                                  outputs=out_to_region(small_output_region), request_id="big")
        result, error = results.get(timeout=TIMEOUT_S)
        assert result is None and isinstance(error, InferenceServerException)
        assert error.status() == "StatusCode.INVALID_ARGUMENT"
        assert "output 'OUT' of model 'repeat'" in error.message()
        with pytest.raises(queue.Empty):  # the call is over: the second response never comes
            results.get(timeout=1)
    finally:
        client.stop_stream()
        client.close()


def test_without_the_header_an_encoding_error_is_a_message(server, small_output_region):
    client, results = open_stream(server.grpc_url, None)
    try:
        client.async_stream_infer("repeat", repeat_inputs(1),
                                  outputs=out_to_region(small_output_region), request_id="big")
        result, error = results.get(timeout=TIMEOUT_S)
        assert result is None and isinstance(error, InferenceServerException)
        assert "output 'OUT' of model 'repeat'" in error.message()
        client.async_stream_infer("repeat", repeat_inputs(5), request_id="later")
        result, error = results.get(timeout=TIMEOUT_S)
        assert error is None and int(result.as_numpy("OUT")[0]) == 5
    finally:
        client.stop_stream()
        client.close()
