"""The gRPC frontend end to end: ``naiad serve`` as a real process, driven by the official
``tritonclient.grpc`` (sync) client. The aio client, streaming, shared memory and the model
repository API have their own files (test_grpc_aio.py, test_grpc_stream_shm.py,
test_grpc_repository.py)."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from grpc_helpers import DATATYPES, identity_name, sample, write_repository
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc
from tritonclient.utils import InferenceServerException

from naiad.testing import naiad_server

A = np.array([1, 2, 3, 4], dtype=np.float32)
B = np.array([10, 20, 30, 40], dtype=np.float32)


@pytest.fixture(scope="module", params=["naiad", "grpcio"])
def server(tmp_path_factory, request):
    """One server per gRPC server naiad has (``--grpc-server``): the rest of this folder
    runs against the default (naiad's own), this module against both."""
    repo = write_repository(tmp_path_factory.mktemp("grpc-e2e"))
    with naiad_server("--model-repository", str(repo), "--exit-on-error=false",
                      "--strict-readiness=false", f"--grpc-server={request.param}") as process:
        yield process


@pytest.fixture(scope="module")
def client(server):
    with grpcclient.InferenceServerClient(server.grpc_url) as c:
        yield c


@pytest.fixture(scope="module")
def stub(server):
    """The raw generated stub, for requests tritonclient would never build."""
    with grpc.insecure_channel(server.grpc_url) as channel:
        yield service_pb2_grpc.GRPCInferenceServiceStub(channel)


def add_sub_inputs(a=A, b=B, datatype="FP32"):
    inputs = [grpcclient.InferInput("INPUT0", list(a.shape), datatype),
              grpcclient.InferInput("INPUT1", list(b.shape), "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


def assert_serving(client):
    """The server still answers a good request correctly."""
    result = client.infer("add_sub", add_sub_inputs())
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)


def grpc_error(call, *args, **kwargs) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as info:
        call(*args, **kwargs)
    return info.value


def raw_error(call, request) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call(request)
    return info.value


# --- health and metadata -----------------------------------------------------------------


def test_health(client):
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("add_sub")
    assert client.is_model_ready("add_sub", "1")
    assert not client.is_model_ready("add_sub", "2")
    assert not client.is_model_ready("nope")
    assert not client.is_model_ready("broken")


def test_server_metadata(client):
    meta = client.get_server_metadata()
    assert meta.name == "naiad" and meta.version
    assert {"model_repository", "system_shared_memory", "statistics",
            "binary_tensor_data"} <= set(meta.extensions)
    as_json = client.get_server_metadata(as_json=True)
    assert as_json["name"] == "naiad"


def test_model_metadata(client):
    meta = client.get_model_metadata("add_sub")
    assert meta.name == "add_sub" and list(meta.versions) == ["1"]
    assert meta.platform == "python"
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.inputs] == [
        ("INPUT0", "FP32", [4]), ("INPUT1", "FP32", [4])]
    assert [t.name for t in meta.outputs] == ["OUTPUT0", "OUTPUT1"]
    batch = client.get_model_metadata("identity_batch", "1")
    assert list(batch.inputs[0].shape) == [-1, -1]
    strings = client.get_model_metadata(identity_name("BYTES"))
    assert strings.inputs[0].datatype == "BYTES"


def test_model_config(client):
    config = client.get_model_config("identity_batch").config
    assert config.name == "identity_batch" and config.max_batch_size == 8
    assert config.backend == "python"
    assert [t.name for t in config.input] == ["INPUT0"]
    as_json = client.get_model_config("add_sub", "1", as_json=True)
    assert as_json["config"]["name"] == "add_sub"
    assert as_json["config"]["input"][0]["dims"] == ["4"]


@pytest.mark.parametrize("call", ["get_model_metadata", "get_model_config"])
def test_metadata_of_unknown_model_and_version(client, call):
    err = grpc_error(getattr(client, call), "nope")
    assert err.status() == "StatusCode.NOT_FOUND" and "'nope'" in err.message()
    err = grpc_error(getattr(client, call), "add_sub", "7")
    assert err.status() == "StatusCode.NOT_FOUND"
    assert "'add_sub'" in err.message() and "7" in err.message()
    # A model that failed to load has no available version: NOT_FOUND, as tritonserver
    # answers, with the reason.
    err = grpc_error(getattr(client, call), "broken")
    assert err.status() == "StatusCode.NOT_FOUND" and "'broken'" in err.message()
    assert "deliberate failure in initialize" in err.message()


# --- inference ---------------------------------------------------------------------------


def test_add_sub(client):
    result = client.infer("add_sub", add_sub_inputs(), request_id="req-1")
    response = result.get_response()
    assert (response.model_name, response.model_version, response.id) == (
        "add_sub", "1", "req-1")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_requests_and_responses(client, algorithm):
    result = client.infer("add_sub", add_sub_inputs(), compression_algorithm=algorithm)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)


