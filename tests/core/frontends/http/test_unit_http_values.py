"""JSON tensor values and parameters (issue 17, item 7): every number is range-checked for
its datatype, and every parameter with a wrong JSON type is refused naming it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from naiad.errors import InferenceServerError, Status
from naiad.frontends.http.codec import decode_request
from naiad.frontends.tensors import from_list


def refused(datatype: str, values: list) -> str:
    with pytest.raises(InferenceServerError) as info:
        from_list("m", "INPUT0", datatype, (len(values),), values)
    assert info.value.status is Status.INVALID_ARG
    return info.value.message


@pytest.mark.parametrize(("datatype", "values", "bad"), [
    ("FP32", [1.0, 1e39], "1e+39"),
    ("FP32", [-1e39], "-1e+39"),
    ("FP16", [70000.0], "70000.0"),
    ("FP16", [65520.0], "65520.0"),  # the first value that rounds to infinity
    ("BF16", [3.4e38], "3.4e+38"),
])
def test_float_overflow_is_refused_naming_the_value(datatype, values, bad):
    message = refused(datatype, values)
    for fragment in ("INPUT0", "'m'", datatype, bad, "out of range"):
        assert fragment in message, message


@pytest.mark.parametrize(("datatype", "values", "expected"), [
    ("FP16", [65504.0, 65519.0, -65504.0], [65504.0, 65504.0, -65504.0]),  # rounding
    ("FP32", [3.4028234663852886e38, 1e-50], [3.4028234663852886e38, 0.0]),
    ("FP64", [1e308, -1e308], [1e308, -1e308]),
    ("FP32", [float("inf")], [float("inf")]),  # gRPC typed contents may hold infinity
])
def test_values_in_range_are_kept(datatype, values, expected):
    tensor = from_list("m", "INPUT0", datatype, (len(values),), values)
    np.testing.assert_array_equal(tensor.data.astype(np.float64), expected)


@pytest.mark.parametrize(("datatype", "values", "fragment"), [
    ("INT8", [300], "-128 to 127"),
    ("INT8", [-129], "-128 to 127"),
    ("UINT8", [-1], "0 to 255"),
    ("UINT16", [65536], "0 to 65535"),
    ("UINT64", [-1], "0 to 18446744073709551615"),
    ("INT64", [2**63], "9223372036854775807"),
    ("INT32", [1.5], "integers"),
    ("INT32", [True], "integers"),
    ("FP32", [False], "numbers"),
    ("FP32", ["1"], "numbers"),
    ("FP32", [None], "numbers"),
    ("BOOL", [1], "true or false"),
])
def test_integers_and_kinds_are_checked(datatype, values, fragment):
    message = refused(datatype, values)
    assert datatype in message and fragment in message, message


def decode(doc: dict, binary: bytes = b"", registry=None):
    body = json.dumps(doc).encode()
    length = len(body) if binary else None
    return decode_request("m", 1, body + binary, length, registry)


def one_input(**parameters) -> dict:
    entry = {"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1.0]}
    return {"inputs": [entry], **parameters}


def refused_request(doc: dict, binary: bytes = b"", registry=None) -> str:
    with pytest.raises(InferenceServerError) as info:
        decode(doc, binary, registry)
    assert info.value.status is Status.INVALID_ARG
    return info.value.message


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("binary_data_output", "no", "true or false"),
    ("binary_data_output", 1, "true or false"),
    ("priority", "x", "unsigned integer"),
    ("priority", -1, "unsigned integer"),
    ("timeout", True, "unsigned integer"),
    ("sequence_id", 1.5, "unsigned integer or a string"),
    ("sequence_id", False, "unsigned integer or a string"),
    ("sequence_start", "yes", "true or false"),
    ("sequence_end", 0, "true or false"),
    ("mine", [1, 2], "integer, number, boolean or string"),
    ("mine", {"a": 1}, "integer, number, boolean or string"),
    ("mine", None, "integer, number, boolean or string"),
])
def test_request_parameters_of_the_wrong_type(name, value, expected):
    message = refused_request(one_input(parameters={name: value}))
    assert f"'{name}'" in message and expected in message and "'m'" in message, message


def test_request_parameters_of_the_right_type_pass():
    request = decode(one_input(parameters={
        "binary_data_output": False, "priority": 2, "timeout": 0, "sequence_id": "s",
        "sequence_start": True, "sequence_end": False, "mine": 1.5, "yours": "x"}))
    assert request.parameters["mine"] == 1.5


@pytest.mark.parametrize(("parameters", "expected"), [
    ({"binary_data": "yes"}, "'binary_data' must be true or false"),
    ({"binary_data": 1}, "'binary_data' must be true or false"),
    ({"classification": "3"}, "'classification' must be an unsigned integer"),
])
def test_output_parameters_of_the_wrong_type(parameters, expected):
    doc = one_input(outputs=[{"name": "OUTPUT0", "parameters": parameters}])
    message = refused_request(doc)
    assert expected in message and "OUTPUT0" in message and "'m'" in message, message


@pytest.mark.parametrize("size", [True, 1.0, "1", -1])
def test_binary_data_size_must_be_an_unsigned_integer(size):
    doc = {"inputs": [{"name": "INPUT0", "datatype": "UINT8", "shape": [1],
                       "parameters": {"binary_data_size": size}}]}
    message = refused_request(doc, b"\x05")
    assert "'binary_data_size'" in message and "unsigned integer" in message, message
    assert "INPUT0" in message and "'m'" in message, message
