"""Property tests of naiad.frontends.tensors and naiad.datatypes: every numeric datatype
survives raw bytes and JSON lists, and BYTES survives its length-prefixed wire form."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from naiad.datatypes import NUMPY_DTYPES, deserialize_bytes, serialize_bytes
from naiad.errors import InferenceServerError
from naiad.frontends.tensors import from_list, to_list
from naiad.types import Tensor
from naiad.wire_tensors import from_raw, to_raw

NUMERIC = sorted(d for d in NUMPY_DTYPES if d != "BYTES")
SHAPES = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5)
FAST = settings(max_examples=30, deadline=None, database=None)


def arrays(datatype: str) -> st.SearchStrategy[np.ndarray]:
    dtype = NUMPY_DTYPES[datatype]
    assert dtype is not None
    if datatype == "BF16":  # hypothesis has no bfloat16: draw every bit pattern as uint16
        return hnp.arrays(np.uint16, SHAPES).map(lambda a: a.view(dtype))
    return hnp.arrays(dtype, SHAPES)


def same_values(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal element by element, NaN equal to NaN, -0.0 distinct from 0.0."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind not in "fV":  # bfloat16 is kind 'V'
        return bool(np.array_equal(a, b))
    with np.errstate(invalid="ignore"):  # bfloat16's NaN warns when widened
        x, y = a.astype(np.float64), b.astype(np.float64)
    nan = np.isnan(x)
    return bool(np.array_equal(nan, np.isnan(y))
                and np.array_equal(x[~nan], y[~nan])
                and np.array_equal(np.signbit(x[~nan]), np.signbit(y[~nan])))


@pytest.mark.parametrize("datatype", NUMERIC)
@FAST
@given(data=st.data())
def test_numeric_round_trips_through_raw_bytes_and_lists(datatype, data):
    array = data.draw(arrays(datatype))
    tensor = Tensor("X", datatype, array.shape, array)
    # raw bytes: bit exact
    back = from_raw("m", "X", datatype, array.shape, to_raw(tensor))
    assert back.shape == array.shape
    assert back.data.dtype == array.dtype
    assert back.data.tobytes() == array.tobytes()
    # JSON lists (BF16 and FP16 through float32 values): every value kept
    values = to_list(tensor)
    assert len(values) == array.size
    back = from_list("m", "X", datatype, array.shape, values)
    assert back.shape == array.shape
    assert same_values(back.data, array)


BYTES_ITEMS = st.lists(st.binary(max_size=20), max_size=12)


@FAST
@given(items=BYTES_ITEMS)
def test_bytes_serialize_deserialize_round_trip(items):
    array = np.empty(len(items), dtype=object)
    array[:] = items
    wire = serialize_bytes(array)
    assert len(wire) == sum(4 + len(i) for i in items)
    assert deserialize_bytes(wire, len(items), "t").tolist() == items


@FAST
@given(items=BYTES_ITEMS, extra=st.binary(min_size=1, max_size=8))
def test_bytes_with_trailing_garbage_is_always_rejected(items, extra):
    from naiad.errors import InferenceServerError

    array = np.empty(len(items), dtype=object)
    array[:] = items
    with pytest.raises(InferenceServerError):
        deserialize_bytes(serialize_bytes(array) + extra, len(items), "t")


@FAST
@given(items=st.lists(st.binary(max_size=20), min_size=1, max_size=12), data=st.data())
def test_bytes_cut_short_is_always_rejected(items, data):
    from naiad.errors import InferenceServerError

    array = np.empty(len(items), dtype=object)
    array[:] = items
    wire = serialize_bytes(array)
    cut = data.draw(st.integers(0, len(wire) - 1))
    with pytest.raises(InferenceServerError):
        deserialize_bytes(wire[:cut], len(items), "t")


@FAST
@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=4), data=st.data())
def test_bytes_tensor_raw_round_trip(shape, data):
    count = int(np.prod(shape))
    items = data.draw(st.lists(st.binary(max_size=10), min_size=count, max_size=count))
    array = np.empty(count, dtype=object)
    array[:] = items
    array = array.reshape(shape)
    back = from_raw("m", "T", "BYTES", shape, to_raw(Tensor("T", "BYTES", shape, array)))
    assert back.shape == shape
    assert back.data.tolist() == array.tolist()


@FAST
@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=4), data=st.data())
def test_bytes_tensor_list_round_trip_for_text(shape, data):
    count = int(np.prod(shape))
    texts = data.draw(st.lists(st.text(max_size=10), min_size=count, max_size=count))
    array = np.empty(count, dtype=object)
    array[:] = [t.encode("utf-8") for t in texts]
    array = array.reshape(shape)
    values = to_list(Tensor("T", "BYTES", shape, array))
    assert values == texts
    assert from_list("m", "T", "BYTES", shape, values).data.tolist() == array.tolist()


def test_a_bfloat16_infinity_given_as_one_stays_one_and_a_finite_overflow_is_refused() -> None:
    back = from_list("m", "X", "BF16", (2,), [float("inf"), -1.5])
    assert np.isinf(back.data[0]) and float(back.data[1]) == -1.5
    with pytest.raises(InferenceServerError, match="out of range for BF16"):
        from_list("m", "X", "BF16", (2,), [float("inf"), 1e39])


@pytest.mark.parametrize("datatype,largest", [("FP16", 65504.0), ("FP32", 3.4028234663852886e38)])
def test_a_finite_value_beyond_fp16_or_fp32_is_refused_and_the_largest_one_kept(datatype,
                                                                               largest):
    # the quick bound check, then the checked conversion for what it cannot settle: a NaN
    # (which fails every comparison), a value that rounds down to the largest, infinities
    assert float(from_list("m", "X", datatype, (2,), [largest, -largest]).data[0]) == largest
    rounds_down = float(np.nextafter(largest, np.inf))
    assert float(from_list("m", "X", datatype, (1,), [rounds_down]).data[0]) == largest
    for values in ([largest * 2], [float("nan"), largest * 2], [1, -largest * 2]):
        with pytest.raises(InferenceServerError, match=f"out of range for {datatype}"):
            from_list("m", "X", datatype, (len(values),), values)
    back = from_list("m", "X", datatype, (3,), [float("nan"), float("-inf"), 1])
    assert np.isnan(back.data[0]) and np.isneginf(back.data[1]) and back.data[2] == 1
