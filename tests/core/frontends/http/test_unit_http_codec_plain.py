"""The usual request and answer over HTTP read and written in one pass
(``naiad.frontends.http.codec._plain_request`` and ``_plain_body``): the same request and
the same body as the general way makes, and every other one left to the general way, which
also says what is wrong with a request that breaks a rule and refuses an answer too large."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import orjson
import pytest
from codec_parity import request_fields

from naiad.errors import InferenceServerError
from naiad.frontends.http import codec
from naiad.shm import SharedMemoryRegistry
from naiad.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor


def tensor(name: str, datatype: str, data: np.ndarray) -> Tensor:
    return Tensor(name, datatype, tuple(data.shape), data)


OUTPUTS = [
    tensor("F32", "FP32", np.array([[1.5, -0.0, np.nan, np.inf]], np.float32)),
    tensor("F64", "FP64", np.array([1e-308, 2.5], np.float64)),
    tensor("F16", "FP16", np.array([0.1, 65504], np.float16)),
    tensor("B16", "BF16", np.array([1.25, -3], ml_dtypes.bfloat16)),
    tensor("I8", "INT8", np.array([-128, 127], np.int8)),
    tensor("U64", "UINT64", np.array([2**64 - 1], np.uint64)),
    tensor("I64", "INT64", np.arange(6, dtype=np.int64).reshape(2, 3)),
    tensor("BOOL", "BOOL", np.array([True, False])),
    tensor("SCALAR", "INT32", np.array(7, np.int32)),
    tensor("EMPTY", "FP32", np.zeros((0, 4), np.float32)),
]


def request(request_id: str = "", outputs: list[RequestedOutput] | None = None,
            parameters: dict | None = None) -> InferenceRequest:
    return InferenceRequest(model_name="m", model_version=3, inputs={}, id=request_id,
                            requested_outputs=outputs, parameters=dict(parameters or {}))


def both_ways(monkeypatch: pytest.MonkeyPatch, req: InferenceRequest,
              response: InferenceResponse, max_size: int | None) -> tuple[object, object]:
    """What encode_response answers, and what its general way alone answers (a body, or
    the error it raises)."""
    def answer() -> object:
        try:
            return codec.encode_response(req, response, 3, SharedMemoryRegistry(), max_size)
        except InferenceServerError as exc:
            return ("refused", exc.status, exc.message)

    first = answer()
    with monkeypatch.context() as patched:
        patched.setattr(codec, "_plain_body", lambda *args: None)
        second = answer()
    return first, second


@pytest.mark.parametrize("request_id", ["", "req-é"])
@pytest.mark.parametrize("named", ["all", "by name", "as JSON"])
def test_the_usual_answer_is_the_general_ways_body(monkeypatch, request_id, named):
    outputs = None if named == "all" else [
        RequestedOutput(t.name, {"binary_data": False} if named == "as JSON" else {})
        for t in OUTPUTS]
    req = request(request_id, outputs)
    assert codec._plain_body(req, InferenceResponse(outputs=OUTPUTS), 3, None) is not None
    for max_size in (None, 1 << 20):
        plain, general = both_ways(monkeypatch, req, InferenceResponse(outputs=OUTPUTS),
                                   max_size)
        assert plain == general and plain[1] is None


@pytest.mark.parametrize("case", ["request parameters", "output parameters",
                                  "response parameters", "bytes", "binary output"])
def test_every_other_answer_takes_the_general_way(monkeypatch, case):
    req, response = request(), InferenceResponse(outputs=OUTPUTS[:2])
    if case == "request parameters":
        req = request(parameters={"binary_data_output": True})
    elif case == "output parameters":
        req = request(outputs=[RequestedOutput("F32", {"binary_data": False, "x": 1}),
                               RequestedOutput("F64")])
    elif case == "response parameters":
        response = InferenceResponse(outputs=OUTPUTS[:2], parameters={"p": 1})
    elif case == "bytes":
        response = InferenceResponse(outputs=[
            tensor("TEXT", "BYTES", np.array([b"a", "é".encode()], dtype=object))])
    else:
        req = request(outputs=[RequestedOutput("F32", {"binary_data": True})])
        response = InferenceResponse(outputs=OUTPUTS[:1])
    assert codec._plain_body(req, response, 3, None) is None
    plain, general = both_ways(monkeypatch, req, response, None)
    assert plain == general


def test_an_answer_near_the_size_limit_is_written_or_refused_as_the_general_way_does(
        monkeypatch):
    response = InferenceResponse(outputs=[OUTPUTS[0], OUTPUTS[6]])
    body, _ = codec.encode_response(request(), response, 3, SharedMemoryRegistry())
    for max_size in (len(body) + 1, len(body), len(body) - 1, 40, 2):
        plain, general = both_ways(monkeypatch, request(), response, max_size)
        assert plain == general, max_size
        if max_size < len(body):
            assert plain[0] == "refused"
    # the bound alone decides before anything is written: a large output is never listed
    huge = InferenceResponse(outputs=[tensor("BIG", "FP64", np.zeros(1000))])
    assert codec._plain_body(request(), huge, 3, 1000) is None


def fp32(name: str = "INPUT0", shape: list | None = None, data: list | None = None,
         **more: object) -> dict:
    return {"name": name, "datatype": "FP32", "shape": [1, 4] if shape is None else shape,
            "data": [0.5, 1, -2.25, 3e38] if data is None else data, **more}


USUAL = [
    {"inputs": [fp32()]},
    {"inputs": [fp32()], "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": False}}],
     "id": "req-é"},
    {"inputs": [fp32(), {"name": "B", "datatype": "BOOL", "shape": [2], "data": [True, False]},
                {"name": "U", "datatype": "UINT64", "shape": [1], "data": [2**64 - 1]},
                {"name": "H", "datatype": "FP16", "shape": [], "data": [65504]},
                {"name": "Z", "datatype": "BF16", "shape": [1, 1], "data": [1.5]}],
     "outputs": [{"name": "A"}, {"name": "B", "parameters": {"binary_data": True}}], "id": None},
    {"inputs": []},
]
LEFT_TO_THE_GENERAL_WAY = [
    # less usual, and valid
    {"inputs": [fp32()], "parameters": {"priority": 1}},
    {"inputs": [fp32(parameters={})]},
    {"inputs": [fp32(shape=[2, 2], data=[[1, 2], [3, 4]])]},
    {"inputs": [fp32(shape=[0, 4], data=[])]},
    {"inputs": [{"name": "T", "datatype": "BYTES", "shape": [1], "data": ["a"]}]},
    {"inputs": [fp32()], "outputs": [{"name": "O", "parameters": {"classification": 2}}]},
    {"inputs": [fp32()], "outputs": [{"name": "O", "parameters": {}}]},
    # broken: the general way says what is wrong
    {"inputs": [fp32(), fp32()]},
    {"inputs": [fp32(shape=[1, 3])]},
    {"inputs": [fp32(shape=[1, -4])]},
    {"inputs": [fp32(shape=[True, 4])]},
    {"inputs": [fp32(shape=[1] * 70, data=[1])]},
    {"inputs": [fp32(data=[1, 2, "3", 4])]},
    {"inputs": [fp32(data=[1, 2, 3, 1e39])]},
    {"inputs": [{"name": "I", "datatype": "INT8", "shape": [1], "data": [300]}]},
    {"inputs": [{"name": "I", "datatype": "INT8", "shape": [1], "data": [1.5]}]},
    {"inputs": [fp32(name="")]},
    {"inputs": [fp32(name=3)]},
    {"inputs": [{"name": "X", "datatype": "FP128", "shape": [1], "data": [1]}]},
    {"inputs": [fp32()], "outputs": [{"name": "O", "parameters": {"binary_data": 1}}]},
    {"inputs": [fp32()], "outputs": [{"name": "O", "parameters": {"binary_data": "yes"}}]},
    {"inputs": [fp32()], "outputs": [{"parameters": {}}]},
    {"inputs": [fp32()], "outputs": {"name": "O"}},
    {"inputs": [fp32()], "id": 7},
    {"inputs": fp32()},
    {"inputs": ["x"]},
    {},
]


def decoded_both_ways(monkeypatch: pytest.MonkeyPatch, doc: dict) -> tuple[object, object]:
    """What decode_request makes of ``doc``, and what its general way alone makes: the
    request's fields, or the error it raises."""
    def decoded() -> object:
        try:
            request = codec.decode_request("m", 2, orjson.dumps(doc), None,
                                           SharedMemoryRegistry())
        except InferenceServerError as exc:
            return ("refused", exc.status, exc.message)
        return request_fields(request)

    first = decoded()
    with monkeypatch.context() as patched:
        patched.setattr(codec, "_plain_request", lambda *args: None)
        second = decoded()
    return first, second


@pytest.mark.parametrize("doc", USUAL)
def test_the_usual_request_is_read_as_the_general_way_reads_it(monkeypatch, doc):
    assert codec._plain_request("m", 2, doc) is not None
    plain, general = decoded_both_ways(monkeypatch, doc)
    assert plain == general and plain[0] != "refused"


@pytest.mark.parametrize("doc", LEFT_TO_THE_GENERAL_WAY)
def test_every_other_request_is_left_to_the_general_way(monkeypatch, doc):
    assert codec._plain_request("m", 2, doc) is None
    plain, general = decoded_both_ways(monkeypatch, doc)
    assert plain == general
