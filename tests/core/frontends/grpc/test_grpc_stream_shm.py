"""ModelStreamInfer and the system shared memory extension over gRPC, end to end, with the
official sync ``tritonclient.grpc`` client and ``tritonclient.utils.shared_memory``."""

from __future__ import annotations

import queue
import uuid

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as shm
from grpc_helpers import identity_name, write_repository
from tritonclient.utils import InferenceServerException

from naiad.testing import naiad_server

A = np.array([1, 2, 3, 4], dtype=np.float32)
B = np.array([10, 20, 30, 40], dtype=np.float32)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # the two models the tests use (not one per datatype: a worker process each)
    repo = write_repository(tmp_path_factory.mktemp("grpc-stream"),
                            only=("add_sub", identity_name("INT32")))
    with naiad_server("--model-repository", str(repo), "--exit-on-error=false",
                      "--strict-readiness=false") as process:
        yield process


@pytest.fixture
def client(server):
    with grpcclient.InferenceServerClient(server.grpc_url) as c:
        yield c


def add_sub_inputs(a=A, b=B):
    inputs = [grpcclient.InferInput("INPUT0", [len(a)], "FP32"),
              grpcclient.InferInput("INPUT1", [len(b)], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


# --- streaming ---------------------------------------------------------------------------


def test_stream_answers_every_request_in_order_and_survives_errors(client):
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        for i in range(6):
            if i == 2:  # unknown model
                client.async_stream_infer("nope", add_sub_inputs(), request_id="bad-model")
            elif i == 4:  # wrong shape
                client.async_stream_infer("add_sub", add_sub_inputs(a=A[:3]),
                                          request_id="bad-shape")
            else:
                client.async_stream_infer("add_sub", add_sub_inputs(a=A + i),
                                          request_id=f"ok-{i}")
        got = [results.get(timeout=30) for _ in range(6)]
    finally:
        client.stop_stream()
    for i, (result, error) in enumerate(got):
        if i == 2:
            assert result is None and isinstance(error, InferenceServerException)
            assert "'nope'" in error.message()
        elif i == 4:
            assert result is None
            assert "'INPUT0'" in error.message() and "'add_sub'" in error.message()
        else:
            assert error is None
            assert result.get_response().id == f"ok-{i}"
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + i + B)


def test_stream_with_many_requests_in_flight(client):
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        for i in range(50):
            inp = grpcclient.InferInput("INPUT0", [1], "INT32")
            inp.set_data_from_numpy(np.array([i], np.int32))
            client.async_stream_infer(identity_name("INT32"), [inp], request_id=str(i))
        got = [results.get(timeout=30) for _ in range(50)]
    finally:
        client.stop_stream()
    assert [error for _, error in got] == [None] * 50
    assert [int(r.as_numpy("OUTPUT0")[0]) for r, _ in got] == list(range(50))
    assert [r.get_response().id for r, _ in got] == [str(i) for i in range(50)]


# --- system shared memory ----------------------------------------------------------------


@pytest.fixture
def regions(client):
    """Input and output regions in /dev/shm (created, then destroyed and unregistered)."""
    made = []

    def make(name: str, size: int):
        key = f"/naiad-grpc-{uuid.uuid4().hex[:12]}"
        handle = shm.create_shared_memory_region(name, key, size)
        made.append((name, handle))
        return key, handle

    yield make
    for name, handle in made:
        try:
            client.unregister_system_shared_memory(name)
        finally:
            shm.destroy_shared_memory_region(handle)


def test_shared_memory_inputs_and_outputs(client, regions):
    in_key, in_handle = regions("in", 32)
    out_key, out_handle = regions("out", 64)
    shm.set_shared_memory_region(in_handle, [A, B])
    client.register_system_shared_memory("in", in_key, 32)
    client.register_system_shared_memory("out", out_key, 64)

    status = client.get_system_shared_memory_status()
    assert {r.name: (r.key, r.byte_size) for r in status.regions.values()} == {
        "in": (in_key, 32), "out": (out_key, 64)}
    only = client.get_system_shared_memory_status("in", as_json=True)
    assert list(only["regions"]) == ["in"]

    inputs = [grpcclient.InferInput("INPUT0", [4], "FP32"),
              grpcclient.InferInput("INPUT1", [4], "FP32")]
    inputs[0].set_shared_memory("in", 16)
    inputs[1].set_shared_memory("in", 16, offset=16)
    outputs = [grpcclient.InferRequestedOutput("OUTPUT0"),
               grpcclient.InferRequestedOutput("OUTPUT1")]
    outputs[0].set_shared_memory("out", 16)
    outputs[1].set_shared_memory("out", 16, offset=32)
    result = client.infer("add_sub", inputs, outputs=outputs)

    response = result.get_response()
    assert [o.name for o in response.outputs] == ["OUTPUT0", "OUTPUT1"]
    assert list(response.raw_output_contents) == [b"", b""]  # the data is in the region
    assert list(result.get_output("OUTPUT0").shape) == [4]
    np.testing.assert_array_equal(
        shm.get_contents_as_numpy(out_handle, np.float32, [4]), A + B)
    np.testing.assert_array_equal(
        shm.get_contents_as_numpy(out_handle, np.float32, [4], offset=32), A - B)

    # One output in shared memory, the other inline.
    result = client.infer("add_sub", inputs, outputs=[
        outputs[0], grpcclient.InferRequestedOutput("OUTPUT1")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)

    client.unregister_system_shared_memory("in")
    assert list(client.get_system_shared_memory_status().regions) == ["out"]
    with pytest.raises(InferenceServerException) as err:
        client.infer("add_sub", inputs)
    assert "'in'" in err.value.message() and "'INPUT0'" in err.value.message()


def test_shared_memory_errors(client, regions):
    key, _handle = regions("small", 8)
    with pytest.raises(InferenceServerException) as err:
        client.register_system_shared_memory("small", key, 64)
    assert err.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "'small'" in err.value.message()
    with pytest.raises(InferenceServerException) as err:
        client.register_system_shared_memory("gone", "/naiad-no-such-key", 8)
    assert "'gone'" in err.value.message()

    client.register_system_shared_memory("small", key, 8)
    with pytest.raises(InferenceServerException) as err:
        client.register_system_shared_memory("small", key, 8)
    assert err.value.status() == "StatusCode.ALREADY_EXISTS"

    # An output larger than the region given for it.
    outputs = [grpcclient.InferRequestedOutput("OUTPUT0")]
    outputs[0].set_shared_memory("small", 8)
    with pytest.raises(InferenceServerException) as err:
        client.infer("add_sub", add_sub_inputs(), outputs=outputs)
    assert err.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "'OUTPUT0'" in err.value.message() and "8" in err.value.message()

    with pytest.raises(InferenceServerException) as err:
        client.get_system_shared_memory_status("nope")
    assert err.value.status() == "StatusCode.NOT_FOUND" and "'nope'" in err.value.message()
    assert client.is_server_live()
