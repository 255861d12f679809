"""ONNX element types and Triton datatypes, and the conversions ONNX Runtime needs.

ONNX Runtime's Python API names a tensor's type as a string (``tensor(float)``) and returns
string tensors as numpy object arrays of ``str``; naiad's BYTES tensors are object arrays of
``bytes``. BF16 has no numpy type ONNX Runtime knows, so BF16 tensors travel as ``OrtValue``s
built from (and read back into) their raw 16-bit words.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import numpy as np
import onnxruntime as ort

from naiad.backend_utils import NUMPY_DTYPES

# ``NodeArg.type`` -> the V2 datatype (config.pbtxt's TYPE_ name is ``datatype_to_config``).
ONNX_TO_DATATYPE: dict[str, str] = {
    "tensor(bool)": "BOOL",
    "tensor(uint8)": "UINT8",
    "tensor(uint16)": "UINT16",
    "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64",
    "tensor(int8)": "INT8",
    "tensor(int16)": "INT16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(float16)": "FP16",
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(bfloat16)": "BF16",
    "tensor(string)": "BYTES",
}

DATATYPE_TO_ONNX: dict[str, str] = {v: k for k, v in ONNX_TO_DATATYPE.items()}

# onnx.TensorProto.BFLOAT16 (the onnx package itself is not a dependency).
_ONNX_BFLOAT16 = 16
_UINT16 = np.dtype(np.uint16)
_BF16 = NUMPY_DTYPES["BF16"]


def datatype_of(onnx_type: str) -> str | None:
    """The V2 datatype of an ONNX Runtime type string, or None when Triton has none (maps,
    sequences, float8 and 4-bit types)."""
    return ONNX_TO_DATATYPE.get(onnx_type)


def dims_of(shape: Sequence[object]) -> list[int]:
    """ONNX Runtime's shape (ints, symbolic names or None) as config dims: -1 where the
    size is not fixed."""
    return [d if isinstance(d, int) and d >= 0 else -1 for d in shape]


class NotUtf8Error(ValueError):
    """A BYTES element that is not UTF-8 text; ``index`` is its flat position."""

    def __init__(self, index: int, error: UnicodeDecodeError) -> None:
        super().__init__(f"element {index} is not valid UTF-8 ({error.reason} at byte "
                         f"{error.start})")
        self.index = index


def bytes_to_strings(array: np.ndarray) -> np.ndarray:
    """A BYTES tensor (object array of bytes) as the object array of ``str`` ONNX Runtime
    takes. ONNX strings are UTF-8 text: ONNX Runtime would store ``str(b'..')`` for a bytes
    item and fails on text that is not UTF-8, so each item is decoded strictly here and an
    undecodable one raises :class:`NotUtf8Error` naming its position."""
    out = np.empty(array.shape, dtype=object)
    flat = out.reshape(-1)
    for index, item in enumerate(array.reshape(-1)):
        if not isinstance(item, (bytes, bytearray, memoryview)):
            flat[index] = item if isinstance(item, str) else str(item)
            continue
        try:
            flat[index] = bytes(item).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise NotUtf8Error(index, exc) from None
    return out


def strings_to_bytes(array: np.ndarray) -> np.ndarray:
    """An ONNX Runtime string output (object array of ``str``) as a BYTES tensor."""
    out = np.empty(array.shape, dtype=object)
    out.reshape(-1)[:] = [item.encode("utf-8") if isinstance(item, str) else bytes(item)
                          for item in array.reshape(-1)]
    return out


def bf16_to_ortvalue(array: np.ndarray) -> ort.OrtValue:
    """A BF16 numpy array as an OrtValue (ONNX Runtime has no numpy type for bfloat16)."""
    words = np.ascontiguousarray(array).view(_UINT16)
    return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(words, _ONNX_BFLOAT16)


def ortvalue_to_numpy(value: ort.OrtValue) -> np.ndarray:
    """An output OrtValue as a numpy array; BF16 outputs are copied out word by word, as
    ``OrtValue.numpy()`` cannot convert them."""
    if value.data_type() != "tensor(bfloat16)":
        return value.numpy()
    shape = tuple(value.shape())
    count = int(np.prod(shape, dtype=np.int64))
    if count == 0:
        return np.empty(shape, dtype=_BF16)
    buffer = (ctypes.c_uint16 * count).from_address(value.data_ptr())
    # Copied while ``value`` is alive: its memory goes when the OrtValue does.
    return np.ctypeslib.as_array(buffer).copy().view(_BF16).reshape(shape)
