"""Shared memory and the extension list end to end, as tritonserver 2.51 answers them: the
official tritonclient.http / tritonclient.grpc against a real ``naiad serve``.

* ``GET /v2`` and ServerMetadata list exactly the extensions naiad implements;
* an HTTP output written to system shared memory is listed bare (name, datatype, shape: no
  ``parameters``, which perf_analyzer reads as binary data), next to binary and JSON outputs;
* a requested output's shared memory is checked before the model runs (an unregistered
  region is NOT_FOUND, ``binary_data`` with a region is refused over HTTP);
* CUDA shared memory: naiad holds no region, so the status is empty and unregistering
  succeeds (perf_analyzer unregisters every region when it ends); registering is refused.

The exact bodies are compared with the real Triton's in tests/compat/test_compat_shared_memory.py.
"""

from __future__ import annotations

import json
import uuid

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from test_http_e2e import raw
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc
from tritonclient.utils import InferenceServerException

A = np.array([1, 2, 3, 4], dtype=np.float32)
B = np.array([10, 20, 30, 40], dtype=np.float32)

# tritonserver 2.51's list, in its order, less what naiad does not implement
# (cuda_shared_memory).
EXTENSIONS = ["classification", "sequence", "model_repository",
              "model_repository(unload_dependents)",
              "schedule_policy", "model_configuration", "system_shared_memory",
              "binary_tensor_data", "parameters", "statistics", "trace", "logging"]


@pytest.fixture(scope="module")
def http(server):
    with httpclient.InferenceServerClient(server.http_url) as c:
        yield c


@pytest.fixture(scope="module")
def grpc_client(server):
    with grpcclient.InferenceServerClient(server.grpc_url) as c:
        yield c


@pytest.fixture
def regions(http):
    """``make(size)``: a fresh /dev/shm region holding A then B, registered on the server
    under a unique name; all unregistered and removed afterwards."""
    made = []

    def make(size: int = 64) -> tuple[str, object]:
        name = f"e2e-{uuid.uuid4().hex[:10]}"
        handle = shm.create_shared_memory_region(name, "/" + name, size)
        made.append((name, handle))
        shm.set_shared_memory_region(handle, [A, B])
        http.register_system_shared_memory(name, "/" + name, size)
        return name, handle

    yield make
    for name, handle in made:
        try:
            http.unregister_system_shared_memory(name)
        finally:
            shm.destroy_shared_memory_region(handle)


def executions(http, model: str = "add_sub") -> int:
    stats = http.get_inference_statistics(model)["model_stats"]
    return sum(s["execution_count"] for s in stats)


def shm_inputs(region: str) -> list[httpclient.InferInput]:
    inputs = [httpclient.InferInput("INPUT0", [4], "FP32"),
              httpclient.InferInput("INPUT1", [4], "FP32")]
    inputs[0].set_shared_memory(region, 16)
    inputs[1].set_shared_memory(region, 16, offset=16)
    return inputs


def shm_output(name: str, region: str, offset: int, size: int = 16
               ) -> httpclient.InferRequestedOutput:
    output = httpclient.InferRequestedOutput(name, binary_data=False)
    output.set_shared_memory(region, size, offset=offset)
    return output


# --- the extension list --------------------------------------------------------------------


def test_extensions_are_exactly_what_naiad_implements(http, grpc_client):
    assert http.get_server_metadata()["extensions"] == EXTENSIONS
    assert list(grpc_client.get_server_metadata().extensions) == EXTENSIONS


# --- system shared memory over HTTP --------------------------------------------------------


def test_http_outputs_in_shared_memory_are_listed_bare(http, regions):
    region, handle = regions()
    result = http.infer("add_sub", shm_inputs(region), request_id="shm-1", outputs=[
        shm_output("OUTPUT0", region, 32), shm_output("OUTPUT1", region, 48)])
    assert result.get_response() == {
        "id": "shm-1", "model_name": "add_sub", "model_version": "1", "outputs": [
            {"name": "OUTPUT0", "datatype": "FP32", "shape": [4]},
            {"name": "OUTPUT1", "datatype": "FP32", "shape": [4]}]}
    np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.float32, [4], 32), A + B)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.float32, [4], 48), A - B)


def test_http_body_with_shared_memory_and_binary_outputs(server, regions, http):
    region, handle = regions()
    doc = {"id": "mixed", "inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": A.tolist()},
        {"name": "INPUT1", "datatype": "FP32", "shape": [4], "data": B.tolist()}],
        "outputs": [{"name": "OUTPUT0", "parameters": {
            "shared_memory_region": region, "shared_memory_byte_size": 16,
            "shared_memory_offset": 32, "binary_data": False}},
            {"name": "OUTPUT1", "parameters": {"binary_data": True}}]}
    status, headers, body = raw(server, "POST", "/v2/models/add_sub/infer", json.dumps(doc))
    head = (b'{"id":"mixed","model_name":"add_sub","model_version":"1","outputs":['
            b'{"name":"OUTPUT0","datatype":"FP32","shape":[4]},'
            b'{"name":"OUTPUT1","datatype":"FP32","shape":[4],'
            b'"parameters":{"binary_data_size":16}}]}')
    assert status == 200
    assert headers["inference-header-content-length"] == str(len(head))
    assert body == head + (A - B).tobytes()
    np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.float32, [4], 32), A + B)


