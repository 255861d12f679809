"""``pb_utils.Tensor``: a named tensor over a numpy array (DLPack in and out), and the
unchecked constructor the server's inputs use. Re-exported by
``triton_python_backend_utils``."""

from __future__ import annotations

from typing import Any

import naiad_stub_dlpack as _dlpack
import numpy as np
from naiad_stub_dtypes import _DATATYPE_OF, _TRITON_CODES, NUMPY_DTYPES, _datatype_of
from naiad_stub_errors import TritonModelException


class Tensor:
    """A named tensor holding a numpy array (never copied unless it is not C-contiguous)."""

    __slots__ = ("_array", "_datatype", "_name")

    def __init__(self, name: str, numpy_array: Any) -> None:
        if not isinstance(name, (str, bytes)) or numpy_array is None:  # Triton: TypeError
            raise TypeError("Tensor(): expects a name (str) and a numpy array")
        if not name:
            raise TritonModelException("Tensor name cannot be an empty string.")
        array = numpy_array if type(numpy_array) is np.ndarray else np.asarray(numpy_array)
        datatype = _DATATYPE_OF.get(array.dtype)
        if datatype is None:
            datatype = _datatype_of(array.dtype)
            if datatype is None:
                raise TritonModelException("NumPy dtype is not supported.")
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
        self._name = name
        self._array = array
        self._datatype = datatype

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        """The numpy array itself (input arrays may be read-only: they view request bytes)."""
        return self._array

    def triton_dtype(self) -> int:
        """The TRITONSERVER_DataType number (``11`` for FP32, ``13`` for BYTES...)."""
        return _TRITON_CODES[self._datatype]

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def is_cpu(self) -> bool:
        return True

    def to_dlpack(self) -> Any:
        """A DLPack capsule sharing the data (a copy when the array is read-only, which
        DLPack 0.x cannot express)."""
        return self.__dlpack__()

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        if self._datatype == "BYTES":
            raise TritonModelException("DLPack does not have support for string tensors.")
        array = self._array
        if not array.flags.writeable:  # DLPack 0.x cannot say read-only: share a copy
            array = np.array(array, copy=True)
        if self._datatype == "BF16":  # numpy has no DLPack code for it (naiad_stub_dlpack)
            return _dlpack.bf16_capsule(array, stream=stream, **kwargs)
        return array.__dlpack__(stream=stream, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU, device 0

    @staticmethod
    def from_dlpack(name: str, dlpack_tensor: Any) -> Tensor:
        """A tensor from a DLPack capsule or an object with ``__dlpack__`` (CPU memory only)."""
        if not name:
            raise TritonModelException("Tensor name cannot be an empty string.")
        try:
            array = _dlpack.array_from_dlpack(dlpack_tensor, NUMPY_DTYPES["BF16"])
        except (BufferError, RuntimeError, TypeError, ValueError) as exc:
            raise TritonModelException(
                f"Tensor.from_dlpack('{name}'): {exc} (naiad's Python backend supports CPU "
                f"DLPack tensors only)") from exc
        return Tensor(name, array)

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, {self._datatype}, shape={list(self._array.shape)})"


def _input_tensor(name: str, array: np.ndarray, datatype: str) -> Tensor:
    """A tensor over one of the server's input arrays, made without any checks."""
    tensor = _new_tensor(Tensor)
    tensor._name = name
    tensor._array = array
    tensor._datatype = datatype
    return tensor


_new_tensor = object.__new__
