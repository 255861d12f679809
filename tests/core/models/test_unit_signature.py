"""Unit tests of naiad.models.signature: the per-request checks of inputs and outputs."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc.model_config_pb2 as mc
from google.protobuf import text_format

from naiad.datatypes import NUMPY_DTYPES, format_shape
from naiad.errors import InferenceServerError, Status
from naiad.models.signature import ModelSignature
from naiad.types import InferenceRequest, RequestedOutput, Tensor


def signature(text: str, name: str = "net") -> ModelSignature:
    return ModelSignature(name, text_format.Parse(text, mc.ModelConfig()))


def tensor(name: str, datatype: str, shape: tuple[int, ...]) -> Tensor:
    dtype = NUMPY_DTYPES[datatype] or np.dtype(object)
    return Tensor(name, datatype, shape, np.zeros(shape, dtype=dtype))


def request(*tensors: Tensor, outputs: list[str] | None = None) -> InferenceRequest:
    requested = None if outputs is None else [RequestedOutput(n) for n in outputs]
    return InferenceRequest("net", 1, {t.name: t for t in tensors}, requested_outputs=requested)


def rejected(sig: ModelSignature, req: InferenceRequest, *fragments: str) -> str:
    with pytest.raises(InferenceServerError) as info:
        sig.check(req)
    assert info.value.status is Status.INVALID_ARG
    for fragment in fragments:
        assert fragment in info.value.message, (fragment, info.value.message)
    return info.value.message


ADD = """
max_batch_size: 0
input [ { name: "A", data_type: TYPE_FP32, dims: [ 4 ] },
        { name: "B", data_type: TYPE_FP32, dims: [ -1, 2 ] } ]
output [ { name: "SUM", data_type: TYPE_FP32, dims: [ 4 ] },
         { name: "DIFF", data_type: TYPE_FP32, dims: [ 4 ] } ]
"""

BATCHED = """
max_batch_size: 8
input [ { name: "X", data_type: TYPE_INT32, dims: [ 3 ] },
        { name: "Y", data_type: TYPE_STRING, dims: [ -1 ] } ]
