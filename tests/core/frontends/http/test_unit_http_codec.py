"""Unit tests of naiad.frontends.http.codec: the V2 JSON body with binary tensor data."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator

import numpy as np
import pytest

from naiad.errors import InferenceServerError, Status
from naiad.frontends.http.codec import HEADER_LENGTH, decode_request, encode_response, error_body
from naiad.shm import SharedMemoryRegistry
from naiad.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor

MODEL = "add_sub"


@pytest.fixture
def shm_key() -> Iterator[str]:
    key = f"/naiad-unit-codec-{uuid.uuid4().hex}"
    with open("/dev/shm" + key, "wb") as f:
        f.write(b"\x00" * 64)
    try:
        yield key
    finally:
        os.unlink("/dev/shm" + key)


def body(doc: dict, *binary: bytes) -> tuple[bytes, int | None]:
    head = json.dumps(doc).encode()
    if not binary:
        return head, None
    return head + b"".join(binary), len(head)


def decode(doc: dict, *binary: bytes, registry: SharedMemoryRegistry | None = None
           ) -> InferenceRequest:
    data, length = body(doc, *binary)
    return decode_request(MODEL, 1, data, length, registry or SharedMemoryRegistry())


def rejected(doc: dict | bytes, *fragments: str, binary: tuple[bytes, ...] = (),
             header_length: int | None = None) -> str:
    if isinstance(doc, bytes):
        data, length = doc, header_length
    else:
        data, length = body(doc, *binary)
    with pytest.raises(InferenceServerError) as info:
        decode_request(MODEL, 1, data, length, SharedMemoryRegistry())
    assert info.value.status is Status.INVALID_ARG
    assert f"'{MODEL}'" in info.value.message
    for fragment in fragments:
        assert fragment in info.value.message, (fragment, info.value.message)
    return info.value.message


def fp32(name: str, values: list[float]) -> dict:
    return {"name": name, "datatype": "FP32", "shape": [len(values)], "data": values}


# --- decode_request -------------------------------------------------------------------------


def test_header_name_is_lowercase_for_asgi():
    assert HEADER_LENGTH == "inference-header-content-length"


def test_decode_json_only_request():
    req = decode({"inputs": [fp32("A", [1, 2]), fp32("B", [3, 4])]})
    assert req.model_name == MODEL and req.model_version == 1
    assert list(req.inputs) == ["A", "B"]
    assert req.inputs["A"].data.dtype == np.float32
    np.testing.assert_array_equal(req.inputs["B"].data, [3, 4])
    assert req.id == "" and req.requested_outputs is None and req.parameters == {}


def test_decode_nested_json_data_and_bytes():
    req = decode({"inputs": [
        {"name": "M", "datatype": "INT32", "shape": [2, 2], "data": [[1, 2], [3, 4]]},
        {"name": "S", "datatype": "BYTES", "shape": [2], "data": ["hello", "wörld"]}]})
    np.testing.assert_array_equal(req.inputs["M"].data, [[1, 2], [3, 4]])
    assert req.inputs["S"].data.tolist() == [b"hello", "wörld".encode()]


def test_decode_binary_inputs_in_order_after_the_json():
    a = np.array([1, 2, 3], np.float32).tobytes()
    b = np.array([[7, 8]], np.int64).tobytes()
    req = decode({"inputs": [
        {"name": "A", "datatype": "FP32", "shape": [3],
         "parameters": {"binary_data_size": len(a)}},
        {"name": "J", "datatype": "INT8", "shape": [1], "data": [5]},
        {"name": "B", "datatype": "INT64", "shape": [1, 2],
         "parameters": {"binary_data_size": len(b)}}]}, a, b)
    np.testing.assert_array_equal(req.inputs["A"].data, [1, 2, 3])
    np.testing.assert_array_equal(req.inputs["B"].data, [[7, 8]])
    assert req.inputs["J"].data.tolist() == [5]


def test_decode_binary_input_is_a_view_of_the_body():
    raw = np.arange(4, dtype=np.float32).tobytes()
    data, length = body({"inputs": [{"name": "A", "datatype": "FP32", "shape": [4],
                                     "parameters": {"binary_data_size": 16}}]}, raw)
    req = decode_request(MODEL, 1, data, length, SharedMemoryRegistry())
    assert np.shares_memory(req.inputs["A"].data, np.frombuffer(data, dtype=np.uint8))


def test_decode_binary_bytes_input():
    raw = b"\x05\x00\x00\x00hello\x06\x00\x00\x00w\xc3\xb6rld"
    req = decode({"inputs": [{"name": "S", "datatype": "BYTES", "shape": [2],
                              "parameters": {"binary_data_size": len(raw)}}]}, raw)
    assert req.inputs["S"].data.tolist() == [b"hello", "wörld".encode()]


def test_decode_zero_size_binary_input():
    data, _ = body({"inputs": [{"name": "A", "datatype": "FP32", "shape": [0],
                                "parameters": {"binary_data_size": 0}}]})
    req = decode_request(MODEL, 1, data, len(data), SharedMemoryRegistry())
    assert req.inputs["A"].data.shape == (0,)


def test_decode_id_outputs_and_parameters():
    req = decode({"id": "req-1", "inputs": [fp32("A", [1])],
                  "outputs": [{"name": "SUM", "parameters": {"binary_data": True}},
                              {"name": "DIFF"}],
                  "parameters": {"binary_data_output": True, "priority": 2}})
    assert req.id == "req-1"
    assert req.requested_outputs == [RequestedOutput("SUM", {"binary_data": True}),
                                     RequestedOutput("DIFF", {})]
    assert req.parameters == {"binary_data_output": True, "priority": 2}


def test_decode_empty_outputs_list_is_kept_as_empty():
    assert decode({"inputs": [], "outputs": []}).requested_outputs == []


def test_decode_binary_data_size_past_the_end():
    rejected({"inputs": [{"name": "A", "datatype": "FP32", "shape": [4],
                          "parameters": {"binary_data_size": 16}}]},
             "input 'A'", "binary_data_size 16", "offset 0", "the 8 bytes of binary data",
             binary=(b"\x00" * 8,))


def test_decode_binary_data_size_without_binary_part():
    rejected({"inputs": [{"name": "A", "datatype": "FP32", "shape": [1],
                          "parameters": {"binary_data_size": 4}}]},
             "input 'A'", "binary_data_size 4", "the 0 bytes")


def test_decode_second_binary_input_past_the_end_reports_its_offset():
    rejected({"inputs": [
        {"name": "A", "datatype": "FP32", "shape": [1], "parameters": {"binary_data_size": 4}},
        {"name": "B", "datatype": "FP32", "shape": [2], "parameters": {"binary_data_size": 8}}]},
        "input 'B'", "offset 4", binary=(b"\x00" * 10,))


def test_decode_leftover_binary_bytes_are_an_error():
    rejected({"inputs": [{"name": "A", "datatype": "FP32", "shape": [1],
                          "parameters": {"binary_data_size": 4}}]},
             "3 bytes of binary data", "belong to no input", binary=(b"\x00" * 7,))


def test_decode_binary_size_that_does_not_match_the_shape():
    rejected({"inputs": [{"name": "A", "datatype": "FP32", "shape": [2],
                          "parameters": {"binary_data_size": 4}}]},
             "input 'A'", "needs 8 bytes", "got 4", binary=(b"\x00" * 4,))


@pytest.mark.parametrize("size", [-1, "4", 4.0])
def test_decode_binary_data_size_must_be_a_non_negative_integer(size):
    rejected({"inputs": [{"name": "A", "datatype": "FP32", "shape": [1],
                          "parameters": {"binary_data_size": size}}]},
             "input 'A'", "parameter 'binary_data_size' must be an unsigned integer",
             binary=(b"\x00" * 4,))


def test_decode_header_length_longer_than_the_body():
    rejected(b'{"inputs":[]}', "Inference-Header-Content-Length", "100 bytes",
             "only 13 bytes", header_length=100)


def test_decode_header_length_cutting_the_json_short():
    rejected(b'{"inputs":[]}', "not valid JSON", header_length=5)


def test_decode_duplicate_input():
    rejected({"inputs": [fp32("A", [1]), fp32("A", [2])]}, "input 'A'", "given twice")


def test_decode_input_without_any_data():
    rejected({"inputs": [{"name": "A", "datatype": "FP32", "shape": [1]}]},
             "input 'A'", "no 'data'", "binary_data_size", "shared memory")


@pytest.mark.parametrize(("raw", "fragment"), [
    (b"{not json", "not valid JSON"),
    (b"", "not valid JSON"),
    (b"[1, 2]", "must be a JSON object"),
    (b'{"inputs": {}}', "'inputs' list"),
    (b'{"outputs": []}', "'inputs' list"),
    (b'{"inputs": [5]}', "each entry of 'inputs' must be an object"),
    (b'{"inputs": [], "outputs": {}}', "'outputs' must be a list"),
    (b'{"inputs": [], "outputs": [{"nom": "X"}]}', "each entry of 'outputs' needs a 'name'"),
    (b'{"inputs": [], "outputs": ["X"]}', "each entry of 'outputs' needs a 'name'"),
    (b'{"inputs": [], "parameters": [1]}', "request 'parameters' must be an object"),
])
def test_decode_malformed_documents(raw, fragment):
    rejected(raw, fragment)


def test_decode_input_parameters_must_be_an_object():
    rejected({"inputs": [{"name": "A", "datatype": "FP32", "shape": [1], "data": [1],
                          "parameters": [1]}]}, "input 'A'", "'parameters' must be an object")


def test_decode_input_header_errors_come_from_check_header():
    rejected({"inputs": [{"name": "A", "datatype": "FLOAT", "shape": [1], "data": [1]}]},
             "input 'A'", "unknown datatype 'FLOAT'")
    rejected({"inputs": [{"name": "A", "datatype": "FP32", "shape": [-1], "data": [1]}]},
             "input 'A'", "non-negative integers")


def test_decode_output_parameters_must_be_an_object():
    rejected({"inputs": [], "outputs": [{"name": "SUM", "parameters": [1]}]},
             "'SUM'", "'parameters' must be an object")


def test_decode_shm_input(registry, shm_key):
    registry.register("in0", shm_key, 0, 64)
    registry.write("in0", 8, 8, np.array([1.5, 2.5], np.float32).tobytes(), "t")
    req = decode({"inputs": [{"name": "A", "datatype": "FP32", "shape": [2], "parameters": {
        "shared_memory_region": "in0", "shared_memory_byte_size": 8,
        "shared_memory_offset": 8}}]}, registry=registry)
    np.testing.assert_array_equal(req.inputs["A"].data, [1.5, 2.5])


def test_decode_shm_input_of_unregistered_region_is_not_found():
    with pytest.raises(InferenceServerError) as info:
        decode({"inputs": [{"name": "A", "datatype": "FP32", "shape": [1], "parameters": {
            "shared_memory_region": "nope", "shared_memory_byte_size": 4}}]})
    assert info.value.status is Status.NOT_FOUND
    assert "input 'A' of model 'add_sub'" in info.value.message
    assert "'nope' is not registered" in info.value.message


SHM_OUT = {"shared_memory_region": "out", "shared_memory_byte_size": 16}


@pytest.mark.parametrize(("params", "status", "fragments"), [
    ({"shared_memory_region": "nope", "shared_memory_byte_size": 16}, Status.NOT_FOUND,
     ("'nope' is not registered",)),
    ({**SHM_OUT, "shared_memory_offset": 60}, Status.INVALID_ARG, ("outside region 'out'",)),
    ({**SHM_OUT, "binary_data": True}, Status.INVALID_ARG,
     ("can't set both 'shared_memory_region' and 'binary_data'",)),
    ({"shared_memory_region": "out"}, Status.INVALID_ARG, ("shared_memory_byte_size",)),
    ({**SHM_OUT, "classification": 2}, Status.INVALID_ARG,
     ("classification output cannot be written to shared memory",)),
])
def test_decode_refuses_bad_output_parameters_before_the_request_runs(
        registry, shm_key, params, status, fragments):
    registry.register("out", shm_key, 0, 64)
    with pytest.raises(InferenceServerError) as info:
        decode({"inputs": [fp32("A", [1])], "outputs": [{"name": "SUM", "parameters": params}]},
               registry=registry)
    assert info.value.status is status
    assert "output 'SUM' of model 'add_sub'" in info.value.message
    for fragment in fragments:
        assert fragment in info.value.message, info.value.message


def test_decode_accepts_a_shm_output_with_binary_data_false(registry, shm_key):
    registry.register("out", shm_key, 0, 64)
    req = decode({"inputs": [fp32("A", [1])], "outputs": [
        {"name": "SUM", "parameters": {**SHM_OUT, "binary_data": False}}]}, registry=registry)
    assert req.requested_outputs == [RequestedOutput("SUM", {**SHM_OUT, "binary_data": False})]


# --- encode_response ------------------------------------------------------------------------

SUM = Tensor("SUM", "FP32", (4,), np.array([11, 22, 33, 44], np.float32))
DIFF = Tensor("DIFF", "FP32", (4,), np.array([-9, -18, -27, -36], np.float32))
TEXT = Tensor("TEXT", "BYTES", (2,), np.array([b"hello", "wörld".encode()], dtype=object))


def make_request(outputs: list[RequestedOutput] | None = None, request_id: str = "",
                 **parameters) -> InferenceRequest:
    return InferenceRequest(MODEL, 1, {}, id=request_id, requested_outputs=outputs,
                            parameters=parameters)


def encode(request: InferenceRequest, *tensors: Tensor,
           registry: SharedMemoryRegistry | None = None, **parameters
           ) -> tuple[dict, bytes, int | None]:
    response = InferenceResponse(list(tensors), parameters=parameters)
    data, length = encode_response(request, response, 1, registry or SharedMemoryRegistry())
    split = len(data) if length is None else length
    return json.loads(data[:split]), data[split:], length


def test_encode_json_response_matches_triton():
    doc, tail, length = encode(make_request(request_id="req-1"), SUM, DIFF)
    assert length is None and tail == b""
    assert doc == {"model_name": MODEL, "model_version": "1", "id": "req-1", "outputs": [
        {"name": "SUM", "datatype": "FP32", "shape": [4], "data": [11.0, 22.0, 33.0, 44.0]},
        {"name": "DIFF", "datatype": "FP32", "shape": [4],
         "data": [-9.0, -18.0, -27.0, -36.0]}]}


def test_encode_keys_in_tritons_order():
    doc, _, _ = encode(make_request(request_id="req-1"), SUM, sequence_end=True)
    assert list(doc) == ["id", "model_name", "model_version", "parameters", "outputs"]


def test_encode_without_id_or_parameters_leaves_the_keys_out():
    doc, _, _ = encode(make_request(), SUM)
    assert list(doc) == ["model_name", "model_version", "outputs"]


def test_encode_response_parameters():
    doc, _, _ = encode(make_request(), SUM, sequence_end=True)
    assert doc["parameters"] == {"sequence_end": True}


def test_encode_binary_data_output_makes_every_output_binary_in_order():
    doc, tail, length = encode(make_request(binary_data_output=True), SUM, TEXT)
    assert length is not None
    assert [o["parameters"] for o in doc["outputs"]] == [{"binary_data_size": 16},
                                                          {"binary_data_size": 19}]
    assert all("data" not in o for o in doc["outputs"])
    assert tail == SUM.data.tobytes() + b"\x05\x00\x00\x00hello\x06\x00\x00\x00w\xc3\xb6rld"


def test_encode_binary_data_output_applies_only_when_no_output_is_named():
    # tritonserver 2.51: a named output is binary only with its own binary_data true
    request = make_request([RequestedOutput("SUM", {"binary_data": False}),
                            RequestedOutput("DIFF"),
                            RequestedOutput("TEXT", {"binary_data": True})],
                           binary_data_output=True)
    doc, tail, _ = encode(request, SUM, DIFF, TEXT)
    assert doc["outputs"][0]["data"] == [11.0, 22.0, 33.0, 44.0]
    assert doc["outputs"][1]["data"] == [-9.0, -18.0, -27.0, -36.0]
    assert "parameters" not in doc["outputs"][0] and "parameters" not in doc["outputs"][1]
    assert doc["outputs"][2]["parameters"] == {"binary_data_size": 19}
    assert tail == b"\x05\x00\x00\x00hello\x06\x00\x00\x00w\xc3\xb6rld"


def test_encode_per_output_binary_true_without_default():
    request = make_request([RequestedOutput("SUM"), RequestedOutput("DIFF", {"binary_data": True})])
    doc, tail, _ = encode(request, SUM, DIFF)
    assert "data" in doc["outputs"][0]
    assert doc["outputs"][1]["parameters"] == {"binary_data_size": 16}
    assert tail == DIFF.data.tobytes()


def test_encode_json_bytes_as_strings():
    doc, _, _ = encode(make_request(), TEXT)
    assert doc["outputs"][0]["data"] == ["hello", "wörld"]


def test_encode_shm_output_writes_the_region_and_lists_the_output_bare(registry, shm_key):
    registry.register("out", shm_key, 0, 64)
    request = make_request([RequestedOutput("SUM", {"shared_memory_region": "out",
                                                    "shared_memory_byte_size": 32,
                                                    "shared_memory_offset": 16}),
                            RequestedOutput("DIFF", {"shared_memory_region": "out",
                                                     "shared_memory_byte_size": 16})],
                           binary_data_output=True)
    doc, tail, length = encode(request, SUM, DIFF, registry=registry)
    assert length is None and tail == b""
    # as tritonserver: no 'parameters' (perf_analyzer reads them as binary data) and no data
    assert doc["outputs"] == [{"name": "SUM", "datatype": "FP32", "shape": [4]},
                              {"name": "DIFF", "datatype": "FP32", "shape": [4]}]
    assert registry.read("out", 16, 16, "t") == SUM.data.tobytes()
    assert registry.read("out", 0, 16, "t") == DIFF.data.tobytes()


def test_encode_shm_output_too_small_names_the_output(registry, shm_key):
    registry.register("out", shm_key, 0, 64)
    request = make_request([RequestedOutput("SUM", {"shared_memory_region": "out",
                                                    "shared_memory_byte_size": 8})])
    with pytest.raises(InferenceServerError) as info:
        encode(request, SUM, registry=registry)
    assert info.value.status is Status.INVALID_ARG
    assert "output 'SUM' of model 'add_sub'" in info.value.message
    assert "16 bytes" in info.value.message


def test_error_body_is_tritons_json():
    assert json.loads(error_body("model 'x' is not ready")) == {"error": "model 'x' is not ready"}
