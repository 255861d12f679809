"""``triton_python_backend_utils`` on its own: the names and behaviour of Triton's module."""

from __future__ import annotations

import json
import logging

import ml_dtypes
import naiad_stub_model_calls
import numpy as np
import pytest
import triton_python_backend_utils as pb_utils

from naiad.datatypes import NUMPY_DTYPES, numpy_to_datatype

TRITON_NAMES = [
    "InferenceRequest", "InferenceResponse", "Logger", "MetricFamily", "ModelConfig",
    "PreferredMemory", "TRITONSERVER_MEMORY_CPU", "TRITONSERVER_MEMORY_GPU",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END", "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_REQUEST_RELEASE_ALL", "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL", "TRITON_STRING_TO_NUMPY", "Tensor", "TritonError",
    "TritonModelException", "deserialize_bytes_tensor", "get_input_config_by_name",
    "get_input_tensor_by_name", "get_model_dir", "get_output_config_by_name",
    "get_output_tensor_by_name", "is_model_ready", "load_model", "numpy_to_triton_type",
    "serialize_byte_tensor", "triton_string_to_numpy", "triton_to_numpy_type", "unload_model",
    "using_decoupled_model_transaction_policy",
]
# naiad's own public names beside Triton's (its stub modules re-exported here).
NAIAD_NAMES = ["NUMPY_DTYPES", "InferenceResponseSender", "ResponseIterator", "json", "np"]


def test_module_has_tritons_names():
    """Every public name tritonserver 2.51's pb_utils has (checked against the real one)."""
    missing = [name for name in TRITON_NAMES + NAIAD_NAMES if not hasattr(pb_utils, name)]
    assert missing == []
    assert pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START == 1
    assert pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END == 2
    assert pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL == 1


# --- tensors ----------------------------------------------------------------------------


def test_tensor_wraps_the_array_without_copying():
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = pb_utils.Tensor("T", array)
    assert t.name() == "T"
    assert t.as_numpy() is array
    assert t.shape() == [2, 3]
    assert t.triton_dtype() == 11
    assert t.is_cpu()


def test_non_contiguous_arrays_are_made_contiguous():
    array = np.arange(8, dtype=np.float32).reshape(2, 4).T
    t = pb_utils.Tensor("T", array)
    assert t.as_numpy().flags.c_contiguous
    np.testing.assert_array_equal(t.as_numpy(), array)
    assert t.shape() == [4, 2]


def test_tensor_from_a_list():
    assert pb_utils.Tensor("T", [1.0, 2.0]).triton_dtype() == 12


@pytest.mark.parametrize(("name", "data", "message"), [
    ("", np.zeros(2), "Tensor name cannot be an empty string."),
    ("T", np.array(["unicode"]), "NumPy dtype is not supported."),
    ("T", np.zeros(2, np.complex64), "NumPy dtype is not supported."),
])
def test_tensor_rejects_what_triton_rejects(name, data, message):
    with pytest.raises(pb_utils.TritonModelException, match=message):
        pb_utils.Tensor(name, data)


def test_bytes_tensors():
    t = pb_utils.Tensor("S", np.array([b"a", b"bc"], dtype=np.object_))
    assert t.triton_dtype() == 13
    assert pb_utils.Tensor("S", np.array([b"a"], dtype=np.bytes_)).triton_dtype() == 13
    with pytest.raises(pb_utils.TritonModelException, match="string tensors"):
        t.to_dlpack()


def test_dlpack_round_trip_shares_memory():
    array = np.arange(4, dtype=np.int32)
    t = pb_utils.Tensor("T", array)
    back = pb_utils.Tensor.from_dlpack("U", t.to_dlpack())
    assert back.name() == "U"
    assert back.triton_dtype() == 8
    assert np.shares_memory(back.as_numpy(), array)
    via_protocol = pb_utils.Tensor.from_dlpack("V", t)  # objects with __dlpack__ work too
    np.testing.assert_array_equal(via_protocol.as_numpy(), array)
    assert np.from_dlpack(t).tolist() == [0, 1, 2, 3]


