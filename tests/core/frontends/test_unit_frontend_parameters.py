"""Request, input and output parameters: one table of expected types
(naiad.frontends.parameters) read by both frontends, so a wrong type is refused the same on
HTTP (400, JSON words) and gRPC (INVALID_ARGUMENT, InferParameter fields); and the fields of
an HTTP body that must not be coerced (``id``, ``parameters``)."""

from __future__ import annotations

import json

import pytest
from tritonclient.grpc import service_pb2 as pb

from naiad.errors import InferenceServerError, Status
from naiad.frontends.grpc import codec as grpc_codec
from naiad.frontends.http import codec as http_codec
from naiad.frontends.parameters import REQUEST_PARAMETERS
from naiad.shm import SharedMemoryRegistry

FOUR = bytes(16)


def grpc_request(parameters: dict | None = None, *, input_parameters: dict | None = None,
                 output_parameters: dict | None = None) -> pb.ModelInferRequest:
    """One FP32 [4] input in raw contents; each parameter a dict of InferParameter fields."""
    item = pb.ModelInferRequest.InferInputTensor(name="INPUT0", datatype="FP32", shape=[4])
    # a shared memory input takes no raw contents
    raw = [] if input_parameters else [FOUR]
    msg = pb.ModelInferRequest(model_name="m", inputs=[item], raw_input_contents=raw)
    for key, fields in (input_parameters or {}).items():
        msg.inputs[0].parameters[key].CopyFrom(pb.InferParameter(**fields))
    if output_parameters is not None:
        out = msg.outputs.add(name="OUTPUT0")
        for key, fields in output_parameters.items():
            out.parameters[key].CopyFrom(pb.InferParameter(**fields))
    for key, fields in (parameters or {}).items():
        msg.parameters[key].CopyFrom(pb.InferParameter(**fields))
    return msg


def grpc_refusal(msg: pb.ModelInferRequest) -> str:
    with pytest.raises(InferenceServerError) as info:
        grpc_codec.decode_request("m", 1, msg, SharedMemoryRegistry())
    assert info.value.status is Status.INVALID_ARG
    return info.value.message


def http_decode(doc: dict):
    return http_codec.decode_request("m", 1, json.dumps(doc).encode(), None,
                                     SharedMemoryRegistry())


def http_refusal(doc: dict) -> str:
    with pytest.raises(InferenceServerError) as info:
        http_decode(doc)
    assert info.value.status is Status.INVALID_ARG
    return info.value.message


def http_doc(**extra) -> dict:
    return {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [4],
                        "data": [1, 2, 3, 4]}], **extra}


# --- gRPC: the table's rows in InferParameter fields (Triton's words) ----------------------


@pytest.mark.parametrize(("name", "fields", "expected"), [
    ("priority", {"string_param": "high"}, "expected int64_param or uint64_param"),
    ("priority", {"bool_param": True}, "expected int64_param or uint64_param"),
    ("timeout", {"double_param": 1.5}, "expected int64_param or uint64_param"),
    ("sequence_start", {"string_param": "yes"}, "expected bool_param"),
    ("sequence_end", {"int64_param": 1}, "expected bool_param"),
    ("sequence_id", {"bool_param": True},
     "expected int64_param, uint64_param or string_param"),
    ("binary_data_output", {"string_param": "no"}, "expected bool_param"),
    ("mine", {}, "got no value"),  # a custom parameter with no field set
])
def test_grpc_request_parameter_of_the_wrong_type(name, fields, expected):
    message = grpc_refusal(grpc_request({name: fields}))
    assert f"invalid value type for '{name}' parameter" in message, message
    assert expected in message and "model 'm'" in message, message


@pytest.mark.parametrize(("name", "fields"), [
    ("priority", {"int64_param": -1}), ("sequence_id", {"int64_param": -5}),
])
def test_grpc_request_parameter_of_the_right_field_but_a_wrong_value(name, fields):
    message = grpc_refusal(grpc_request({name: fields}))
    assert f"invalid value for '{name}' parameter of model 'm'" in message, message
    assert "unsigned integer" in message and "int64_param -" in message, message


