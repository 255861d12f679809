"""The gRPC codec on its own: ModelInferRequest -> InferenceRequest -> ModelInferResponse."""

from __future__ import annotations

import os
import uuid

import ml_dtypes
import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from naiad.errors import InferenceServerError, Status
from naiad.frontends.grpc.codec import (
    CONTENTS_FIELD,
    ResponseEncoder,
    decode_request,
    params_to_dict,
    set_params,
    stream_error,
    stream_response,
)
from naiad.types import InferenceResponse, Tensor

MODEL = "add_sub"
Input = pb.ModelInferRequest.InferInputTensor
Output = pb.ModelInferRequest.InferRequestedOutputTensor


@pytest.fixture
def shm_region(registry):
    """A 64-byte /dev/shm file registered as region 'r' (offset 0)."""
    key = f"/naiad-test-{uuid.uuid4().hex}"
    path = "/dev/shm" + key
    with open(path, "wb") as f:
        f.write(b"\0" * 64)
    registry.register("r", key, 0, 64)
    yield path
    registry.unregister("r")
    os.unlink(path)


def _raw_request(*arrays: np.ndarray, datatype: str = "FP32", **kwargs) -> pb.ModelInferRequest:
    return pb.ModelInferRequest(
        model_name=MODEL,
        inputs=[Input(name=f"INPUT{i}", datatype=datatype, shape=a.shape)
                for i, a in enumerate(arrays)],
        raw_input_contents=[a.tobytes() for a in arrays],
        **kwargs,
    )


_TO_SHM: dict[int, dict | None] = {}  # id(request) -> the shared memory outputs decoded


def decode(model, version, msg, registry):
    request, to_shm = decode_request(model, version, msg, registry)
    _TO_SHM[id(request)] = to_shm
    return request


def encode_response(request, response, registry) -> pb.ModelInferResponse:
    """Encode with the hand-written encoder, parse back with the official classes."""
    to_shm = _TO_SHM.pop(id(request), None)
    return pb.ModelInferResponse.FromString(
        ResponseEncoder().encode(request, response, to_shm))


def _error(registry, msg) -> InferenceServerError:
    with pytest.raises(InferenceServerError) as info:
        decode(MODEL, 1, msg, registry)
    return info.value


# --- inputs --------------------------------------------------------------------------------


def test_raw_inputs_become_views_of_the_message_bytes(registry):
    a = np.arange(4, dtype=np.float32)
    b = np.ones((2, 2), dtype=np.float32)
    req = decode(MODEL, 3, _raw_request(a, b, id="req-7"), registry)
    assert req.model_name == MODEL and req.model_version == 3 and req.id == "req-7"
    assert list(req.inputs) == ["INPUT0", "INPUT1"]
    t0 = req.inputs["INPUT0"]
    assert (t0.datatype, t0.shape) == ("FP32", (4,))
    np.testing.assert_array_equal(t0.data, a)
    assert not t0.data.flags.owndata  # np.frombuffer, no copy
    assert req.inputs["INPUT1"].data.shape == (2, 2)
    assert req.requested_outputs is None
    assert req.parameters == {}


def test_raw_bfloat16_and_fp16(registry):
    for datatype, dtype in (("BF16", ml_dtypes.bfloat16), ("FP16", np.float16)):
        a = np.array([1.5, -2.0, 3.25], dtype=dtype)
        req = decode(MODEL, 1, _raw_request(a, datatype=datatype), registry)
        assert req.inputs["INPUT0"].data.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(req.inputs["INPUT0"].data, a)


def test_raw_bytes_tensor(registry):
    raw = b"\x05\x00\x00\x00hello\x06\x00\x00\x00w\xc3\xb6rld"
    msg = pb.ModelInferRequest(model_name=MODEL, raw_input_contents=[raw],
                               inputs=[Input(name="INPUT0", datatype="BYTES", shape=[2])])
    data = decode(MODEL, 1, msg, registry).inputs["INPUT0"].data
    assert list(data) == [b"hello", "wörld".encode()]