def test_dlpack_of_a_read_only_input():
    """Inputs view the request's bytes and are read-only; DLPack 0.x cannot say so."""
    array = np.frombuffer(np.arange(4, dtype=np.float32).tobytes(), dtype=np.float32)
    assert not array.flags.writeable
    back = pb_utils.Tensor.from_dlpack("T", pb_utils.Tensor("T", array).to_dlpack())
    np.testing.assert_array_equal(back.as_numpy(), array)


def test_from_dlpack_needs_a_name():
    with pytest.raises(pb_utils.TritonModelException):
        pb_utils.Tensor.from_dlpack("", np.zeros(1))


# --- data types -------------------------------------------------------------------------


def test_type_conversions_match_tritons_numbers():
    numbers = {np.bool_: 1, np.uint8: 2, np.uint16: 3, np.uint32: 4, np.uint64: 5, np.int8: 6,
               np.int16: 7, np.int32: 8, np.int64: 9, np.float16: 10, np.float32: 11,
               np.float64: 12, np.object_: 13}
    for numpy_type, number in numbers.items():
        assert pb_utils.numpy_to_triton_type(numpy_type) == number
        assert pb_utils.numpy_to_triton_type(np.dtype(numpy_type)) == number
        assert pb_utils.triton_to_numpy_type(number) is numpy_type
    assert pb_utils.numpy_to_triton_type(np.bytes_) == 13
    assert pb_utils.numpy_to_triton_type(np.complex128) is None
    assert pb_utils.triton_to_numpy_type(99) is None
    assert pb_utils.numpy_to_triton_type(ml_dtypes.bfloat16) == 14


def test_triton_string_to_numpy():
    assert pb_utils.triton_string_to_numpy("TYPE_FP32") is np.float32
    assert pb_utils.triton_string_to_numpy("TYPE_STRING") is np.object_
    assert pb_utils.triton_string_to_numpy("TYPE_BOOL") is bool
    with pytest.raises(KeyError):
        pb_utils.triton_string_to_numpy("FP32")


def test_datatypes_agree_with_naiads_table():
    for name, dtype in NUMPY_DTYPES.items():
        array = np.zeros(1, dtype=dtype if dtype is not None else object)
        assert pb_utils.Tensor("T", array)._datatype == name == numpy_to_datatype(array.dtype)


def test_bytes_serialization_round_trip():
    array = np.array([[b"a", b""], [b"xyz", "é"]], dtype=np.object_)
    encoded = pb_utils.serialize_byte_tensor(array)
    assert encoded == (b"\x01\x00\x00\x00a" b"\x00\x00\x00\x00" b"\x03\x00\x00\x00xyz"
                       b"\x02\x00\x00\x00\xc3\xa9")
    assert list(pb_utils.deserialize_bytes_tensor(encoded)) == [b"a", b"", b"xyz", "é".encode()]
    assert pb_utils.serialize_byte_tensor(np.array([], dtype=np.object_)) == ()
    assert pb_utils.serialize_byte_tensor(np.zeros(2)) is None


# --- errors, requests, responses --------------------------------------------------------


def test_triton_error():
    error = pb_utils.TritonError("boom")
    assert error.message() == "boom"
    assert error.code() == pb_utils.TritonError.INTERNAL
    coded = pb_utils.TritonError("gone", pb_utils.TritonError.NOT_FOUND)
    assert coded.code() == pb_utils.TritonError.NOT_FOUND
    codes = ["UNKNOWN", "INTERNAL", "NOT_FOUND", "INVALID_ARG", "UNAVAILABLE", "UNSUPPORTED",
             "ALREADY_EXISTS", "CANCELLED"]
    assert [int(getattr(pb_utils.TritonError, c)) for c in codes] == list(range(8))
    with pytest.raises(TypeError):
        pb_utils.TritonError(None)


