"""HTTP/REST end to end: tritonclient.http against a real ``naiad serve`` process."""

from __future__ import annotations

import http.client
import json

import ml_dtypes
import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import np_to_triton_dtype
from zoo import IDENTITY_TYPES


@pytest.fixture(scope="module")
def client(server):
    with httpclient.InferenceServerClient(server.http_url) as c:
        yield c


def raw(server, method: str, path: str, body: bytes | str | None = None,
        headers: dict | None = None) -> tuple[int, dict, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
    conn.request(method, path, body=body, headers=headers or {})
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, data


def add_sub_inputs(binary: bool = True):
    a = np.arange(4, dtype=np.float32)
    b = np.full(4, 10, dtype=np.float32)
    inputs = [httpclient.InferInput("INPUT0", [4], "FP32"),
              httpclient.InferInput("INPUT1", [4], "FP32")]
    inputs[0].set_data_from_numpy(a, binary_data=binary)
    inputs[1].set_data_from_numpy(b, binary_data=binary)
    return a, b, inputs


def test_health_and_server_metadata(client):
    assert client.is_server_live()
    assert client.is_server_ready()
    meta = client.get_server_metadata()
    assert meta["name"] == "naiad"
    assert "binary_tensor_data" in meta["extensions"]


def test_model_metadata_ready_and_config(client):
    assert client.is_model_ready("add_sub")
    assert client.is_model_ready("add_sub", "1")
    assert not client.is_model_ready("add_sub", "2")
    assert not client.is_model_ready("no_such_model")
    meta = client.get_model_metadata("add_sub")
    assert meta == {
        "name": "add_sub", "versions": ["1"], "platform": "python",
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [4]},
                   {"name": "INPUT1", "datatype": "FP32", "shape": [4]}],
        "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [4]},
                    {"name": "OUTPUT1", "datatype": "FP32", "shape": [4]}],
    }
    assert client.get_model_metadata("identity_batch", "1")["inputs"][0]["shape"] == [-1, -1]
    config = client.get_model_config("add_sub")
    assert config["name"] == "add_sub"
    assert config["backend"] == "python"
    assert [i["name"] for i in config["input"]] == ["INPUT0", "INPUT1"]
    assert config["input"][0]["dims"] == [4]


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_add_sub(client, binary):
    a, b, inputs = add_sub_inputs(binary)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary),
               httpclient.InferRequestedOutput("OUTPUT1", binary_data=binary)]
    result = client.infer("add_sub", inputs, outputs=outputs, request_id="r-1")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    response = result.get_response()
    assert response["model_name"] == "add_sub"
    assert response["model_version"] == "1"
    assert response["id"] == "r-1"


def test_requested_output_subset(client):
    a, b, inputs = add_sub_inputs()
    result = client.infer("add_sub", inputs,
                          outputs=[httpclient.InferRequestedOutput("OUTPUT1")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert result.as_numpy("OUTPUT0") is None


def test_compressed_request_and_response(client):
    a, b, inputs = add_sub_inputs()
    for algorithm in ("gzip", "deflate"):
        result = client.infer("add_sub", inputs, request_compression_algorithm=algorithm,
                              response_compression_algorithm=algorithm)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)


def _sample(datatype: str, binary: bool = True) -> np.ndarray:
    if datatype == "BYTES":
        # JSON carries strings, so arbitrary bytes only travel as binary data
        extra = b"\x00\xff" if binary else b"tab\there"
        return np.array([b"hello", "wörld".encode(), b"", extra], dtype=object)
    if datatype == "BOOL":
        return np.array([True, False, True], dtype=bool)
    if datatype == "BF16":
        return np.array([1.5, -2.25, 3.0], dtype=ml_dtypes.bfloat16)
    dtype = np.dtype(datatype.lower().replace("fp", "float"))
    info = np.iinfo(dtype) if dtype.kind in "iu" else np.finfo(dtype)
    return np.array([info.min, 0, 1, info.max], dtype=dtype)


@pytest.mark.parametrize("datatype", sorted(IDENTITY_TYPES))
@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_every_datatype_round_trips(client, datatype, binary):
    if datatype == "BF16" and not binary:
        pytest.skip("tritonclient.http can only send BF16 as binary data")
    data = _sample(datatype, binary)
    tensor = httpclient.InferInput("INPUT0", list(data.shape), datatype)
    tensor.set_data_from_numpy(data, binary_data=binary)
    assert np_to_triton_dtype(data.dtype) == datatype
    result = client.infer(f"identity_{datatype.lower()}", [tensor], outputs=[
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)])
    out = result.as_numpy("OUTPUT0")
    if datatype == "BYTES":
        # tritonclient decodes JSON strings to str, binary elements stay bytes
        assert [x.encode() if isinstance(x, str) else x for x in out] == list(data)
    else:
        assert out.dtype == data.dtype
        np.testing.assert_array_equal(out, data)


