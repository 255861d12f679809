"""The V2 datatypes: names, numpy dtypes, config enums and the BYTES wire encoding.

One table, used by the config validator, both frontends and every backend. BYTES tensors
are numpy ``object`` arrays of ``bytes``; BF16 tensors use ``ml_dtypes.bfloat16`` (the same
type ``tritonclient`` uses).
"""

from __future__ import annotations

import math
import struct

import ml_dtypes
import numpy as np

from naiad.errors import invalid_arg

# V2 name -> numpy dtype (None for BYTES: an object array of bytes)
NUMPY_DTYPES: dict[str, np.dtype | None] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "BYTES": None,
}

DATATYPES: frozenset[str] = frozenset(NUMPY_DTYPES)

# Bytes per element of each fixed-size datatype.
ITEM_SIZES: dict[str, int] = {k: v.itemsize for k, v in NUMPY_DTYPES.items() if v is not None}

_FROM_NUMPY: dict[np.dtype, str] = {v: k for k, v in NUMPY_DTYPES.items() if v is not None}


def config_to_datatype(type_name: str) -> str:
    """``TYPE_FP32`` -> ``FP32``; ``TYPE_STRING`` -> ``BYTES`` (config enum name to V2 name)."""
    name = type_name[5:] if type_name.startswith("TYPE_") else type_name
    return "BYTES" if name == "STRING" else name


def datatype_to_config(datatype: str) -> str:
    """``FP32`` -> ``TYPE_FP32``; ``BYTES`` -> ``TYPE_STRING``."""
    return "TYPE_STRING" if datatype == "BYTES" else "TYPE_" + datatype


def numpy_to_datatype(dtype: np.dtype) -> str:
    """The V2 datatype of a numpy dtype; strings and objects are BYTES."""
    dtype = np.dtype(dtype)
    found = _FROM_NUMPY.get(dtype)
    if found is not None:
        return found
    if dtype.kind in "OSU":
        return "BYTES"
    raise invalid_arg(f"numpy dtype {dtype} has no V2 datatype")


def serialize_bytes(array: np.ndarray) -> bytes:
    """BYTES tensor -> the wire form: each element as a 4-byte little-endian length + bytes."""
    parts = []
    for item in array.reshape(-1):
        if isinstance(item, str):
            item = item.encode("utf-8")
        elif not isinstance(item, (bytes, bytearray, memoryview)):
            item = str(item).encode("utf-8")
        parts.append(struct.pack("<I", len(item)))
        parts.append(bytes(item))
    return b"".join(parts)


def deserialize_bytes(buffer: bytes | memoryview, count: int, what: str) -> np.ndarray:
    """The wire form of a BYTES tensor with ``count`` elements -> a flat object array.

    ``what`` names the tensor in the error raised when the buffer does not hold exactly
    ``count`` length-prefixed elements.
    """
    view = memoryview(buffer)
    if count > len(view) // 4:
        # Checked before allocating: a tiny body must not make the server allocate a huge
        # object array for a shape it cannot fill.
        raise invalid_arg(f"{what}: {count} BYTES elements need at least {4 * count} bytes "
                          f"(a 4-byte length prefix each), got {len(view)}")
    out = np.empty(count, dtype=object)
    offset, end = 0, len(view)
    for i in range(count):
        if offset + 4 > end:
            raise invalid_arg(
                f"{what}: BYTES data ends after {i} of {count} elements "
                f"(each element needs a 4-byte length prefix)"
            )
        (length,) = struct.unpack_from("<I", view, offset)
        offset += 4
        if offset + length > end:
            raise invalid_arg(
                f"{what}: BYTES element {i} declares {length} bytes but only "
                f"{end - offset} remain"
            )
        out[i] = bytes(view[offset : offset + length])
        offset += length
    if offset != end:
        raise invalid_arg(
            f"{what}: BYTES data holds {end - offset} bytes after the {count} expected elements"
        )
    return out


def element_count(shape: tuple[int, ...] | list[int]) -> int:
    return math.prod(shape)


def format_shape(shape: tuple[int, ...] | list[int]) -> str:
    """A shape as Triton's messages write it: ``[2,3]``."""
    return "[" + ",".join(str(d) for d in shape) + "]"
