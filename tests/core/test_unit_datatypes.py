"""Unit tests of naiad.datatypes: the datatype table, config names and BYTES wire form."""

from __future__ import annotations

import struct

import ml_dtypes
import numpy as np
import pytest
from tritonclient.grpc.model_config_pb2 import DataType

from naiad.datatypes import (
    DATATYPES,
    ITEM_SIZES,
    NUMPY_DTYPES,
    config_to_datatype,
    datatype_to_config,
    deserialize_bytes,
    element_count,
    numpy_to_datatype,
    serialize_bytes,
)
from naiad.errors import InferenceServerError, Status

WHAT = "input 'TEXT' of model 'tok'"


def wire(*items: bytes) -> bytes:
    return b"".join(struct.pack("<I", len(i)) + i for i in items)


def rejected(buffer: bytes, count: int, *fragments: str) -> None:
    with pytest.raises(InferenceServerError) as info:
        deserialize_bytes(buffer, count, WHAT)
    assert info.value.status is Status.INVALID_ARG
    assert WHAT in info.value.message
    for fragment in fragments:
        assert fragment in info.value.message, (fragment, info.value.message)


def test_table_covers_the_v2_datatypes():
    assert frozenset({"BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32",
                      "INT64", "FP16", "FP32", "FP64", "BF16", "BYTES"}) == DATATYPES
    assert NUMPY_DTYPES["BYTES"] is None
    assert NUMPY_DTYPES["BF16"] == np.dtype(ml_dtypes.bfloat16)
    assert "BYTES" not in ITEM_SIZES
    assert ITEM_SIZES["BF16"] == 2 and ITEM_SIZES["FP64"] == 8 and ITEM_SIZES["BOOL"] == 1


def test_serialize_bytes_prefixes_each_element_with_its_little_endian_length():
    array = np.array([b"hello", "wörld", b""], dtype=object)
    assert serialize_bytes(array) == wire(b"hello", "wörld".encode(), b"")
    assert len(serialize_bytes(np.array([b"hello", "wörld"], dtype=object))) == 19


def test_serialize_bytes_flattens_row_major_and_stringifies_other_objects():
    array = np.array([[b"a", bytearray(b"bc")], [memoryview(b"d"), 7]], dtype=object)
    assert serialize_bytes(array) == wire(b"a", b"bc", b"d", b"7")


def test_serialize_bytes_of_empty_tensor_is_empty():
    assert serialize_bytes(np.empty((0, 3), dtype=object)) == b""


def test_deserialize_bytes_reads_exactly_count_elements():
    out = deserialize_bytes(wire(b"x", b"", b"\x00\xff"), 3, WHAT)
    assert out.dtype == object
    assert out.tolist() == [b"x", b"", b"\x00\xff"]


def test_deserialize_bytes_accepts_memoryview_and_copies_out_bytes():
    buffer = bytearray(wire(b"abc"))
    out = deserialize_bytes(memoryview(buffer), 1, WHAT)
    buffer[4:7] = b"zzz"
    assert out[0] == b"abc" and type(out[0]) is bytes


def test_deserialize_zero_elements_from_empty_buffer():
    assert deserialize_bytes(b"", 0, WHAT).shape == (0,)


def test_deserialize_bytes_rejects_a_length_that_runs_past_the_end():
    buffer = struct.pack("<I", 100) + b"short"
    rejected(buffer, 1, "element 0", "declares 100 bytes", "only 5 remain")


def test_deserialize_bytes_rejects_a_huge_lying_length_without_allocating():
    rejected(struct.pack("<I", 0xFFFFFFFF), 1, "declares 4294967295 bytes", "only 0 remain")


def test_deserialize_bytes_rejects_trailing_bytes():
    rejected(wire(b"a", b"b") + b"!!", 2, "2 bytes after the 2 expected elements")


def test_deserialize_bytes_rejects_more_elements_than_the_shape_has():
    rejected(wire(b"a", b"b"), 1, "after the 1 expected elements")


def test_deserialize_bytes_rejects_a_truncated_length_prefix():
    rejected(wire(b"a") + b"\x01\x00", 2, "2 BYTES elements", "4-byte length prefix")
    rejected(wire(b"a", b"b") + b"\x01\x00", 3, "ends after 2 of 3 elements",
             "4-byte length prefix")


def test_deserialize_bytes_rejects_too_few_elements():
    rejected(wire(b"a"), 3, "3 BYTES elements need at least 12 bytes")
    rejected(wire(b"abcdefgh"), 3, "ends after 1 of 3 elements")


def test_deserialize_bytes_rejects_an_impossible_count_without_crashing():
    # a shape of 2**62 BYTES elements with no data: too many elements for any buffer
    rejected(b"", 2**62, "4-byte length prefix")


def test_deserialize_bytes_does_not_allocate_for_elements_the_buffer_cannot_hold():
    # A request may claim a huge BYTES shape in a tiny body: the element array must not be
    # allocated before the buffer is known to hold that many 4-byte length prefixes.
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(InferenceServerError):
            deserialize_bytes(b"", 1_000_000, WHAT)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, f"{peak} bytes allocated for a 0-byte buffer"


@pytest.mark.parametrize("name", [n for n in DataType.keys() if n != "TYPE_INVALID"])  # noqa: SIM118 (a protobuf enum wrapper)
def test_every_config_type_maps_to_a_v2_datatype_and_back(name):
    datatype = config_to_datatype(name)
    assert datatype in DATATYPES
    assert datatype_to_config(datatype) == name


def test_config_string_is_bytes_and_names_without_prefix_pass_through():
    assert config_to_datatype("TYPE_STRING") == "BYTES"
    assert config_to_datatype("TYPE_FP32") == "FP32"
    assert config_to_datatype("INT8") == "INT8"
    assert datatype_to_config("BYTES") == "TYPE_STRING"
    assert datatype_to_config("BF16") == "TYPE_BF16"


@pytest.mark.parametrize("datatype", [d for d in NUMPY_DTYPES if d != "BYTES"])
def test_numpy_to_datatype_inverts_the_table(datatype):
    assert numpy_to_datatype(NUMPY_DTYPES[datatype]) == datatype


@pytest.mark.parametrize("dtype", [object, "S4", "U7", np.bytes_, np.str_])
def test_numpy_strings_and_objects_are_bytes(dtype):
    assert numpy_to_datatype(np.dtype(dtype)) == "BYTES"


def test_numpy_to_datatype_accepts_scalar_types():
    assert numpy_to_datatype(np.float32) == "FP32"
    assert numpy_to_datatype(ml_dtypes.bfloat16) == "BF16"


@pytest.mark.parametrize("dtype", [np.complex64, "datetime64[s]", "V4"])
def test_numpy_dtype_without_v2_datatype_is_an_error_naming_it(dtype):
    with pytest.raises(InferenceServerError) as info:
        numpy_to_datatype(np.dtype(dtype))
    assert info.value.status is Status.INVALID_ARG
    assert str(np.dtype(dtype)) in info.value.message


def test_element_count_of_scalar_and_empty_shapes():
    assert element_count(()) == 1
    assert element_count([2, 3, 4]) == 24
    assert element_count((5, 0, 7)) == 0
