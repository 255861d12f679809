"""Unit tests of naiad.frontends.tensors: wire tensors to numpy and back, and shm helpers."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import ml_dtypes
import numpy as np
import pytest
from expect import rejected

from naiad.datatypes import NUMPY_DTYPES, serialize_bytes
from naiad.errors import Status
from naiad.frontends.tensors import (
    from_list,
    read_shm_input,
    requested_output_target,
    shm_output_target,
    to_list,
)
from naiad.shm import SharedMemoryRegistry
from naiad.types import Tensor
from naiad.wire_tensors import check_header, from_raw, to_raw

# --- check_header ---------------------------------------------------------------------------


def test_check_header_returns_shape_as_tuple():
    assert check_header("m", "X", "FP32", [2, 0, 3]) == (2, 0, 3)
    assert check_header("m", "X", "BYTES", []) == ()


@pytest.mark.parametrize("name", [None, "", 7, ["X"]])
def test_check_header_needs_a_name_string(name):
    rejected(lambda: check_header("resnet", name, "FP32", [1]), "'resnet'", "'name'")


@pytest.mark.parametrize("datatype", ["FLOAT32", "fp32", None, 5, "TYPE_FP32"])
def test_check_header_rejects_unknown_datatype_listing_the_known_ones(datatype):
    rejected(lambda: check_header("resnet", "X", datatype, [1]),
             "'X'", "'resnet'", "unknown datatype", "BF16, BOOL, BYTES")


@pytest.mark.parametrize("shape", [None, "[1]", 3, [-1], [1, 2.0], [True], [1, None], {"a": 1}])
def test_check_header_rejects_shapes_that_are_not_non_negative_integers(shape):
    rejected(lambda: check_header("resnet", "X", "FP32", shape),
             "'X'", "'resnet'", "non-negative integers", repr(shape))


# --- from_raw -------------------------------------------------------------------------------


def test_from_raw_is_a_zero_copy_view_of_the_buffer():
    buffer = bytearray(np.arange(6, dtype=np.float32).tobytes())
    tensor = from_raw("m", "X", "FP32", (2, 3), memoryview(buffer)[0:24])
    assert tensor.shape == (2, 3) and tensor.data.shape == (2, 3)
    assert np.shares_memory(tensor.data, np.frombuffer(buffer, dtype=np.uint8))
    np.testing.assert_array_equal(tensor.data, np.arange(6, dtype=np.float32).reshape(2, 3))


def test_from_raw_of_bytes_object_shares_its_memory():
    raw = np.arange(4, dtype=np.int64).tobytes()
    tensor = from_raw("m", "X", "INT64", (4,), raw)
    assert np.shares_memory(tensor.data, np.frombuffer(raw, dtype=np.uint8))


def test_from_raw_reads_little_endian():
    tensor = from_raw("m", "X", "UINT16", (1,), b"\x01\x02")
    assert tensor.data[0] == 0x0201


@pytest.mark.parametrize(("datatype", "shape", "size"), [
    ("FP32", (2, 3), 20), ("FP32", (2, 3), 28), ("INT8", (0,), 1), ("BF16", (3,), 3)])
def test_from_raw_size_mismatch_names_tensor_model_and_byte_counts(datatype, shape, size):
    from naiad.datatypes import ITEM_SIZES, element_count
    need = element_count(shape) * ITEM_SIZES[datatype]
    rejected(lambda: from_raw("resnet", "X", datatype, shape, b"\x00" * size),
             "input 'X' of model 'resnet'", f"needs {need} bytes", f"got {size}")


def test_from_raw_bytes_reshapes_the_deserialized_elements():
    raw = serialize_bytes(np.array([b"a", b"bb", b"", b"d"], dtype=object))
    tensor = from_raw("m", "T", "BYTES", (2, 2), raw)
    assert tensor.data.dtype == object
    assert tensor.data.tolist() == [[b"a", b"bb"], [b"", b"d"]]


def test_from_raw_bytes_with_a_shape_the_data_cannot_hold():
    rejected(lambda: from_raw("tok", "T", "BYTES", (2**31, 2**31), b""),
             "input 'T' of model 'tok'")


def test_from_raw_bytes_with_bad_lengths_names_the_tensor():
    rejected(lambda: from_raw("tok", "T", "BYTES", (1,), b"\x09\x00\x00\x00abc"),
             "input 'T' of model 'tok'", "declares 9 bytes")


# --- from_list ------------------------------------------------------------------------------


def test_from_list_flat():
    tensor = from_list("m", "X", "INT32", (2, 2), [1, 2, 3, 4])
    assert tensor.data.dtype == np.int32
    np.testing.assert_array_equal(tensor.data, [[1, 2], [3, 4]])


def test_from_list_flattens_nested_lists_in_row_major_order():
    tensor = from_list("m", "X", "FP64", (8,), [[[1, 2], [3, 4]], [[5, 6], [7, 8]]])
    np.testing.assert_array_equal(tensor.data, [1, 2, 3, 4, 5, 6, 7, 8])
    tensor = from_list("m", "X", "FP64", (2, 2), [[1, 2], [3, 4]])
    np.testing.assert_array_equal(tensor.data, [[1, 2], [3, 4]])


def test_from_list_accepts_other_sequences_such_as_grpc_contents():
    tensor = from_list("m", "X", "INT64", (3,), (5, 6, 7))
    np.testing.assert_array_equal(tensor.data, [5, 6, 7])


def test_from_list_of_empty_tensor():
    assert from_list("m", "X", "FP32", (0, 3), []).data.shape == (0, 3)
    assert from_list("m", "X", "FP32", (0,), [[]]).data.shape == (0,)


def test_from_list_deep_nesting_does_not_recurse():
    values: list = [1.5]
    for _ in range(100_000):
        values = [values]
    tensor = from_list("m", "X", "FP32", (1,), values)
    assert tensor.data.tolist() == [1.5]


@pytest.mark.parametrize(("shape", "values", "count", "given"), [
    ((2, 2), [1, 2, 3], 4, 3), ((3,), [[1, 2], [3, 4]], 3, 4), ((), [], 1, 0)])
def test_from_list_count_mismatch_names_tensor_and_counts(shape, values, count, given):
    rejected(lambda: from_list("resnet", "X", "INT32", shape, values),
             "input 'X' of model 'resnet'", f"has {count} elements", f"{given} values")


@pytest.mark.parametrize("values", [[1, 0], [True, "false"], [True, None]])
def test_from_list_bool_needs_true_or_false(values):
    rejected(lambda: from_list("m", "FLAG", "BOOL", (2,), values),
             "input 'FLAG'", "datatype BOOL", "true or false")


@pytest.mark.parametrize("datatype", ["INT32", "FP32", "UINT8", "FP16", "BF16"])
@pytest.mark.parametrize("bad", ["1", True, None, {"v": 1}])
def test_from_list_numbers_reject_strings_booleans_nulls_and_objects(datatype, bad):
    rejected(lambda: from_list("m", "X", datatype, (2,), [1, bad]),
             "input 'X' of model 'm'", f"datatype {datatype}", "must be numbers")


def test_from_list_rejects_mixed_nesting():
    rejected(lambda: from_list("m", "X", "INT32", (2,), [1, [2]]), "datatype INT32")


@pytest.mark.parametrize(("datatype", "value"), [
    ("UINT8", 256), ("UINT8", -1), ("INT8", 128), ("INT64", 2**63), ("UINT64", -1)])
def test_from_list_out_of_range_integer_is_an_error(datatype, value):
    rejected(lambda: from_list("m", "X", datatype, (1,), [value]), f"datatype {datatype}")


def test_from_list_integers_are_accepted_for_float_datatypes():
    for datatype in ("FP16", "BF16", "FP32", "FP64"):
        tensor = from_list("m", "X", datatype, (3,), [1, 2.5, -3])
        assert tensor.data.tolist() == [1.0, 2.5, -3.0]


def test_from_list_integer_too_large_for_a_float_is_an_error():
    rejected(lambda: from_list("m", "X", "FP64", (1,), [10**400]), "datatype FP64")


def test_from_list_full_uint64_and_int64_ranges():
    values = [0, 2**63, 2**64 - 1]
    assert from_list("m", "X", "UINT64", (3,), values).data.tolist() == values
    values = [-(2**63), 0, 2**63 - 1]
    assert from_list("m", "X", "INT64", (3,), values).data.tolist() == values


def test_from_list_nan_into_integer_is_an_error():
    rejected(lambda: from_list("m", "X", "INT32", (1,), [float("nan")]), "datatype INT32")


def test_from_list_float_into_integer_tensor_is_an_error():
    rejected(lambda: from_list("m", "X", "INT32", (2,), [1, 1.5]), "datatype INT32")


def test_from_list_bytes_encodes_strings_as_utf8_and_keeps_bytes():
    tensor = from_list("m", "T", "BYTES", (3,), ["hello", "wörld", b"\xff"])
    assert tensor.data.dtype == object
    assert tensor.data.tolist() == [b"hello", "wörld".encode(), b"\xff"]


@pytest.mark.parametrize("bad", [5, None, True, ["x"], {"a": 1}])
def test_from_list_bytes_rejects_non_strings(bad):
    rejected(lambda: from_list("m", "T", "BYTES", (2,), ["ok", bad]),
             "input 'T' of model 'm'", "datatype BYTES", "element 1", "not a string")


@pytest.mark.parametrize("data", ["abc", b"abc", {"a": 1}])
def test_from_list_data_must_be_a_list(data):
    rejected(lambda: from_list("m", "X", "BYTES", (3,), data),
             "input 'X' of model 'm'", "'data' must be a list")


@pytest.mark.parametrize("data", [5, None, True])
def test_from_list_scalar_data_is_an_invalid_arg(data):
    rejected(lambda: from_list("m", "X", "INT32", (1,), data), "'data' must be a list")


# --- to_raw / to_list -----------------------------------------------------------------------

SAMPLES = {
    "BOOL": [True, False, True, True],
    "UINT8": [0, 1, 254, 255],
    "UINT16": [0, 1, 65534, 65535],
    "UINT32": [0, 1, 2**32 - 2, 2**32 - 1],
    "UINT64": [0, 1, 2**64 - 2, 2**64 - 1],
    "INT8": [-128, -1, 0, 127],
    "INT16": [-(2**15), -1, 0, 2**15 - 1],
    "INT32": [-(2**31), -1, 0, 2**31 - 1],
    "INT64": [-(2**63), -1, 0, 2**63 - 1],
    "FP16": [-2.5, 0.0, 65504.0, 0.0009765625],
    "FP32": [-1.5, 0.0, 3.4028234663852886e38, 2.0**-100],
    "FP64": [-1.5, 0.0, 1.7976931348623157e308, 5e-324],
    "BF16": [-2.0, 0.0, 1.5, 3.3895313892515355e38],
    "BYTES": ["hello", "wörld", "", "\x00x"],
}


def test_samples_cover_every_datatype():
    assert set(SAMPLES) == set(NUMPY_DTYPES)


def sample(datatype: str, shape: tuple[int, ...] = (2, 2)) -> Tensor:
    values = SAMPLES[datatype]
    if datatype == "BYTES":
        data = np.array([v.encode() for v in values], dtype=object).reshape(shape)
    else:
        data = np.array(values, dtype=NUMPY_DTYPES[datatype]).reshape(shape)
    return Tensor("X", datatype, shape, data)


@pytest.mark.parametrize("datatype", sorted(NUMPY_DTYPES))
def test_raw_round_trip_for_every_datatype(datatype):
    tensor = sample(datatype)
    back = from_raw("m", "X", datatype, tensor.shape, to_raw(tensor))
    assert back.shape == tensor.shape
    assert back.data.dtype == tensor.data.dtype
    if datatype == "BYTES":
        assert back.data.tolist() == tensor.data.tolist()
    else:
        assert back.data.tobytes() == tensor.data.tobytes()


@pytest.mark.parametrize("datatype", sorted(NUMPY_DTYPES))
def test_list_round_trip_for_every_datatype(datatype):
    tensor = sample(datatype)
    values = to_list(tensor)
    assert values == SAMPLES[datatype]
    assert all(type(v) is type(SAMPLES[datatype][0]) for v in values)
    back = from_list("m", "X", datatype, tensor.shape, values)
    assert back.data.dtype == tensor.data.dtype
    if datatype == "BYTES":
        assert back.data.tolist() == tensor.data.tolist()
    else:
        assert back.data.tobytes() == tensor.data.tobytes()


def test_to_raw_of_numeric_tensor_does_not_copy():
    data = np.arange(6, dtype=np.int32)
    raw = to_raw(Tensor("X", "INT32", (6,), data))
    assert np.shares_memory(np.frombuffer(raw, dtype=np.uint8), data)


def test_to_raw_of_bf16_is_little_endian_bits():
    data = np.array([1.0, 2.0], dtype=ml_dtypes.bfloat16)
    assert bytes(to_raw(Tensor("X", "BF16", (2,), data))) == b"\x80\x3f\x00\x40"


def test_to_raw_of_non_contiguous_array_is_row_major():
    data = np.arange(6, dtype=np.int16).reshape(2, 3).T
    raw = to_raw(Tensor("X", "INT16", (3, 2), data))
    assert bytes(raw) == np.ascontiguousarray(data).tobytes()


def test_to_raw_of_big_endian_array_is_little_endian():
    data = np.array([1, 258], dtype=">u4")
    assert bytes(to_raw(Tensor("X", "UINT32", (2,), data))) == np.array(
        [1, 258], dtype="<u4").tobytes()


def test_to_raw_of_empty_tensor_is_empty():
    assert bytes(to_raw(Tensor("X", "FP32", (0, 4), np.empty((0, 4), np.float32)))) == b""


def test_to_list_flattens_row_major():
    data = np.arange(6, dtype=np.int64).reshape(2, 3)
    assert to_list(Tensor("X", "INT64", (2, 3), data)) == [0, 1, 2, 3, 4, 5]


def test_to_list_of_bytes_decodes_utf8_and_falls_back_to_latin1():
    data = np.array(["wörld".encode(), b"\xff\xfe", "already str", 7], dtype=object)
    assert to_list(Tensor("T", "BYTES", (4,), data)) == ["wörld", "ÿþ", "already str", "7"]


def test_to_list_of_fp16_and_bf16_gives_python_floats():
    for datatype in ("FP16", "BF16"):
        data = np.array([0.5, -3.0], dtype=NUMPY_DTYPES[datatype])
        values = to_list(Tensor("X", datatype, (2,), data))
        assert values == [0.5, -3.0]
        assert all(type(v) is float for v in values)


# --- shared memory helpers ------------------------------------------------------------------


class FakeRegistry:
    """Stands in for SharedMemoryRegistry: returns bytes and records the read."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.calls: list[tuple] = []

    def read(self, name, offset, byte_size, what):
        self.calls.append((name, offset, byte_size, what))
        return self.data[offset:offset + byte_size]


