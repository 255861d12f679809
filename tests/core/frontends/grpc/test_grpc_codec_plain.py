"""The usual gRPC request read in one pass (``naiad.frontends.grpc.codec._plain_request``):
the same request as the general way makes, and every other one left to the general way,
which also says what is wrong with a request that breaks a rule."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from codec_parity import request_fields
from tritonclient.grpc import service_pb2 as pb

from naiad.errors import InferenceServerError
from naiad.frontends.grpc import codec
from naiad.shm import SharedMemoryRegistry

Input = pb.ModelInferRequest.InferInputTensor
Output = pb.ModelInferRequest.InferRequestedOutputTensor


def message(*inputs: tuple[str, str, list[int], bytes], outputs: list[str] | None = None,
            request_id: str = "") -> pb.ModelInferRequest:
    msg = pb.ModelInferRequest(model_name="m", id=request_id)
    for name, datatype, shape, raw in inputs:
        msg.inputs.append(Input(name=name, datatype=datatype, shape=shape))
        msg.raw_input_contents.append(raw)
    for name in outputs or ():
        msg.outputs.append(Output(name=name))
    return msg


def raw(array: np.ndarray) -> bytes:
    return array.tobytes()


FP32 = ("INPUT0", "FP32", [1, 4], raw(np.array([[0.5, 1, -2.25, 3e38]], np.float32)))


def usual() -> list[pb.ModelInferRequest]:
    return [
        message(FP32),
        message(FP32, outputs=["OUTPUT0"], request_id="req-é"),
        message(FP32, ("B", "BOOL", [2], raw(np.array([True, False]))),
                ("U", "UINT64", [1], raw(np.array([2**64 - 1], np.uint64))),
                ("H", "FP16", [], raw(np.array(65504, np.float16))),
                ("Z", "BF16", [1, 1], raw(np.array([[1.5]], ml_dtypes.bfloat16))),
                outputs=["A", "B"]),
        message(),
    ]


def others() -> list[pb.ModelInferRequest]:
    with_parameters = message(FP32)
    with_parameters.parameters["priority"].int64_param = 1
    input_parameters = message(FP32)
    input_parameters.inputs[0].parameters["binary_data_size"].int64_param = 16
    output_parameters = message(FP32, outputs=["O"])
    output_parameters.outputs[0].parameters["classification"].int64_param = 2
    contents = pb.ModelInferRequest(model_name="m")
    contents.inputs.append(Input(name="I", datatype="INT32", shape=[2]))
    contents.inputs[0].contents.int_contents.extend([1, 2])
    both = message(FP32)
    both.inputs[0].contents.fp32_contents.extend([1, 2, 3, 4])
    missing_raw = message(FP32)
    missing_raw.inputs.append(Input(name="X", datatype="FP32", shape=[1]))
    return [
        # less usual, and valid
        with_parameters, output_parameters, contents,
        message(("T", "BYTES", [1], b"\x01\x00\x00\x00a")),
        message(("E", "FP32", [0, 4], b"")),
        # broken: the general way says what is wrong
        input_parameters, both, missing_raw,
        message(FP32, FP32),
        message(("INPUT0", "FP32", [1, 3], FP32[3])),
        message(("INPUT0", "FP32", [1, -4], FP32[3])),
        message(("INPUT0", "FP32", [1] * 70, raw(np.zeros(1, np.float32)))),
        message(("INPUT0", "FP128", [1], b"\0" * 16)),
        message(("", "FP32", [1, 4], FP32[3])),
    ]


def decoded_both_ways(monkeypatch: pytest.MonkeyPatch, msg: pb.ModelInferRequest
                      ) -> tuple[object, object]:
    """What decode_request makes of ``msg``, and what its general way alone makes: the
    request's fields, or the error it raises."""
    def decoded() -> object:
        try:
            request, to_shm = codec.decode_request("m", 2, msg, SharedMemoryRegistry())
        except InferenceServerError as exc:
            return ("refused", exc.status, exc.message)
        return request_fields(request), to_shm

    first = decoded()
    with monkeypatch.context() as patched:
        patched.setattr(codec, "_plain_request", lambda *args: None)
        second = decoded()
    return first, second


@pytest.mark.parametrize("index", range(len(usual())))
def test_the_usual_request_is_read_as_the_general_way_reads_it(monkeypatch, index):
    msg = usual()[index]
    assert codec._plain_request("m", 2, msg) is not None
    plain, general = decoded_both_ways(monkeypatch, msg)
    assert plain == general and plain[0] != "refused"


@pytest.mark.parametrize("index", range(len(others())))
def test_every_other_request_is_left_to_the_general_way(monkeypatch, index):
    msg = others()[index]
    assert codec._plain_request("m", 2, msg) is None
    plain, general = decoded_both_ways(monkeypatch, msg)
    assert plain == general