def test_json_body_by_hand(server):
    body = {"id": "by-hand", "inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [[1, 2], [3, 4]]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [4], "data": [1, 1, 1, 1]}]}
    status, headers, data = raw(server, "POST", "/v2/models/add_sub/infer", json.dumps(body))
    assert status == 200, data
    assert headers["content-type"] == "application/json"
    assert json.loads(data) == {
        "model_name": "add_sub", "model_version": "1", "id": "by-hand",
        "outputs": [
            {"name": "OUTPUT0", "datatype": "FP32", "shape": [4], "data": [2.0, 3.0, 4.0, 5.0]},
            {"name": "OUTPUT1", "datatype": "FP32", "shape": [4], "data": [0.0, 1.0, 2.0, 3.0]},
        ]}


def test_binary_output_by_hand(server):
    # As tritonserver: a named output is binary only with its own binary_data true
    # (binary_data_output applies when the request names no output).
    body = {"parameters": {"binary_data_output": True}, "inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [4], "data": [1, 1, 1, 1]}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}},
                    {"name": "OUTPUT1"}]}
    status, headers, data = raw(server, "POST", "/v2/models/add_sub/versions/1/infer",
                                json.dumps(body))
    assert status == 200, data
    assert headers["content-type"] == "application/octet-stream"
    length = int(headers["inference-header-content-length"])
    header = json.loads(data[:length])
    assert header["outputs"][0]["parameters"] == {"binary_data_size": 16}
    assert header["outputs"][1]["data"] == [0.0, 1.0, 2.0, 3.0]
    np.testing.assert_array_equal(np.frombuffer(data[length:], np.float32), [2, 3, 4, 5])


def test_batched_model(client):
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    tensor = httpclient.InferInput("INPUT0", [2, 3], "FP32")
    tensor.set_data_from_numpy(data)
    result = client.infer("identity_batch", [tensor])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


def test_repository_index_reports_failed_models(client):
    index = {(m["name"], m.get("version")): m for m in client.get_model_repository_index()}
    assert index[("add_sub", "1")]["state"] == "READY"
    broken = index[("broken_init", "1")]
    assert broken["state"] == "UNAVAILABLE"
    assert "deliberate failure in initialize" in broken["reason"]
    bad = index[("bad_config", None)]
    assert bad["state"] == "UNAVAILABLE"
    assert "not_a_field" in bad["reason"]


def test_statistics_count_inferences(client):
    before = client.get_inference_statistics("identity_int32")["model_stats"][0]
    tensor = httpclient.InferInput("INPUT0", [3], "INT32")
    tensor.set_data_from_numpy(np.array([1, 2, 3], dtype=np.int32))
    for _ in range(3):
        client.infer("identity_int32", [tensor])
    after = client.get_inference_statistics("identity_int32", "1")["model_stats"][0]
    assert after["name"] == "identity_int32"
    assert after["version"] == "1"
    assert after["inference_count"] - before["inference_count"] == 3
    assert after["execution_count"] - before["execution_count"] == 3
    success = after["inference_stats"]["success"]
    assert success["count"] - before["inference_stats"]["success"]["count"] == 3
    assert success["ns"] > 0
    assert after["last_inference"] > 0
    assert any(b["batch_size"] == 1 for b in after["batch_stats"])
    everything = client.get_inference_statistics()["model_stats"]
    assert "add_sub" in {s["name"] for s in everything}


def test_metrics_endpoint(server, client):
    _, _, inputs = add_sub_inputs()
    client.infer("add_sub", inputs)
    conn = http.client.HTTPConnection("127.0.0.1", server.metrics_port, timeout=10)
    conn.request("GET", "/metrics")
    response = conn.getresponse()
    text = response.read().decode()
    conn.close()
    assert response.status == 200
    assert "# TYPE nv_inference_request_success counter" in text
    line = next(x for x in text.splitlines()
                if x.startswith('nv_inference_request_success{model="add_sub",version="1"}'))
    assert int(line.split()[-1]) >= 1
    assert 'nv_inference_request_failure{model="add_sub",reason="BACKEND",version="1"}' in text