CONTENTS_CASES = [
    ("BOOL", [True, False, True], np.bool_),
    ("INT8", [-128, 0, 127], np.int8),
    ("INT16", [-300, 0, 300], np.int16),
    ("INT32", [-(2**31), 0, 2**31 - 1], np.int32),
    ("INT64", [-(2**63), 0, 2**63 - 1], np.int64),
    ("UINT8", [0, 1, 255], np.uint8),
    ("UINT16", [0, 1, 65535], np.uint16),
    ("UINT32", [0, 1, 2**32 - 1], np.uint32),
    ("UINT64", [0, 1, 2**64 - 1], np.uint64),
    ("FP32", [1.5, -2.0, 3.25], np.float32),
    ("FP64", [1.5, -2.0, 1e300], np.float64),
]


@pytest.mark.parametrize(("datatype", "values", "dtype"), CONTENTS_CASES)
def test_typed_contents(registry, datatype, values, dtype):
    contents = pb.InferTensorContents(**{CONTENTS_FIELD[datatype]: values})
    msg = pb.ModelInferRequest(model_name=MODEL, inputs=[
        Input(name="INPUT0", datatype=datatype, shape=[3], contents=contents)])
    tensor = decode(MODEL, 1, msg, registry).inputs["INPUT0"]
    assert tensor.data.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(tensor.data, np.array(values, dtype=dtype))


def test_bytes_contents(registry):
    contents = pb.InferTensorContents(bytes_contents=[b"hello", b"x"])
    msg = pb.ModelInferRequest(model_name=MODEL, inputs=[
        Input(name="INPUT0", datatype="BYTES", shape=[1, 2], contents=contents)])
    data = decode(MODEL, 1, msg, registry).inputs["INPUT0"].data
    assert data.shape == (1, 2) and data.tolist() == [[b"hello", b"x"]]


def test_fp16_has_no_typed_contents(registry):
    contents = pb.InferTensorContents(fp32_contents=[1.0])
    msg = pb.ModelInferRequest(model_name=MODEL, inputs=[
        Input(name="INPUT0", datatype="FP16", shape=[1], contents=contents)])
    err = _error(registry, msg)
    assert err.status is Status.INVALID_ARG
    assert "'INPUT0'" in err.message and MODEL in err.message
    assert "raw_input_contents" in err.message


def test_contents_in_the_wrong_field(registry):
    contents = pb.InferTensorContents(fp32_contents=[1.0, 2.0])
    msg = pb.ModelInferRequest(model_name=MODEL, inputs=[
        Input(name="INPUT0", datatype="INT32", shape=[2], contents=contents)])
    err = _error(registry, msg)
    assert "'INPUT0'" in err.message and MODEL in err.message
    assert "fp32_contents" in err.message and "int_contents" in err.message


def test_contents_count_mismatch(registry):
    contents = pb.InferTensorContents(fp32_contents=[1.0, 2.0, 3.0])
    msg = pb.ModelInferRequest(model_name=MODEL, inputs=[
        Input(name="INPUT0", datatype="FP32", shape=[4], contents=contents)])
    err = _error(registry, msg)
    assert "'INPUT0'" in err.message and "4 elements" in err.message and "3" in err.message


def test_int8_contents_out_of_range(registry):
    contents = pb.InferTensorContents(int_contents=[1000])
    msg = pb.ModelInferRequest(model_name=MODEL, inputs=[
        Input(name="INPUT0", datatype="INT8", shape=[1], contents=contents)])
    err = _error(registry, msg)
    assert err.status is Status.INVALID_ARG and "'INPUT0'" in err.message


def test_contents_and_raw_together(registry):
    msg = _raw_request(np.zeros(4, np.float32))
    msg.inputs.add(name="INPUT1", datatype="FP32", shape=[1],
                   contents=pb.InferTensorContents(fp32_contents=[1.0]))
    err = _error(registry, msg)
    assert "'INPUT1'" in err.message and "raw_input_contents" in err.message


