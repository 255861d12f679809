"""Model configs, test tensors and exact comparisons for the backend conformance kit.

Kept apart from :mod:`naiad.testing.conformance` (the pytest classes) so they can be used and
tested without a server: nothing here imports pytest or a client.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from naiad.datatypes import NUMPY_DTYPES, datatype_to_config, element_count

ELEMENTS_PER_ROW = 5
"""Elements in each row of a test tensor (the dimension past the batch dimension)."""

# BYTES elements every transport can carry: non-ASCII UTF-8 and the empty string.
_UTF8_ITEMS = ("héllo wörld ✓".encode(), b"", "日本語 €".encode(), b"naiad", b" ")
# Binary HTTP and gRPC also carry bytes that are not UTF-8 (JSON cannot).
_RAW_ITEMS = (b"\x00\xff\xfe\x80", *_UTF8_ITEMS[:-1], b"\x00")


@dataclass(frozen=True)
class IdentityModel:
    """What a backend author's writer produced: the model's one input and one output name."""

    input_name: str
    output_name: str


def identity_config(name: str, backend: str, model: IdentityModel, datatype: str,
                    max_batch_size: int, batch_delay_us: int | None = None) -> str:
    """The config.pbtxt of an identity model: one input and one output of ``datatype``,
    dims [-1]; with ``batch_delay_us`` the dynamic batcher, waiting up to that long for a
    full batch."""
    data_type = datatype_to_config(datatype)
    batcher = ("" if batch_delay_us is None else
               f"dynamic_batching {{ max_queue_delay_microseconds: {batch_delay_us} }}\n")
    # JSON string quoting is valid protobuf text-format quoting for these names.
    return (
        f"name: {json.dumps(name)}\n"
        f"backend: {json.dumps(backend)}\n"
        f"max_batch_size: {max_batch_size}\n"
        f"input [ {{ name: {json.dumps(model.input_name)}, data_type: {data_type}, "
        f"dims: [ -1 ] }} ]\n"
        f"output [ {{ name: {json.dumps(model.output_name)}, data_type: {data_type}, "
        f"dims: [ -1 ] }} ]\n"
        f"{batcher}"
    )


def sample(datatype: str, shape: tuple[int, ...], *, offset: int = 0,
           utf8_only: bool = False) -> np.ndarray:
    """A tensor of ``datatype`` and ``shape`` whose elements differ from one another and
    include the datatype's extremes (min and max integers, the largest and smallest normal
    floats), so an output that drops, reorders, truncates or converts anything is caught.
    ``offset`` shifts the values (distinct tensors for concurrent requests); ``utf8_only``
    keeps BYTES elements valid UTF-8 (what JSON can carry)."""
    count = element_count(shape)
    positions = range(offset, offset + count)
    if datatype == "BYTES":
        items = _UTF8_ITEMS if utf8_only else _RAW_ITEMS
        array = np.empty(count, dtype=object)
        array[:] = [items[i % len(items)] + (str(i).encode() if i >= len(items) else b"")
                    for i in positions]
        return array.reshape(shape)
    dtype = NUMPY_DTYPES[datatype]
    assert dtype is not None
    if datatype == "BOOL":
        return np.array([i % 3 == 0 for i in positions], dtype=dtype).reshape(shape)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        values: list[object] = [(i * 37 + 1) % 100 * (-1 if dtype.kind == "i" and i % 2 else 1)
                                for i in positions]
        extremes: tuple[object, object] = (int(info.min), int(info.max))
    else:
        info_f = ml_dtypes.finfo(dtype)
        # Multiples of 0.25 below 64 are exact in every float type, bfloat16 included.
        values = [(i * 5 % 256) * 0.25 - 31.75 for i in positions]
        extremes = (float(info_f.max), float(info_f.smallest_normal))
    if count >= 2 and offset == 0:
        values[0], values[-1] = extremes
    return np.array(values, dtype=dtype).reshape(shape)


def as_bytes(array: np.ndarray) -> np.ndarray:
    """A BYTES result as an object array of ``bytes`` (tritonclient gives ``str`` items for
    BYTES sent as JSON)."""
    out = np.empty(array.shape, dtype=object)
    out.flat[:] = [item.encode("utf-8") if isinstance(item, str) else bytes(item)
                   for item in array.flat]
    return out


def mismatch(datatype: str, expected: np.ndarray, got: np.ndarray | None) -> str | None:
    """Why ``got`` is not exactly ``expected`` (dtype, shape, every element, bit for bit), or
    None when it is."""
    if got is None:
        return "the response has no such output"
    if tuple(got.shape) != tuple(expected.shape):
        return f"shape {list(got.shape)}, expected {list(expected.shape)}"
    if datatype == "BYTES":
        got_items, want_items = list(as_bytes(got).flat), list(expected.flat)
        if got_items != want_items:
            return f"elements {got_items!r}, expected {want_items!r}"
        return None
    if got.dtype != expected.dtype:
        return f"numpy dtype {got.dtype}, expected {expected.dtype}"
    if np.ascontiguousarray(got).tobytes() != np.ascontiguousarray(expected).tobytes():
        return f"values {got.tolist()!r}, expected {expected.tolist()!r}"
    return None