def test_read_shm_input_reads_region_offset_and_size():
    registry = FakeRegistry(b"\x00" * 4 + np.array([1.5, 2.5], np.float32).tobytes())
    params = {"shared_memory_region": "in0", "shared_memory_byte_size": 8,
              "shared_memory_offset": 4}
    tensor = read_shm_input(registry, "m", "X", "FP32", (2,), params)  # type: ignore[arg-type]
    np.testing.assert_array_equal(tensor.data, [1.5, 2.5])
    assert registry.calls == [("in0", 4, 8, "input 'X' of model 'm'")]


def test_read_shm_input_offset_defaults_to_zero():
    registry = FakeRegistry(b"\x01\x02")
    params = {"shared_memory_region": "in0", "shared_memory_byte_size": 2}
    tensor = read_shm_input(registry, "m", "X", "UINT8", (2,), params)  # type: ignore[arg-type]
    assert tensor.data.tolist() == [1, 2]
    assert registry.calls[0][1] == 0


@pytest.mark.parametrize("params", [
    {"shared_memory_region": "in0"},
    {"shared_memory_region": "in0", "shared_memory_byte_size": "8"},
    {"shared_memory_region": "in0", "shared_memory_byte_size": 8, "shared_memory_offset": 1.0},
])
def test_read_shm_input_needs_integer_size_and_offset(params):
    registry = FakeRegistry(b"")
    rejected(lambda: read_shm_input(registry, "m", "X", "FP32", (2,), params),  # type: ignore[arg-type]
             "input 'X' of model 'm'", "shared_memory_byte_size")
    assert registry.calls == []


