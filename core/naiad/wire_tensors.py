"""The raw wire form of a tensor: shapes checked before numpy sees them, bytes to numpy and
back.

Raw bytes (HTTP binary data, gRPC raw contents, shared memory, a cached response) become
``np.frombuffer`` views without a copy, and numpy arrays become bytes without one where they
are contiguous and little-endian. Both frontends decode with it and the response cache
stores responses in this form, so it sits below all three. Every size mismatch is an
INVALID_ARG error naming the model, the tensor and the numbers.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from naiad.datatypes import (
    ITEM_SIZES,
    NUMPY_DTYPES,
    deserialize_bytes,
    format_shape,
    serialize_bytes,
)
from naiad.errors import invalid_arg
from naiad.types import Tensor

# What numpy refuses with a ValueError, even for an array with no element: more dimensions
# than this, or dimensions whose product (zeros left out) times the item size does not fit
# in a signed machine word.
NUMPY_MAX_DIMS = 64 if np.lib.NumpyVersion(np.__version__) >= "2.0.0" else 32
_NUMPY_MAX_BYTES = int(np.iinfo(np.intp).max)
# Bytes per element that a shape describes at the least: a BYTES element is a 4-byte length
# prefix on the wire (and an 8-byte object pointer in numpy).
_WIRE_ITEM_SIZES = {**ITEM_SIZES, "BYTES": 4}
# The most elements numpy can address per datatype.
_NUMPY_ELEMENTS = {datatype: _NUMPY_MAX_BYTES // size for datatype, size in
                   {**ITEM_SIZES, "BYTES": np.dtype(object).itemsize}.items()}


_PLAIN_INT = frozenset({int})


def check_header(model: str, name: Any, datatype: Any, shape: Any) -> tuple[int, ...]:
    """Validate an input's name, datatype and shape fields; return the shape as a tuple."""
    if not isinstance(name, str) or not name:
        raise invalid_arg(f"model '{model}': every input needs a 'name' string")
    if datatype not in NUMPY_DTYPES:
        raise invalid_arg(f"input '{name}' of model '{model}': unknown datatype {datatype!r}; "
                          f"expected one of {', '.join(sorted(NUMPY_DTYPES))}")
    if not isinstance(shape, (list, tuple)) or not (
            # the usual shape, checked in C: plain integers, none negative
            (set(map(type, shape)) <= _PLAIN_INT and (not shape or min(shape) >= 0))
            or all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)):
        raise invalid_arg(f"input '{name}' of model '{model}': 'shape' must be a list of "
                          f"non-negative integers, got {shape!r}")
    return tuple(shape)


def check_shape(model: str, name: str, datatype: str, shape: tuple[int, ...],
                max_bytes: int | None = None) -> int:
    """The element count of input ``name``'s ``shape``, once it is safe to hand to numpy;
    INVALID_ARG naming the model, tensor and shape otherwise.

    Refused: a negative dimension, more dimensions than numpy allows, and a shape whose
    dimensions describe more than ``max_bytes`` (the most a request may carry; None: what
    numpy can address) at the datatype's element size, dimensions of 0 counted as 1 (numpy
    refuses ``[0, 2**62, 2**62]`` even though it holds nothing). Python integers do not
    overflow: the product is checked against the bound, never wrapped.
    """
    if len(shape) > NUMPY_MAX_DIMS:
        raise invalid_arg(f"input '{name}' of model '{model}': shape has {len(shape)} "
                          f"dimensions, more than the {NUMPY_MAX_DIMS} a tensor may have")
    numpy_limit = _NUMPY_ELEMENTS[datatype]
    limit = (numpy_limit if max_bytes is None
             else min(numpy_limit, max_bytes // _WIRE_ITEM_SIZES[datatype]))
    count = math.prod(shape)
    if 0 < count <= limit and (not shape or min(shape) > 0):
        return count  # the usual case, decided in C: no zero, no negative, within bounds
    span = count = 1
    for dim in shape:
        if dim < 0:
            raise invalid_arg(f"input '{name}' of model '{model}': shape "
                              f"{format_shape(shape)} has a negative dimension")
        count *= dim
        if dim:
            span *= dim
            if span > limit:
                bound = ("numpy can address" if limit == numpy_limit else
                         f"the {max_bytes} bytes a request may carry (--http-max-input-size)")
                raise invalid_arg(
                    f"input '{name}' of model '{model}': shape {format_shape(shape)} of "
                    f"{datatype} describes more data than {bound}")
    return count


def from_raw(model: str, name: str, datatype: str, shape: tuple[int, ...],
             raw: bytes | bytearray | memoryview, max_bytes: int | None = None) -> Tensor:
    """A tensor from its raw little-endian bytes (or the length-prefixed BYTES form).
    ``max_bytes``: the most a request may carry (see :func:`check_shape`)."""
    count = check_shape(model, name, datatype, shape,
                        None if max_bytes is None else max(max_bytes, len(raw)))
    if datatype == "BYTES":
        what = f"input '{name}' of model '{model}'"
        data = deserialize_bytes(raw, count, what).reshape(shape)
        return Tensor(name, datatype, shape, data)
    expected = count * ITEM_SIZES[datatype]
    if len(raw) != expected:
        raise invalid_arg(
            f"input '{name}' of model '{model}': shape {format_shape(shape)} of {datatype} "
            f"needs {expected} bytes of tensor data, got {len(raw)}")
    data = np.frombuffer(raw, dtype=NUMPY_DTYPES[datatype]).reshape(shape)
    return Tensor(name, datatype, shape, data)


def to_raw(tensor: Tensor) -> bytes | memoryview:
    """The raw wire bytes of a tensor (no copy for contiguous numeric arrays)."""
    if tensor.datatype == "BYTES":
        return serialize_bytes(tensor.data)
    data = tensor.data
    if not data.size:
        return b""
    if not data.flags.c_contiguous:
        data = np.ascontiguousarray(data)
    if data.dtype.byteorder == ">":
        data = data.astype(data.dtype.newbyteorder("<"))
    # A uint8 view: memoryview cannot export every dtype (ml_dtypes' bfloat16 among them).
    return memoryview(data.reshape(-1).view(np.uint8))