output [ { name: "Z", data_type: TYPE_INT32, dims: [ 3 ] } ]
"""


def test_format_shape_has_no_spaces():
    assert format_shape((2, -1, 3)) == "[2,-1,3]"
    assert format_shape([]) == "[]"


def test_signature_precomputes_specs_from_config():
    sig = signature(BATCHED)
    assert sig.max_batch_size == 8
    assert sig.inputs["X"].datatype == "INT32"
    assert sig.inputs["Y"].datatype == "BYTES"
    assert sig.inputs["X"].dims == (3,)
    assert sig.required == ("X", "Y")
    assert list(sig.outputs) == ["Z"]


def test_matching_request_passes_unchanged():
    sig = signature(ADD)
    a, b = tensor("A", "FP32", (4,)), tensor("B", "FP32", (5, 2))
    sig.check(request(a, b))
    assert a.shape == (4,) and b.shape == (5, 2)


def test_variable_dimension_accepts_any_size_including_zero():
    sig = signature(ADD)
    sig.check(request(tensor("A", "FP32", (4,)), tensor("B", "FP32", (0, 2))))


def test_wrong_datatype_names_model_tensor_and_expected_type():
    sig = signature(ADD)
    rejected(sig, request(tensor("A", "FP64", (4,)), tensor("B", "FP32", (1, 2))),
             "'A'", "'net'", "FP64", "expects FP32")


def test_bytes_input_is_declared_type_string():
    sig = signature(BATCHED)
    rejected(sig, request(tensor("X", "INT32", (1, 3)), tensor("Y", "UINT8", (1, 2))),
             "'Y'", "UINT8", "expects BYTES")


@pytest.mark.parametrize("shape", [(5,), (4, 1), (), (1, 4)])
def test_wrong_shape_without_batching_says_there_is_no_batch_dimension(shape):
    sig = signature(ADD)
    message = rejected(sig, request(tensor("A", "FP32", shape), tensor("B", "FP32", (1, 2))),
                       "'A'", "'net'", "expected [4]", f"got {format_shape(shape)}")
    assert "max_batch_size is 0" in message


def test_wrong_fixed_dimension_next_to_variable_one_is_rejected():
    sig = signature(ADD)
    rejected(sig, request(tensor("A", "FP32", (4,)), tensor("B", "FP32", (3, 3))),
             "'B'", "expected [-1,2]", "got [3,3]")


def test_batched_model_accepts_batches_from_one_to_max_batch_size():
    sig = signature(BATCHED)
    for batch in (1, 8):
        sig.check(request(tensor("X", "INT32", (batch, 3)), tensor("Y", "BYTES", (batch, 2))))


@pytest.mark.parametrize("batch", [0, 9])
def test_batch_size_outside_one_to_max_is_rejected(batch):
    sig = signature(BATCHED)
    rejected(sig, request(tensor("X", "INT32", (batch, 3)), tensor("Y", "BYTES", (batch, 1))),
             "'X'", "'net'", f"batch size {batch}", "1 to 8")


def test_inputs_with_different_batch_sizes_are_rejected():
    sig = signature(BATCHED)
    rejected(sig, request(tensor("X", "INT32", (2, 3)), tensor("Y", "BYTES", (3, 1))),
             "'Y'", "batch size 3", "batch size 2")


def test_batched_model_needs_the_batch_dimension():
    sig = signature(BATCHED)
    message = rejected(sig, request(tensor("X", "INT32", (3,)), tensor("Y", "BYTES", (1, 1))),
                       "'X'", "expected [-1,3]", "got [3]")
    assert "implicit batch dimension" in message


def test_batched_model_rejects_a_scalar_input():
    sig = signature(BATCHED)
    rejected(sig, request(tensor("X", "INT32", ()), tensor("Y", "BYTES", (1, 1))),
             "'X'", "expected [-1,3]", "got []")


def test_reshape_without_batching_updates_shape_and_data():
    sig = signature("""
        input [ { name: "IMG", data_type: TYPE_UINT8, dims: [ 12 ],
                  reshape: { shape: [ 3, 4 ] } } ]
        output [ { name: "O", data_type: TYPE_FP32, dims: [ 1 ] } ]
    """)
    img = Tensor("IMG", "UINT8", (12,), np.arange(12, dtype=np.uint8))
    sig.check(request(img))
    assert img.shape == (3, 4)
    assert img.data.shape == (3, 4)
    np.testing.assert_array_equal(img.data, np.arange(12, dtype=np.uint8).reshape(3, 4))


def test_reshape_with_batching_keeps_the_batch_dimension():
    sig = signature("""
        max_batch_size: 4
        input [ { name: "S", data_type: TYPE_FP32, dims: [ 1 ], reshape: { shape: [ ] } } ]
        output [ { name: "O", data_type: TYPE_FP32, dims: [ 1 ] } ]
    """)
    s = Tensor("S", "FP32", (3, 1), np.array([[1], [2], [3]], dtype=np.float32))
    sig.check(request(s))
    assert s.shape == (3,)
    np.testing.assert_array_equal(s.data, [1, 2, 3])


def test_reshape_with_variable_dimension_takes_the_size_from_the_request():
    sig = signature("""
        input [ { name: "T", data_type: TYPE_INT64, dims: [ -1, 4 ],
                  reshape: { shape: [ -1, 2, 2 ] } } ]
        output [ { name: "O", data_type: TYPE_FP32, dims: [ 1 ] } ]
    """)
    t = Tensor("T", "INT64", (3, 4), np.arange(12, dtype=np.int64).reshape(3, 4))
    sig.check(request(t))
    assert t.shape == (3, 2, 2)
    assert t.data.shape == t.shape


def test_reshape_with_two_variable_dimensions_substitutes_both_in_order():
    sig = signature("""
        input [ { name: "T", data_type: TYPE_FP32, dims: [ -1, -1 ],
                  reshape: { shape: [ -1, 1, -1 ] } } ]
        output [ { name: "O", data_type: TYPE_FP32, dims: [ 1 ] } ]
    """)
    t = Tensor("T", "FP32", (2, 5), np.zeros((2, 5), dtype=np.float32))
    sig.check(request(t))
    assert t.shape == (2, 1, 5)
    assert t.data.shape == (2, 1, 5)


def test_reshape_with_variable_dimension_and_batching():
    sig = signature("""
        max_batch_size: 4
        input [ { name: "T", data_type: TYPE_FP32, dims: [ -1, 4 ],
                  reshape: { shape: [ -1, 2, 2 ] } } ]
        output [ { name: "O", data_type: TYPE_FP32, dims: [ 1 ] } ]
    """)
    t = Tensor("T", "FP32", (2, 3, 4), np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    sig.check(request(t))
    assert t.shape == (2, 3, 2, 2)
    np.testing.assert_array_equal(t.data.reshape(-1), np.arange(24))


def test_reshape_that_cannot_apply_is_an_invalid_arg_not_a_crash():
    # not a config the validator lets through; the check must still fail cleanly
    sig = signature("""
        input [ { name: "T", data_type: TYPE_FP32, dims: [ -1 ],
                  reshape: { shape: [ -1, -1 ] } } ]
        output [ { name: "O", data_type: TYPE_FP32, dims: [ 1 ] } ]
    """)
    rejected(sig, request(tensor("T", "FP32", (6,))), "'T'", "'net'", "reshape", "[-1,-1]")


OPTIONAL = """
input [ { name: "IDS", data_type: TYPE_INT64, dims: [ -1 ] },
        { name: "MASK", data_type: TYPE_INT64, dims: [ -1 ], optional: true } ]