def test_read_shm_input_size_must_match_the_shape():
    registry = FakeRegistry(b"\x00" * 16)
    params = {"shared_memory_region": "in0", "shared_memory_byte_size": 12}
    rejected(lambda: read_shm_input(registry, "m", "X", "FP32", (2,), params),  # type: ignore[arg-type]
             "input 'X' of model 'm'", "needs 8 bytes", "got 12")


def test_shm_output_target_is_none_without_region():
    assert shm_output_target("m", "Y", {}) is None
    assert shm_output_target("m", "Y", {"binary_data": True}) is None


def test_shm_output_target_gives_region_offset_and_size():
    params = {"shared_memory_region": "out", "shared_memory_byte_size": 64}
    assert shm_output_target("m", "Y", params) == ("out", 0, 64)
    params["shared_memory_offset"] = 16
    assert shm_output_target("m", "Y", params) == ("out", 16, 64)


def test_shm_output_target_needs_integer_size():
    rejected(lambda: shm_output_target("m", "Y", {"shared_memory_region": "out"}),
             "output 'Y' of model 'm'", "shared_memory_byte_size")


@pytest.mark.parametrize("region", [["out"], 5, {"n": "out"}])
def test_shm_output_target_needs_a_region_name_string(region):
    rejected(lambda: shm_output_target("m", "Y", {"shared_memory_region": region,
                                                   "shared_memory_byte_size": 4}),
             "output 'Y' of model 'm'", "shared_memory_region")


