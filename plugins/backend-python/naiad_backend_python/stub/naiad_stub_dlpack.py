"""BF16 tensors through DLPack, which numpy cannot do by itself.

numpy's ``__dlpack__`` / ``from_dlpack`` know integers, floats and complex numbers only, so an
``ml_dtypes.bfloat16`` array cannot leave or enter numpy through DLPack. Triton's
``pb_utils.Tensor.to_dlpack`` / ``from_dlpack`` is *the* way a Python model handles BF16
(``as_numpy`` has no BF16), so naiad's must carry it: the array travels as 16-bit unsigned
integers and the capsule's DLDataType is rewritten to ``kDLBfloat`` (out) or back to
``kDLUInt`` (in) before anyone else reads it. The bytes are shared, never copied.

Only the capsule header is touched (the ``DLTensor`` struct, laid out as dlpack.h v0.8 and
v1.x define it); the producer's deleter and ``manager_ctx`` stay as they are.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

K_DL_UINT = 1
K_DL_BFLOAT = 4


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", _DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


_get_name = ctypes.pythonapi.PyCapsule_GetName
_get_name.restype = ctypes.c_char_p
_get_name.argtypes = [ctypes.py_object]
_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _dtype_of(capsule: Any) -> _DLDataType:
    """The DLDataType inside an unconsumed DLPack capsule (writable)."""
    name = _get_name(capsule)
    if name == b"dltensor":
        tensor = _DLTensor.from_address(_get_pointer(capsule, name))
    elif name == b"dltensor_versioned":
        tensor = _DLManagedTensorVersioned.from_address(_get_pointer(capsule, name)).dl_tensor
    else:
        raise BufferError(f"not an unconsumed DLPack capsule (capsule name {name!r})")
    return tensor.dtype


def bf16_capsule(array: np.ndarray, **kwargs: Any) -> Any:
    """A DLPack capsule of kDLBfloat16 elements over ``array`` (an ml_dtypes.bfloat16 array)."""
    capsule = array.view(np.uint16).__dlpack__(**kwargs)
    dtype = _dtype_of(capsule)
    dtype.code = K_DL_BFLOAT
    return capsule


class _Capsule:
    __slots__ = ("capsule",)

    def __init__(self, capsule: Any) -> None:
        self.capsule = capsule

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        return self.capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)


def array_from_dlpack(source: Any, bfloat16: Any) -> np.ndarray:
    """A numpy array over a DLPack capsule or an object with ``__dlpack__``; BF16 elements
    come back as ``bfloat16`` (the ml_dtypes type), everything else as numpy reads it."""
    capsule = source.__dlpack__() if hasattr(source, "__dlpack__") else source
    dtype = _dtype_of(capsule)
    if dtype.code == K_DL_BFLOAT and dtype.bits == 16 and dtype.lanes == 1:
        dtype.code = K_DL_UINT
        return np.from_dlpack(_Capsule(capsule)).view(bfloat16)
    return np.from_dlpack(_Capsule(capsule))