def test_requested_output_subset(client):
    result = client.infer("add_sub", add_sub_inputs(), model_version="1",
                          outputs=[grpcclient.InferRequestedOutput("OUTPUT1")])
    assert [o.name for o in result.get_response().outputs] == ["OUTPUT1"]
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)
    assert result.as_numpy("OUTPUT0") is None


@pytest.mark.parametrize("datatype", list(DATATYPES))
def test_every_datatype_round_trips(client, datatype):
    data = sample(datatype)
    inp = grpcclient.InferInput("INPUT0", [data.size], datatype)
    inp.set_data_from_numpy(data.reshape(-1))
    result = client.infer(identity_name(datatype), [inp])
    output = result.get_output("OUTPUT0")
    assert output.datatype == datatype and list(output.shape) == [data.size]
    got = result.as_numpy("OUTPUT0")
    if datatype == "BYTES":
        assert got.tolist() == data.reshape(-1).tolist()
    else:
        assert got.dtype == np.dtype(DATATYPES[datatype])
        np.testing.assert_array_equal(got, data.reshape(-1))


def test_empty_tensor(client):
    inp = grpcclient.InferInput("INPUT0", [0], "FP32")
    inp.set_data_from_numpy(np.zeros(0, np.float32))
    result = client.infer(identity_name("FP32"), [inp])
    assert result.as_numpy("OUTPUT0").shape == (0,)


@pytest.mark.parametrize(("datatype", "field", "values"), [
    ("FP32", "fp32_contents", [1.5, -2.0]),
    ("INT8", "int_contents", [-128, 127]),
    ("UINT16", "uint_contents", [0, 65535]),
    ("INT64", "int64_contents", [-(2**63), 2**63 - 1]),
    ("UINT64", "uint64_contents", [0, 2**64 - 1]),
    ("FP64", "fp64_contents", [1e300, -0.5]),
    ("BOOL", "bool_contents", [True, False]),
    ("BYTES", "bytes_contents", [b"ab", b""]),
])
def test_typed_contents(stub, datatype, field, values):
    request = pb.ModelInferRequest(model_name=identity_name(datatype), inputs=[
        pb.ModelInferRequest.InferInputTensor(
            name="INPUT0", datatype=datatype, shape=[2],
            contents=pb.InferTensorContents(**{field: values}))])
    response = stub.ModelInfer(request)
    assert response.outputs[0].datatype == datatype
    raw = response.raw_output_contents[0]
    if datatype == "BYTES":
        assert raw == b"\x02\x00\x00\x00ab\x00\x00\x00\x00"
    else:
        expected = np.array(values, dtype=DATATYPES[datatype])
        np.testing.assert_array_equal(np.frombuffer(raw, dtype=expected.dtype), expected)


def test_batching_model(client):
    data = np.arange(6, dtype=np.float32).reshape(3, 2)
    inp = grpcclient.InferInput("INPUT0", [3, 2], "FP32")
    inp.set_data_from_numpy(data)
    np.testing.assert_array_equal(client.infer("identity_batch", [inp]).as_numpy("OUTPUT0"),
                                  data)
    too_big = grpcclient.InferInput("INPUT0", [9, 1], "FP32")
    too_big.set_data_from_numpy(np.zeros((9, 1), np.float32))
    err = grpc_error(client.infer, "identity_batch", [too_big])
    assert err.status() == "StatusCode.INVALID_ARGUMENT"
    assert "'identity_batch'" in err.message() and "'INPUT0'" in err.message()
    assert "8" in err.message()


# --- statistics --------------------------------------------------------------------------


