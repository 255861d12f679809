"""Triton's data type numbers and names for ``pb_utils`` (``triton_to_numpy_type``,
``numpy_to_triton_type``, ``triton_string_to_numpy``) and its BYTES tensor (de)serializers,
over naiad's one datatype table (``naiad_stub_wire.NUMPY_DTYPES``). Re-exported by
``triton_python_backend_utils``."""

from __future__ import annotations

from typing import Any

import naiad_stub_wire as _wire
import numpy as np

NUMPY_DTYPES = _wire.NUMPY_DTYPES

TRITON_STRING_TO_NUMPY = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}

# TRITONSERVER_DataType values, the numbers triton_dtype() and the converters use.
_TRITON_CODES = {
    "BOOL": 1, "UINT8": 2, "UINT16": 3, "UINT32": 4, "UINT64": 5, "INT8": 6, "INT16": 7,
    "INT32": 8, "INT64": 9, "FP16": 10, "FP32": 11, "FP64": 12, "BYTES": 13, "BF16": 14,
}
_CODE_TO_NUMPY: dict[int, Any] = {
    code: (np.object_ if NUMPY_DTYPES[name] is None else NUMPY_DTYPES[name].type)  # type: ignore[union-attr]
    for name, code in _TRITON_CODES.items() if name in NUMPY_DTYPES
}
# numpy dtype -> V2 datatype name, from naiad's one datatype table.
_DATATYPE_OF: dict[np.dtype, str] = {
    dtype: name for name, dtype in NUMPY_DTYPES.items() if dtype is not None
}
_DATATYPE_OF[np.dtype(object)] = "BYTES"


def triton_to_numpy_type(data_type: int) -> Any:
    """TRITONSERVER_DataType number -> numpy type (None when unknown)."""
    return _CODE_TO_NUMPY.get(data_type)


def numpy_to_triton_type(data_type: Any) -> int | None:
    """numpy dtype or type -> TRITONSERVER_DataType number (None when unsupported)."""
    try:
        dtype = np.dtype(data_type)
    except TypeError:
        return None
    name = _datatype_of(dtype)
    return None if name is None else _TRITON_CODES[name]


def triton_string_to_numpy(triton_type_string: str) -> Any:
    """``"TYPE_FP32"`` -> ``np.float32`` (config data_type name -> numpy type)."""
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def _datatype_of(dtype: np.dtype) -> str | None:
    name = _DATATYPE_OF.get(dtype)
    if name is None and dtype.kind == "S":  # np.bytes_ arrays are BYTES, as in Triton
        return "BYTES"
    return name


# --- BYTES tensors ----------------------------------------------------------------------


def serialize_byte_tensor(input_tensor: np.ndarray) -> bytes | tuple[()] | None:
    """A BYTES tensor (object or ``np.bytes_`` array) -> each element as a 4-byte
    little-endian length and its bytes, in C order. Non-bytes objects are ``str()``-ed and
    UTF-8 encoded. ``()`` for an empty tensor, None for other dtypes (as Triton)."""
    if input_tensor.size == 0:
        return ()
    if input_tensor.dtype != np.object_ and input_tensor.dtype.type != np.bytes_:
        return None
    return _wire.serialize_bytes(input_tensor)


def deserialize_bytes_tensor(encoded_tensor: bytes) -> np.ndarray:
    """The serialized form of a BYTES tensor -> a flat object array of ``bytes``."""
    return _wire.deserialize_bytes(encoded_tensor)