def test_triton_model_exception():
    exc = pb_utils.TritonModelException("bad")
    assert isinstance(exc, Exception)
    assert exc.message() == "bad" and str(exc) == "bad"


def test_inference_response():
    t = pb_utils.Tensor("OUT", np.zeros(2, np.float32))
    response = pb_utils.InferenceResponse(output_tensors=[t])
    assert response.output_tensors() == [t]
    assert not response.has_error() and response.error() is None
    assert pb_utils.get_output_tensor_by_name(response, "OUT") is t
    assert pb_utils.get_output_tensor_by_name(response, "NOPE") is None
    assert pb_utils.InferenceResponse().output_tensors() == []
    assert pb_utils.InferenceResponse((t,)).output_tensors() == [t]
    failed = pb_utils.InferenceResponse(error=pb_utils.TritonError("x"))
    assert failed.has_error() and failed.error().message() == "x"
    with_params = pb_utils.InferenceResponse([t], parameters={"a": 1, "b": True})
    assert json.loads(with_params.parameters()) == {"a": 1, "b": True}


@pytest.mark.parametrize("parameters", [{"a": 1.5}, {1: "x"}, {"a": None}])
def test_response_parameters_are_checked(parameters):
    with pytest.raises(pb_utils.TritonModelException, match="Expect parameters"):
        pb_utils.InferenceResponse([], parameters=parameters)


def test_response_error_must_be_a_triton_error():
    with pytest.raises(TypeError):
        pb_utils.InferenceResponse([], error="boom")


def test_bls_request_is_refused_outside_execute(monkeypatch):
    t = pb_utils.Tensor("IN", np.zeros(1, np.float32))
    request = pb_utils.InferenceRequest(model_name="other", inputs=[t],
                                        requested_output_names=["OUT"], request_id="r",
                                        correlation_id=5, flags=1, parameters={"k": "v"})
    assert request.inputs() == [t]
    assert request.requested_output_names() == {"OUT"}
    assert request.request_id() == "r"
    assert request.correlation_id() == 5
    assert request.flags() == 1
    assert json.loads(request.parameters()) == {"k": "v"}
    assert pb_utils.get_input_tensor_by_name(request, "IN") is t
    # Before a model is initialized (in initialize, in auto_complete_config), as Triton.
    monkeypatch.setattr(naiad_stub_model_calls, "_calls_allowed", False)
    with pytest.raises(pb_utils.TritonModelException,
                       match="BLS is only supported during the 'execute' function"):
        request.exec()
    with pytest.raises(pb_utils.TritonModelException, match="only supported during"):
        request.async_exec()


def test_response_sender_rules_of_a_non_decoupled_model():
    """Triton's (response_sender.cc): one response, with the final flag or before it; its
    errors for a final flag first, a second response, and anything after the final flag."""
    sender = pb_utils.InferenceRequest(model_name="m").get_response_sender()
    with pytest.raises(pb_utils.TritonModelException, match="cannot send complete final"):
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    with pytest.raises(pb_utils.TritonModelException, match="Unsupported flag"):
        sender.send(pb_utils.InferenceResponse(), flags=4)
    with pytest.raises(pb_utils.TritonModelException, match="must be provided"):
        sender.send()
    sender.send(pb_utils.InferenceResponse())  # the response, the final flag apart
    with pytest.raises(pb_utils.TritonModelException, match="cannot send more than one"):
        sender.send(pb_utils.InferenceResponse())
    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    with pytest.raises(pb_utils.TritonModelException, match="closed"):
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)


def test_metric_families_need_a_model_running_in_a_server():
    # (test_backend_python_metrics.py covers them inside one)
    with pytest.raises(pb_utils.TritonModelException, match="server"):
        pb_utils.MetricFamily("m", "d", pb_utils.MetricFamily.COUNTER)


# --- config helpers ---------------------------------------------------------------------