def test_statistics_count_inferences(client):
    for i in range(5):
        inp = grpcclient.InferInput("INPUT0", [1], "INT32")
        inp.set_data_from_numpy(np.array([i], np.int32))
        client.infer("counted", [inp])
    stats = client.get_inference_statistics("counted").model_stats
    assert len(stats) == 1
    counted = stats[0]
    assert (counted.name, counted.version) == ("counted", "1")
    assert counted.inference_count == 5 and counted.execution_count == 5
    assert counted.inference_stats.success.count == 5
    assert counted.inference_stats.fail.count == 0
    assert counted.inference_stats.compute_infer.count == 5
    assert counted.inference_stats.success.ns > 0 and counted.last_inference > 0
    assert [b.batch_size for b in counted.batch_stats] == [1]
    assert counted.batch_stats[0].compute_infer.count == 5
    as_json = client.get_inference_statistics("counted", "1", as_json=True)
    assert as_json["model_stats"][0]["inference_count"] == "5"
    everything = client.get_inference_statistics().model_stats
    assert {"add_sub", "counted", "identity_batch"} <= {s.name for s in everything}


def test_statistics_of_unknown_model(client):
    # tritonserver answers INVALID_ARGUMENT here ("requested model 'nope' is not available")
    err = grpc_error(client.get_inference_statistics, "nope")
    assert err.status() == "StatusCode.INVALID_ARGUMENT" and "'nope'" in err.message()


# --- errors: the right status, a message naming the model and tensor, and the server lives ---


def test_unknown_model(client):
    err = grpc_error(client.infer, "nope", add_sub_inputs())
    assert err.status() == "StatusCode.NOT_FOUND" and "'nope'" in err.message()
    assert_serving(client)


def test_unknown_version(client):
    err = grpc_error(client.infer, "add_sub", add_sub_inputs(), model_version="7")
    assert err.status() == "StatusCode.NOT_FOUND"
    assert "'add_sub'" in err.message() and "7" in err.message()
    err = grpc_error(client.infer, "add_sub", add_sub_inputs(), model_version="x")
    assert err.status() == "StatusCode.INVALID_ARGUMENT" and "'x'" in err.message()
    assert_serving(client)


def test_wrong_datatype(client):
    inputs = add_sub_inputs(a=A.astype(np.int32), datatype="INT32")
    err = grpc_error(client.infer, "add_sub", inputs)
    assert err.status() == "StatusCode.INVALID_ARGUMENT"
    assert "'add_sub'" in err.message() and "'INPUT0'" in err.message()
    assert "INT32" in err.message() and "FP32" in err.message()
    assert_serving(client)


def test_wrong_shape(client):
    err = grpc_error(client.infer, "add_sub", add_sub_inputs(a=A[:3]))
    assert err.status() == "StatusCode.INVALID_ARGUMENT"
    assert "'add_sub'" in err.message() and "'INPUT0'" in err.message()
    assert "[4]" in err.message() and "[3]" in err.message()
    assert_serving(client)


def test_missing_input(client):
    err = grpc_error(client.infer, "add_sub", add_sub_inputs()[:1])
    assert err.status() == "StatusCode.INVALID_ARGUMENT"
    assert "'add_sub'" in err.message() and "'INPUT1'" in err.message()
    assert_serving(client)


def test_unknown_input_and_output(client):
    inputs = add_sub_inputs()
    extra = grpcclient.InferInput("INPUT9", [4], "FP32")
    extra.set_data_from_numpy(A)
    err = grpc_error(client.infer, "add_sub", [*inputs, extra])
    assert err.status() == "StatusCode.INVALID_ARGUMENT" and "'INPUT9'" in err.message()
    err = grpc_error(client.infer, "add_sub", inputs,
                     outputs=[grpcclient.InferRequestedOutput("OUTPUT9")])
    assert err.status() == "StatusCode.INVALID_ARGUMENT"
    assert "'OUTPUT9'" in err.message() and "'add_sub'" in err.message()
    assert_serving(client)


def _add_sub_request(raw0: bytes, raw1: bytes | None = None) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="add_sub", id="req-raw", inputs=[
        pb.ModelInferRequest.InferInputTensor(name=f"INPUT{i}", datatype="FP32", shape=[4])
        for i in range(2)])
    request.raw_input_contents.append(raw0)
    if raw1 is not None:
        request.raw_input_contents.append(raw1)
    return request


def test_raw_contents_that_lie(client, stub):
    err = raw_error(stub.ModelInfer, _add_sub_request(A.tobytes()[:12], B.tobytes()))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "'add_sub'" in err.details() and "'INPUT0'" in err.details()
    assert "16" in err.details() and "12" in err.details()
    err = raw_error(stub.ModelInfer, _add_sub_request(A.tobytes()))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "'INPUT1'" in err.details() and "'add_sub'" in err.details()
    assert_serving(client)