def test_raw_length_that_lies(registry):
    msg = _raw_request(np.zeros(4, np.float32))
    msg.raw_input_contents[0] = b"\0" * 12
    err = _error(registry, msg)
    assert err.status is Status.INVALID_ARG
    assert "'INPUT0'" in err.message and MODEL in err.message
    assert "16" in err.message and "12" in err.message


def test_too_few_raw_contents(registry):
    msg = _raw_request(np.zeros(4, np.float32), np.zeros(4, np.float32))
    del msg.raw_input_contents[1]
    err = _error(registry, msg)
    assert "unable to find data for input tensor 'INPUT1'" in err.message
    assert MODEL in err.message


def test_too_many_raw_contents(registry):
    msg = _raw_request(np.zeros(4, np.float32))
    msg.raw_input_contents.append(b"\0" * 16)
    err = _error(registry, msg)
    assert "2 raw_input_contents" in err.message and MODEL in err.message


def test_input_given_twice(registry):
    a = np.zeros(4, np.float32)
    msg = _raw_request(a, a)
    msg.inputs[1].name = "INPUT0"
    assert "given twice" in _error(registry, msg).message


@pytest.mark.parametrize(("datatype", "shape", "needle"), [
    ("FP33", [4], "unknown datatype"),
    ("FP32", [-1], "non-negative"),
    ("", [4], "unknown datatype"),
])
def test_bad_headers(registry, datatype, shape, needle):
    msg = pb.ModelInferRequest(model_name=MODEL, raw_input_contents=[b"\0" * 16],
                               inputs=[Input(name="INPUT0", datatype=datatype, shape=shape)])
    err = _error(registry, msg)
    assert needle in err.message and "'INPUT0'" in err.message


def test_empty_input_name(registry):
    msg = _raw_request(np.zeros(4, np.float32))
    msg.inputs[0].name = ""
    assert "name" in _error(registry, msg).message


def test_shared_memory_input(registry, shm_region):
    data = np.arange(4, dtype=np.float32)
    with open(shm_region, "r+b") as f:
        f.seek(8)
        f.write(data.tobytes())
    item = Input(name="INPUT0", datatype="FP32", shape=[4])
    item.parameters["shared_memory_region"].string_param = "r"
    item.parameters["shared_memory_byte_size"].int64_param = 16
    item.parameters["shared_memory_offset"].int64_param = 8
    # The shared memory input takes no raw entry: INPUT1's raw content is the first one.
    other = np.ones(4, np.float32)
    msg = pb.ModelInferRequest(model_name=MODEL, inputs=[
        item, Input(name="INPUT1", datatype="FP32", shape=[4])],
        raw_input_contents=[other.tobytes()])
    req = decode(MODEL, 1, msg, registry)
    np.testing.assert_array_equal(req.inputs["INPUT0"].data, data)
    np.testing.assert_array_equal(req.inputs["INPUT1"].data, other)


def test_shared_memory_input_errors(registry, shm_region):
    item = Input(name="INPUT0", datatype="FP32", shape=[4])
    item.parameters["shared_memory_region"].string_param = "nope"
    item.parameters["shared_memory_byte_size"].int64_param = 16
    msg = pb.ModelInferRequest(model_name=MODEL, inputs=[item])
    err = _error(registry, msg)
    assert "'nope'" in err.message and "'INPUT0'" in err.message

    item.parameters["shared_memory_region"].string_param = "r"
    item.parameters["shared_memory_byte_size"].int64_param = 128
    msg = pb.ModelInferRequest(model_name=MODEL, inputs=[item])
    assert "outside" in _error(registry, msg).message

    item.parameters["shared_memory_byte_size"].int64_param = 16
    item.contents.fp32_contents.extend([1, 2, 3, 4])
    msg = pb.ModelInferRequest(model_name=MODEL, inputs=[item])
    assert "shared memory region and 'contents'" in _error(registry, msg).message