CONFIG = {
    "name": "m",
    "input": [{"name": "A", "data_type": "TYPE_FP32", "dims": [4]}],
    "output": [{"name": "B", "data_type": "TYPE_INT32", "dims": [-1]}],
}


def test_config_lookups():
    assert pb_utils.get_input_config_by_name(CONFIG, "A")["dims"] == [4]
    assert pb_utils.get_input_config_by_name(CONFIG, "B") is None
    assert pb_utils.get_output_config_by_name(CONFIG, "B")["data_type"] == "TYPE_INT32"
    assert pb_utils.get_output_config_by_name({}, "B") is None
    assert not pb_utils.using_decoupled_model_transaction_policy(CONFIG)
    assert pb_utils.using_decoupled_model_transaction_policy(
        {"model_transaction_policy": {"decoupled": True}})


def test_model_config_helper():
    config = pb_utils.ModelConfig(json.dumps({"name": "m", "max_batch_size": 0, "input": [],
                                              "output": []}))
    config.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [4], "optional": True})
    config.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [4]})  # same: no change
    config.add_output({"name": "B", "data_type": "TYPE_FP32", "dims": [4]})
    config.set_max_batch_size(4)
    config.set_dynamic_batching()
    config.set_model_transaction_policy({"decoupled": False})
    assert config.as_dict() == {
        "name": "m", "max_batch_size": 4,
        "input": [{"name": "A", "data_type": "TYPE_FP32", "dims": [4], "optional": True}],
        "output": [{"name": "B", "data_type": "TYPE_FP32", "dims": [4]}],
        "dynamic_batching": {}, "model_transaction_policy": {"decoupled": False}}
    with pytest.raises(ValueError, match="trying to change decoupled property"):
        config.set_model_transaction_policy({"decoupled": True})
    with pytest.raises(ValueError, match="the model expects optional False"):
        config.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [4], "optional": False})


def test_dynamic_batching_conflicts_with_other_schedulers():
    config = pb_utils.ModelConfig(json.dumps({"name": "m", "sequence_batching": {}}))
    with pytest.raises(ValueError, match="scheduling_choice as 'sequence_batching'"):
        config.set_dynamic_batching()


def test_config_type_invalid_and_empty_dims_are_filled():
    config = pb_utils.ModelConfig(json.dumps({"name": "m", "input": [
        {"name": "A", "data_type": "TYPE_INVALID", "dims": []}]}))
    config.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [2]})
    assert config.as_dict()["input"] == [{"name": "A", "data_type": "TYPE_FP32", "dims": [2]}]


# --- logging ----------------------------------------------------------------------------


def test_logger_writes_to_naiad_model(caplog):
    with caplog.at_level(logging.DEBUG, logger="naiad.model"):
        pb_utils.Logger.log_info("i")
        pb_utils.Logger.log_warn("w")
        pb_utils.Logger.log_error("e")
        pb_utils.Logger.log_verbose("v")
        pb_utils.Logger.log("default")
        pb_utils.Logger.log("err", pb_utils.Logger.LogLevel.ERROR)
        pb_utils.Logger.log("verbose", pb_utils.Logger.VERBOSE)
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", "i"), ("WARNING", "w"), ("ERROR", "e"), ("DEBUG", "v"), ("INFO", "default"),
        ("ERROR", "err"), ("DEBUG", "verbose")]
    assert {r.name for r in caplog.records} == {"naiad.model"}
    assert {r.filename for r in caplog.records} == {"test_backend_python_pb_utils.py"}


def test_a_bls_model_name_may_be_bytes():
    # Triton's bls example reads the name from a BYTES tensor: as_numpy()[0] is bytes.
    request = pb_utils.InferenceRequest(model_name=np.array([b"add_sub"], dtype=object)[0],
                                        request_id=b"r")
    assert pb_utils._describe_call(request)["model_name"] == "add_sub"
    assert request.request_id() == "r"