output [ { name: "O", data_type: TYPE_FP32, dims: [ -1 ] } ]
"""


def test_optional_input_may_be_left_out():
    sig = signature(OPTIONAL)
    assert sig.required == ("IDS",)
    sig.check(request(tensor("IDS", "INT64", (5,))))
    sig.check(request(tensor("IDS", "INT64", (5,)), tensor("MASK", "INT64", (5,))))


def test_missing_required_input_names_it():
    sig = signature(OPTIONAL)
    rejected(sig, request(tensor("MASK", "INT64", (5,))),
             "'net'", "'IDS'", "does not provide it", "'MASK'")


def test_request_without_inputs_lists_all_required_ones():
    sig = signature(ADD)
    rejected(sig, request(), "'A', 'B'", "does not provide them", "no inputs")


def test_unknown_input_names_it_and_the_model_inputs():
    sig = signature(ADD)
    rejected(sig, request(tensor("A", "FP32", (4,)), tensor("C", "FP32", (4,))),
             "unexpected inference input 'C'", "'net'", "'A', 'B'")


def test_requested_outputs_must_exist():
    sig = signature(ADD)
    ok = request(tensor("A", "FP32", (4,)), tensor("B", "FP32", (1, 2)), outputs=["DIFF"])
    sig.check(ok)
    bad = request(tensor("A", "FP32", (4,)), tensor("B", "FP32", (1, 2)),
                  outputs=["SUM", "PRODUCT"])
    rejected(sig, bad, "unexpected inference output 'PRODUCT'", "'net'", "'SUM', 'DIFF'")


def test_empty_requested_outputs_list_is_accepted():
    sig = signature(ADD)
    sig.check(request(tensor("A", "FP32", (4,)), tensor("B", "FP32", (1, 2)), outputs=[]))


def test_a_kind_of_request_that_passed_is_not_checked_again_and_others_still_are(monkeypatch):
    sig = signature(ADD)
    good = request(tensor("A", "FP32", (4,)), tensor("B", "FP32", (3, 2)), outputs=["SUM"])
    sig.check(good)
    checked = []
    monkeypatch.setattr(sig, "_check", lambda req: checked.append(req))
    sig.check(request(tensor("A", "FP32", (4,)), tensor("B", "FP32", (3, 2)),
                      outputs=["SUM"]))
    assert checked == []  # the same names, datatypes, shapes and outputs: passed already
    monkeypatch.undo()
    # Anything that differs is checked in full, and refused as before.
    rejected(sig, request(tensor("A", "FP32", (4,)), tensor("B", "FP32", (3, 2)),
                          outputs=["NOPE"]), "unexpected inference output 'NOPE'")
    rejected(sig, request(tensor("A", "FP32", (5,)), tensor("B", "FP32", (3, 2)),
                          outputs=["SUM"]), "unexpected shape for input 'A'")
    rejected(sig, request(tensor("A", "FP64", (4,)), tensor("B", "FP32", (3, 2)),
                          outputs=["SUM"]), "has datatype FP64")
    rejected(sig, request(tensor("A", "FP32", (4,)), outputs=["SUM"]), "'B'")
    sig.check(good)  # and the kind that passed still passes


def test_a_refused_kind_of_request_is_refused_every_time():
    sig = signature(BATCHED)
    for _ in range(3):
        rejected(sig, request(tensor("X", "INT32", (9, 3)), tensor("Y", "BYTES", (9, 1))),
                 "batch size 9")
    assert not sig._passed


def test_passed_kinds_are_bounded_and_list_shapes_are_checked_each_time(monkeypatch):
    monkeypatch.setattr("naiad.models.signature.PASSED_REMEMBERED", 2)
    sig = signature(ADD)
    for rows in (1, 2, 3, 4):
        sig.check(request(tensor("A", "FP32", (4,)), tensor("B", "FP32", (rows, 2))))
    assert len(sig._passed) == 2
    listed = request(tensor("A", "FP32", (4,)), tensor("B", "FP32", (1, 2)))
    listed.inputs["A"].shape = [4]  # a plugin may build a request with a list
    sig.check(listed)
    listed.inputs["A"].shape = [5]
    rejected(sig, listed, "unexpected shape for input 'A'")


def test_a_model_with_a_reshape_checks_and_reshapes_every_request():
    sig = signature("""
max_batch_size: 0
input [ { name: "IN", data_type: TYPE_FP32, dims: [ 4 ], reshape: { shape: [ 2, 2 ] } } ]
output [ { name: "OUT", data_type: TYPE_FP32, dims: [ 4 ] } ]
""")
    for _ in range(2):
        req = request(tensor("IN", "FP32", (4,)))
        sig.check(req)
        assert req.inputs["IN"].shape == (2, 2) and req.inputs["IN"].data.shape == (2, 2)
    assert not sig._passed