def test_binary_data_output_applies_only_when_no_output_is_named(server):
    doc = {"parameters": {"binary_data_output": True}, "inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": A.tolist()},
        {"name": "INPUT1", "datatype": "FP32", "shape": [4], "data": B.tolist()}]}
    _, headers, _ = raw(server, "POST", "/v2/models/add_sub/infer", json.dumps(doc))
    assert "inference-header-content-length" in headers  # every output binary
    doc["outputs"] = [{"name": "OUTPUT0"}]
    status, headers, body = raw(server, "POST", "/v2/models/add_sub/infer", json.dumps(doc))
    assert status == 200 and "inference-header-content-length" not in headers
    assert json.loads(body)["outputs"][0]["data"] == (A + B).tolist()


@pytest.mark.parametrize(("parameters", "status", "fragment"), [
    ({"shared_memory_region": "never-registered", "shared_memory_byte_size": 16}, "404",
     "'never-registered' is not registered"),
    ({"shared_memory_byte_size": 16, "binary_data": True}, "400",
     "can't set both 'shared_memory_region' and 'binary_data'"),
    ({"shared_memory_byte_size": 16, "shared_memory_offset": 60}, "400", "outside region"),
    ({"shared_memory_byte_size": 16, "classification": 2}, "400", "classification"),
], ids=["unregistered", "binary-data", "outside", "classification-into-shm"])
def test_http_bad_output_parameters_are_refused_before_the_model_runs(
        server, http, regions, parameters, status, fragment):
    region, _ = regions()
    if "shared_memory_byte_size" in parameters and "shared_memory_region" not in parameters:
        parameters = {"shared_memory_region": region, **parameters}
    doc = {"inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": A.tolist()},
        {"name": "INPUT1", "datatype": "FP32", "shape": [4], "data": B.tolist()}],
        "outputs": [{"name": "OUTPUT0", "parameters": parameters}]}
    before = executions(http)
    code, _, body = raw(server, "POST", "/v2/models/add_sub/infer", json.dumps(doc))
    message = json.loads(body)["error"]
    assert str(code) == status, message
    assert "output 'OUTPUT0' of model 'add_sub'" in message and fragment in message
    assert executions(http) == before
    assert http.infer("add_sub", shm_inputs(region)).as_numpy("OUTPUT0").tolist() == \
        (A + B).tolist()


def test_grpc_output_in_an_unregistered_region_is_not_found_before_the_model_runs(
        http, grpc_client):
    inputs = [grpcclient.InferInput("INPUT0", [4], "FP32"),
              grpcclient.InferInput("INPUT1", [4], "FP32")]
    inputs[0].set_data_from_numpy(A)
    inputs[1].set_data_from_numpy(B)
    output = grpcclient.InferRequestedOutput("OUTPUT0")
    output.set_shared_memory("never-registered", 16)
    before = executions(http)
    with pytest.raises(InferenceServerException) as err:
        grpc_client.infer("add_sub", inputs, outputs=[output])
    assert err.value.status() == "StatusCode.NOT_FOUND"
    assert "output 'OUTPUT0' of model 'add_sub'" in err.value.message()
    assert executions(http) == before


def test_system_status_of_an_unknown_region_is_tritons_404(http):
    with pytest.raises(InferenceServerException) as err:
        http.get_system_shared_memory_status("never-registered")
    assert err.value.status() == "404"
    assert err.value.message() == "Unable to find system shared memory region: " \
                                  "'never-registered'"


# --- CUDA shared memory ---------------------------------------------------------------------


def test_http_cuda_shared_memory_answers_as_triton_holding_no_region(server, http):
    assert http.get_cuda_shared_memory_status() == []
    http.unregister_cuda_shared_memory()  # perf_analyzer's last call: must succeed
    http.unregister_cuda_shared_memory("r")
    for path in ("/v2/cudasharedmemory/unregister", "/v2/cudasharedmemory/region/r/unregister"):
        status, _, body = raw(server, "POST", path)
        assert (status, body) == (200, b"")
    with pytest.raises(InferenceServerException) as err:
        http.register_cuda_shared_memory("r", b"\0" * 64, 0, 64)
    assert err.value.status() == "400"
    assert "'r'" in err.value.message() and "system shared memory" in err.value.message()
    assert http.get_cuda_shared_memory_status() == []


def test_grpc_cuda_shared_memory_answers_as_triton_holding_no_region(server):
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        assert stub.CudaSharedMemoryStatus(pb.CudaSharedMemoryStatusRequest(),
                                           timeout=30).SerializeToString() == b""
        for name in ("", "r"):
            reply = stub.CudaSharedMemoryUnregister(
                pb.CudaSharedMemoryUnregisterRequest(name=name), timeout=30)
            assert reply.SerializeToString() == b""
        with pytest.raises(grpc.RpcError) as err:
            stub.CudaSharedMemoryRegister(pb.CudaSharedMemoryRegisterRequest(
                name="r", raw_handle=b"\0" * 64, byte_size=64), timeout=30)
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert "'r'" in err.value.details()