@pytest.fixture
def shm_key() -> Iterator[str]:
    key = f"/naiad-unit-tensors-{uuid.uuid4().hex}"
    path = "/dev/shm" + key
    with open(path, "wb") as f:
        f.write(b"\x00" * 64)
    try:
        yield key
    finally:
        os.unlink(path)


def test_shm_input_through_a_real_registry(shm_key):
    registry = SharedMemoryRegistry()
    registry.register("in0", shm_key, 8, 32)
    try:
        registry.write("in0", 4, 12, np.array([7, 8, 9], np.int32).tobytes(), "test")
        params = {"shared_memory_region": "in0", "shared_memory_byte_size": 12,
                  "shared_memory_offset": 4}
        tensor = read_shm_input(registry, "m", "X", "INT32", (3,), params)
        assert tensor.data.tolist() == [7, 8, 9]
        params = {"shared_memory_region": "in0", "shared_memory_byte_size": 32,
                  "shared_memory_offset": 4}
        rejected(lambda: read_shm_input(registry, "m", "X", "INT32", (8,), params),
                 "input 'X' of model 'm'", "outside region 'in0'")
        params = {"shared_memory_region": "nope", "shared_memory_byte_size": 4}
        rejected(lambda: read_shm_input(registry, "m", "X", "INT32", (1,), params),
                 "input 'X' of model 'm'", "'nope' is not registered", status=Status.NOT_FOUND)
    finally:
        registry.unregister_all()


