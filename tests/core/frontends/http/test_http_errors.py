"""HTTP bad paths: every bad request gets a 4xx naming the model, tensor and expectation,
and the server keeps serving afterwards."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tritonclient.http as httpclient
from test_http_e2e import add_sub_inputs, raw
from tritonclient.utils import InferenceServerException


@pytest.fixture(scope="module")
def client(server):
    with httpclient.InferenceServerClient(server.http_url) as c:
        yield c


@pytest.fixture(autouse=True)
def still_serving(client):
    """After every bad request, add_sub must still answer correctly."""
    yield
    a, b, inputs = add_sub_inputs()
    np.testing.assert_array_equal(client.infer("add_sub", inputs).as_numpy("OUTPUT0"), a + b)


def fails(call, status: str, *fragments: str) -> str:
    with pytest.raises(InferenceServerException) as info:
        call()
    assert info.value.status() == status, info.value.message()
    message = info.value.message()
    for fragment in fragments:
        assert fragment in message, message
    return message


def body(*inputs: dict, **extra) -> str:
    return json.dumps({"inputs": list(inputs), **extra})


def fp32(name: str, shape: list[int], data: list) -> dict:
    return {"name": name, "datatype": "FP32", "shape": shape, "data": data}


def post(server, model: str, payload: str | bytes, headers: dict | None = None):
    status, _, data = raw(server, "POST", f"/v2/models/{model}/infer", payload, headers)
    return status, json.loads(data)["error"] if status != 200 else json.loads(data)


def test_unknown_model_and_version(client):
    _, _, inputs = add_sub_inputs()
    fails(lambda: client.infer("no_such_model", inputs), "404", "no_such_model")
    fails(lambda: client.infer("add_sub", inputs, model_version="7"), "404", "add_sub",
          "version 7")
    fails(lambda: client.get_model_metadata("no_such_model"), "404", "no_such_model")
    fails(lambda: client.get_model_config("add_sub", "3"), "404", "add_sub")


def test_wrong_datatype(client):
    inputs = [httpclient.InferInput("INPUT0", [4], "INT32"),
              httpclient.InferInput("INPUT1", [4], "FP32")]
    inputs[0].set_data_from_numpy(np.zeros(4, np.int32))
    inputs[1].set_data_from_numpy(np.zeros(4, np.float32))
    fails(lambda: client.infer("add_sub", inputs), "400", "INPUT0", "add_sub", "INT32", "FP32")


def test_wrong_shape_names_expected_and_received(client):
    inputs = [httpclient.InferInput("INPUT0", [3], "FP32"),
              httpclient.InferInput("INPUT1", [4], "FP32")]
    inputs[0].set_data_from_numpy(np.zeros(3, np.float32))
    inputs[1].set_data_from_numpy(np.zeros(4, np.float32))
    fails(lambda: client.infer("add_sub", inputs), "400", "INPUT0", "add_sub", "[4]", "[3]",
          "no implicit batch dimension")


def test_batch_model_without_batch_dimension(client):
    tensor = httpclient.InferInput("INPUT0", [3], "FP32")
    tensor.set_data_from_numpy(np.zeros(3, np.float32))
    fails(lambda: client.infer("identity_batch", [tensor]), "400", "INPUT0", "identity_batch",
          "[-1,-1]", "[3]", "implicit batch dimension")


def test_batch_too_large(client):
    tensor = httpclient.InferInput("INPUT0", [9, 2], "FP32")
    tensor.set_data_from_numpy(np.zeros((9, 2), np.float32))
    fails(lambda: client.infer("identity_batch", [tensor]), "400", "identity_batch",
          "batch size 9", "1 to 8")


def test_missing_and_unknown_inputs(server):
    status, error = post(server, "add_sub", body(fp32("INPUT0", [4], [1, 2, 3, 4])))
    assert status == 400
    assert "INPUT1" in error and "add_sub" in error
    status, error = post(server, "add_sub", body(
        fp32("INPUT0", [4], [1, 2, 3, 4]), fp32("INPUT1", [4], [1, 2, 3, 4]),
        fp32("EXTRA", [1], [1])))
    assert status == 400
    assert "EXTRA" in error and "add_sub" in error


def test_unknown_requested_output(server):
    status, error = post(server, "add_sub", body(
        fp32("INPUT0", [4], [1, 2, 3, 4]), fp32("INPUT1", [4], [1, 2, 3, 4]),
        outputs=[{"name": "OUTPUT9"}]))
    assert status == 400
    assert "OUTPUT9" in error and "add_sub" in error


@pytest.mark.parametrize(("payload", "fragment"), [
    (b"{not json", "not valid JSON"),
    (b"[]", "JSON object"),
    (b"{}", "'inputs'"),
    (body(fp32("INPUT0", [4], [1, 2, 3]), fp32("INPUT1", [4], [1, 2, 3, 4])), "3 values"),
    (body(fp32("INPUT0", [4], [1, 2, 3, 4, 5]), fp32("INPUT1", [4], [1, 2, 3, 4])), "5 values"),
    (body(fp32("INPUT0", [4], ["a", "b", "c", "d"]), fp32("INPUT1", [4], [1, 2, 3, 4])),
     "numbers"),
    (body({"name": "INPUT0", "datatype": "FLOAT", "shape": [4], "data": [1, 2, 3, 4]}),
     "datatype"),
    (body({"name": "INPUT0", "datatype": "FP32", "shape": [4]}), "no 'data'"),
    (body({"name": "INPUT0", "datatype": "FP32", "shape": "4", "data": [1]}), "shape"),
])
def test_malformed_bodies_are_400(server, payload, fragment):
    # Triton answers 500 to several of these; naiad says what is wrong with a 400.
    status, error = post(server, "add_sub", payload)
    assert status == 400, error
    assert fragment in error
    assert "add_sub" in error


def test_binary_header_length_that_lies(server):
    header = json.dumps({"inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [4],
         "parameters": {"binary_data_size": 16}},
        {"name": "INPUT1", "datatype": "FP32", "shape": [4],
         "parameters": {"binary_data_size": 16}}]}).encode()
    tensors = np.zeros(8, np.float32).tobytes()
    status, error = post(server, "add_sub", header + tensors,
                         {"Inference-Header-Content-Length": str(len(header) + 100)})
    assert status == 400
    assert "Inference-Header-Content-Length" in error
    status, error = post(server, "add_sub", header + tensors[:20],
                         {"Inference-Header-Content-Length": str(len(header))})
    assert status == 400
    assert "INPUT1" in error and "binary_data_size" in error


def test_exception_in_execute(client):
    tensor = httpclient.InferInput("INPUT0", [2], "FP32")
    tensor.set_data_from_numpy(np.zeros(2, np.float32))
    message = fails(lambda: client.infer("raises", [tensor]), "400", "raises",
                    "deliberate failure in execute")
    assert "RuntimeError" in message
    stats = client.get_inference_statistics("raises")["model_stats"][0]
    assert stats["inference_stats"]["fail"]["count"] >= 1


def test_models_that_failed_to_load(client):
    tensor = httpclient.InferInput("INPUT0", [2], "FP32")
    tensor.set_data_from_numpy(np.zeros(2, np.float32))
    # Triton's status (404: no available version) with the load failure's reason added
    fails(lambda: client.infer("broken_init", [tensor]), "404", "broken_init",
          "deliberate failure in initialize")
    fails(lambda: client.infer("bad_config", [tensor]), "404", "bad_config", "not_a_field")
    assert not client.is_model_ready("broken_init")


def test_statistics_of_unknown_model(client):
    fails(lambda: client.get_inference_statistics("no_such_model"), "400", "no_such_model")


def test_load_unload_need_explicit_mode(client):
    fails(lambda: client.load_model("add_sub"), "503", "explicit")
    fails(lambda: client.unload_model("add_sub"), "503", "explicit")


def test_cuda_shared_memory_registration_is_refused(client):
    fails(lambda: client.register_cuda_shared_memory("r", b"\0" * 64, 0, 64), "400", "'r'",
          "CUDA shared memory")
    fails(lambda: client.get_cuda_shared_memory_status("r"), "404",
          "Unable to find cuda shared memory region: 'r'")


def test_unknown_path_and_method(server):
    assert raw(server, "GET", "/v2/nothing/here")[0] == 404
    assert raw(server, "GET", "/v2/models/add_sub/infer")[0] == 405