def test_contents_of_the_wrong_type(client, stub):
    request = _add_sub_request(A.tobytes(), B.tobytes())
    del request.raw_input_contents[:]
    for item in request.inputs:
        item.contents.int_contents.extend([1, 2, 3, 4])
    err = raw_error(stub.ModelInfer, request)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "'INPUT0'" in err.details() and "fp32_contents" in err.details()
    assert_serving(client)


def test_exception_in_execute(client):
    inp = grpcclient.InferInput("INPUT0", [4], "FP32")
    inp.set_data_from_numpy(A)
    err = grpc_error(client.infer, "raises", [inp])
    assert err.status() == "StatusCode.INVALID_ARGUMENT"  # Triton: INTERNAL
    assert "deliberate failure in execute" in err.message()
    assert "raises" in err.message()
    assert_serving(client)
    stats = client.get_inference_statistics("raises").model_stats[0]
    assert stats.inference_stats.fail.count >= 1


def test_model_that_failed_to_load(client):
    inp = grpcclient.InferInput("INPUT0", [4], "FP32")
    inp.set_data_from_numpy(A)
    err = grpc_error(client.infer, "broken", [inp])
    assert err.status() == "StatusCode.NOT_FOUND"  # as tritonserver: no available version
    assert "'broken'" in err.message() and "deliberate failure in initialize" in err.message()
    assert_serving(client)


def test_classification_answers_the_top_entries(client):
    # checked value by value against the real Triton: tests/compat/test_compat_classification.py
    result = client.infer("add_sub", add_sub_inputs(),
                          outputs=[grpcclient.InferRequestedOutput("OUTPUT0", class_count=2)])
    top = result.as_numpy("OUTPUT0")
    assert result.get_output("OUTPUT0").datatype == "BYTES" and top.shape == (2,)
    assert all(b.count(b":") == 1 for b in top)  # value:index, add_sub has no labels
    assert_serving(client)


# --- the rest of the service -------------------------------------------------------------


def test_cuda_shared_memory_holds_no_region_and_refuses_registration(client):
    # As tritonserver holding no CUDA region: an empty status, unregistering succeeds.
    assert client.get_cuda_shared_memory_status(as_json=True) == {}
    client.unregister_cuda_shared_memory()
    client.unregister_cuda_shared_memory("r")
    err = grpc_error(client.get_cuda_shared_memory_status, "r")
    assert err.status() == "StatusCode.NOT_FOUND"
    assert err.message() == "Unable to find cuda shared memory region: 'r'"
    err = grpc_error(client.register_cuda_shared_memory, "r", b"\0" * 64, 0, 64)
    assert err.status() == "StatusCode.UNIMPLEMENTED"
    assert "'r'" in err.message() and "CUDA shared memory" in err.message()
    assert_serving(client)


def test_trace_and_log_settings(client):
    settings = client.get_trace_settings(as_json=True)["settings"]
    assert settings["trace_level"]["value"] == ["OFF"]
    # No trace file was given: as in Triton, tracing cannot be turned on.
    err = grpc_error(client.update_trace_settings, settings={"trace_level": ["TIMESTAMPS"]})
    assert err.status() == "StatusCode.INVALID_ARGUMENT"
    assert "trace file name is not given" in err.message()
    logs = client.get_log_settings(as_json=True)["settings"]
    assert {"log_info", "log_warning", "log_error", "log_verbose_level"} <= set(logs)
    try:  # tests/core/tracing/test_log_and_trace_settings.py checks that a change takes effect
        changed = client.update_log_settings(settings={"log_warning": False}, as_json=True)
        assert changed["settings"]["log_warning"] == {"bool_param": False}
    finally:
        client.update_log_settings(settings={"log_warning": True})


def test_repository_control_is_refused_without_explicit_mode(client):
    err = grpc_error(client.load_model, "add_sub")
    assert err.status() == "StatusCode.UNAVAILABLE" and "explicit" in err.message()
    err = grpc_error(client.unload_model, "add_sub")
    assert err.status() == "StatusCode.UNAVAILABLE"
    assert client.is_model_ready("add_sub")


def test_repository_index(client):
    index = {(m.name, m.version): m for m in client.get_model_repository_index().models}
    assert index[("add_sub", "1")].state == "READY"
    broken = [m for (name, _), m in index.items() if name == "broken"]
    assert broken and broken[0].state == "UNAVAILABLE"
    assert "deliberate failure in initialize" in broken[0].reason
    ready = {m.name for m in client.get_model_repository_index().models if m.state == "READY"}
    assert "broken" not in ready and "add_sub" in ready