def test_shm_input_with_non_string_region_name_is_an_invalid_arg():
    registry = SharedMemoryRegistry()
    params = {"shared_memory_region": ["in0"], "shared_memory_byte_size": 4}
    rejected(lambda: read_shm_input(registry, "m", "X", "INT32", (1,), params),
             "input 'X' of model 'm'", "shared_memory_region")


def test_requested_output_target_is_checked_before_the_request_runs(shm_key):
    registry = SharedMemoryRegistry()
    registry.register("out", shm_key, 0, 32)
    try:
        assert requested_output_target(registry, "m", "Y", {"binary_data": True}) is None
        params = {"shared_memory_region": "out", "shared_memory_byte_size": 16,
                  "shared_memory_offset": 8}
        region, offset, size = requested_output_target(registry, "m", "Y", params)
        # The region itself, which the request holds until its answer is written.
        assert (region.name, offset, size) == ("out", 8, 16)
        params["shared_memory_offset"] = 24
        rejected(lambda: requested_output_target(registry, "m", "Y", params),
                 "output 'Y' of model 'm'", "outside region 'out'")
        params = {"shared_memory_region": "nope", "shared_memory_byte_size": 4}
        rejected(lambda: requested_output_target(registry, "m", "Y", params),
                 "output 'Y' of model 'm'", "'nope' is not registered", status=Status.NOT_FOUND)
    finally:
        registry.unregister_all()


def test_requested_output_classification_is_accepted_but_not_into_shared_memory():
    assert requested_output_target(SharedMemoryRegistry(), "m", "Y",
                                   {"classification": 2}) is None
    rejected(lambda: requested_output_target(
        SharedMemoryRegistry(), "m", "Y", {"classification": 2, "shared_memory_region": "r",
                                           "shared_memory_byte_size": 16}),
        "output 'Y' of model 'm'", "classification", status=Status.INVALID_ARG)