def test_parameters_and_requested_outputs(registry):
    msg = _raw_request(np.zeros(4, np.float32), outputs=[Output(name="OUTPUT1")])
    msg.parameters["sequence_id"].int64_param = 42
    msg.parameters["sequence_start"].bool_param = True
    msg.parameters["tag"].string_param = "x"
    msg.parameters["big"].uint64_param = 2**64 - 1
    msg.parameters["ratio"].double_param = 0.5
    req = decode(MODEL, 1, msg, registry)
    assert req.parameters == {"sequence_id": 42, "sequence_start": True, "tag": "x",
                              "big": 2**64 - 1, "ratio": 0.5}
    assert [o.name for o in req.requested_outputs] == ["OUTPUT1"]
    assert req.requested_outputs[0].parameters == {}


def test_classification_into_shared_memory_is_refused(registry):
    out = Output(name="OUTPUT0")
    out.parameters["classification"].int64_param = 3
    out.parameters["shared_memory_region"].string_param = "r"
    out.parameters["shared_memory_byte_size"].int64_param = 16
    err = _error(registry, _raw_request(np.zeros(4, np.float32), outputs=[out]))
    assert err.status is Status.INVALID_ARG and "'OUTPUT0'" in err.message
    assert "classification" in err.message


def test_shared_memory_output_parameters_are_checked_before_inference(registry):
    out = Output(name="OUTPUT0")
    out.parameters["shared_memory_region"].string_param = "r"
    out.parameters["shared_memory_byte_size"].string_param = "16"
    err = _error(registry, _raw_request(np.zeros(4, np.float32), outputs=[out]))
    assert "'OUTPUT0'" in err.message and "shared_memory_byte_size" in err.message


def test_params_round_trip():
    msg = pb.ModelInferResponse()
    values = {"b": True, "i": -3, "u": 2**64 - 1, "f": 1.5, "s": "text"}
    set_params(msg.parameters, values)
    assert params_to_dict(msg.parameters) == values
    assert params_to_dict(pb.ModelInferResponse().parameters) == {}


# --- outputs -------------------------------------------------------------------------------


def test_encode_response(registry):
    req = decode(MODEL, 1, _raw_request(np.zeros(4, np.float32), id="abc"), registry)
    out0 = np.arange(6, dtype=np.int64).reshape(2, 3)
    strings = np.array([b"a", b"bc"], dtype=object)
    response = InferenceResponse(outputs=[
        Tensor("OUTPUT0", "INT64", (2, 3), out0),
        Tensor("OUTPUT1", "BYTES", (2,), strings),
        Tensor("OUTPUT2", "FP32", (2, 2), np.ones((2, 2), np.float32).T),  # not contiguous
    ], parameters={"note": "hi"})
    msg = encode_response(req, response, registry)
    assert (msg.model_name, msg.model_version, msg.id) == (MODEL, "1", "abc")
    assert [(o.name, o.datatype, list(o.shape)) for o in msg.outputs] == [
        ("OUTPUT0", "INT64", [2, 3]), ("OUTPUT1", "BYTES", [2]), ("OUTPUT2", "FP32", [2, 2])]
    assert msg.raw_output_contents[0] == out0.tobytes()
    assert msg.raw_output_contents[1] == b"\x01\x00\x00\x00a\x02\x00\x00\x00bc"
    assert msg.raw_output_contents[2] == np.ones((2, 2), np.float32).tobytes()
    assert msg.parameters["note"].string_param == "hi"