def test_grpc_request_parameters_of_the_right_type_pass_as_plain_values():
    msg = grpc_request({
        "priority": {"uint64_param": 2}, "timeout": {"int64_param": 0},
        "sequence_id": {"string_param": "s"}, "sequence_start": {"bool_param": True},
        "sequence_end": {"bool_param": False}, "mine": {"double_param": 1.5},
        "yours": {"string_param": "x"}, "big": {"uint64_param": 2**64 - 1}})
    request, _ = grpc_codec.decode_request("m", 1, msg, SharedMemoryRegistry())
    assert request.parameters == {
        "priority": 2, "timeout": 0, "sequence_id": "s", "sequence_start": True,
        "sequence_end": False, "mine": 1.5, "yours": "x", "big": 2**64 - 1}


@pytest.mark.parametrize(("where", "fields", "expected"), [
    ("input", {"shared_memory_region": {"int64_param": 3}}, "expected string_param"),
    ("input", {"shared_memory_region": {"string_param": "r"},
               "shared_memory_byte_size": {"string_param": "16"}},
     "expected int64_param or uint64_param"),
    ("output", {"shared_memory_region": {"string_param": "r"},
                "shared_memory_byte_size": {"int64_param": 16},
                "shared_memory_offset": {"bool_param": True}},
     "expected int64_param or uint64_param"),
    ("output", {"classification": {"string_param": "3"}},
     "expected int64_param or uint64_param"),
])
def test_grpc_tensor_parameters_of_the_wrong_type(where, fields, expected):
    msg = (grpc_request(input_parameters=fields) if where == "input"
           else grpc_request(output_parameters=fields))
    message = grpc_refusal(msg)
    tensor = "INPUT0" if where == "input" else "OUTPUT0"
    assert f"{where} '{tensor}' of model 'm'" in message and expected in message, message


@pytest.mark.parametrize("name", sorted(REQUEST_PARAMETERS))
def test_every_row_of_the_table_is_enforced_on_both_frontends(name):
    """A JSON list and a gRPC double fit no row of the table: both are refused."""
    assert f"parameter '{name}' must be" in http_refusal(http_doc(parameters={name: [1]}))
    assert f"'{name}' parameter" in grpc_refusal(grpc_request({name: {"double_param": 1.5}}))


# --- HTTP: fields that are not coerced ------------------------------------------------------


@pytest.mark.parametrize("value", [5, 0, True, False, [], ["x"], {"a": 1}])
def test_http_request_id_must_be_a_string(value):
    message = http_refusal(http_doc(id=value))
    assert "'id' must be a string" in message and "model 'm'" in message, message


@pytest.mark.parametrize(("doc", "expected"), [({}, ""), ({"id": None}, ""),
                                               ({"id": "x1"}, "x1"), ({"id": ""}, "")])
def test_http_request_id_absent_null_or_a_string(doc, expected):
    assert http_decode(http_doc(**doc)).id == expected


@pytest.mark.parametrize("value", [[], 0, False, ""])
def test_http_falsy_parameters_are_not_taken_for_none(value):
    """``parameters`` that is not an object is refused, an empty list included (it used to
    pass as "no parameters"), on the request, an input and a requested output."""
    assert "'parameters' must be an object" in http_refusal(http_doc(parameters=value))
    item = {"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1],
            "parameters": value}
    message = http_refusal({"inputs": [item]})
    assert "'parameters' must be an object" in message and "INPUT0" in message, message
    message = http_refusal(http_doc(outputs=[{"name": "OUTPUT0", "parameters": value}]))
    assert "'parameters' must be an object" in message and "OUTPUT0" in message, message


def test_http_null_parameters_are_none():
    item = {"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1],
            "parameters": None}
    request = http_decode({"inputs": [item], "parameters": None,
                           "outputs": [{"name": "OUTPUT0", "parameters": None}]})
    assert request.parameters == {}
    assert request.requested_outputs[0].parameters == {}