def test_encode_shared_memory_output(registry, shm_region):
    out = Output(name="OUTPUT0")
    out.parameters["shared_memory_region"].string_param = "r"
    out.parameters["shared_memory_byte_size"].int64_param = 16
    out.parameters["shared_memory_offset"].int64_param = 32
    req = decode(MODEL, 1, _raw_request(np.zeros(4, np.float32),
                                                outputs=[out, Output(name="OUTPUT1")]),
                         registry)
    value = np.array([1, 2, 3, 4], dtype=np.float32)
    response = InferenceResponse(outputs=[Tensor("OUTPUT0", "FP32", (4,), value),
                                          Tensor("OUTPUT1", "FP32", (4,), value * 2)])
    msg = encode_response(req, response, registry)
    assert [o.name for o in msg.outputs] == ["OUTPUT0", "OUTPUT1"]
    assert msg.raw_output_contents[0] == b""  # aligned, empty: the data is in the region
    assert msg.raw_output_contents[1] == (value * 2).tobytes()
    with open(shm_region, "rb") as f:
        f.seek(32)
        assert f.read(16) == value.tobytes()


def test_shared_memory_output_too_small(registry, shm_region):
    out = Output(name="OUTPUT0")
    out.parameters["shared_memory_region"].string_param = "r"
    out.parameters["shared_memory_byte_size"].int64_param = 8
    req = decode(MODEL, 1, _raw_request(np.zeros(4, np.float32), outputs=[out]),
                         registry)
    response = InferenceResponse(outputs=[Tensor("OUTPUT0", "FP32", (4,),
                                                 np.zeros(4, np.float32))])
    with pytest.raises(InferenceServerError) as info:
        encode_response(req, response, registry)
    assert "'OUTPUT0'" in info.value.message and "8" in info.value.message


# --- the hand-written wire encoding matches protobuf's -------------------------------------


def _reference(request, response) -> pb.ModelInferResponse:
    msg = pb.ModelInferResponse(model_name=request.model_name,
                                model_version=str(request.model_version), id=request.id)
    for tensor in response.outputs:
        msg.outputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
        data = tensor.data
        msg.raw_output_contents.append(
            b"".join(len(x).to_bytes(4, "little") + x for x in data.reshape(-1))
            if tensor.datatype == "BYTES" else np.ascontiguousarray(data).tobytes())
    set_params(msg.parameters, response.parameters)
    return msg


@pytest.mark.parametrize("shape", [(), (0,), (1,), (127,), (128, 2), (3, 300, 1), (70000,)])
@pytest.mark.parametrize("request_id", ["", "r", "ü" * 100])
def test_encoding_matches_protobuf(registry, shape, request_id):
    req = decode("mödel-" + "x" * 200, 123456,
                 _raw_request(np.zeros(4, np.float32), id=request_id), registry)
    data = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)
    response = InferenceResponse(outputs=[
        Tensor("OUT", "FP64", shape, data),
        Tensor("ÖUT2", "BYTES", (2,), np.array([b"", b"z" * 300], dtype=object)),
        Tensor("EMPTY", "INT8", (0, 5), np.zeros((0, 5), np.int8)),
    ], parameters={"a": 1, "b": "two", "c": True})
    got = encode_response(req, response, registry)
    assert got == _reference(req, response)


def test_encoding_of_no_outputs(registry):
    req = decode(MODEL, 2, _raw_request(np.zeros(4, np.float32)), registry)
    got = encode_response(req, InferenceResponse(), registry)
    assert got == pb.ModelInferResponse(model_name=MODEL, model_version="2")


def test_stream_encodings():
    inner = pb.ModelInferResponse(model_name="m", model_version="1", id="x")
    got = pb.ModelStreamInferResponse.FromString(stream_response(inner.SerializeToString()))
    assert got.error_message == "" and got.infer_response == inner
    err = pb.ModelStreamInferResponse.FromString(stream_error("bad ü" * 50, "req-9"))
    assert err.error_message == "bad ü" * 50
    assert err.HasField("infer_response") and err.infer_response.id == "req-9"
    err = pb.ModelStreamInferResponse.FromString(stream_error("bad", ""))
    assert err.HasField("infer_response") and err.infer_response.id == ""
