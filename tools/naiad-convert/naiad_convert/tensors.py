"""Tensor descriptions shared by every step: a name, Triton's datatype and the dims without
the batch dimension, and the mappings between Triton, numpy and torch types."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

TRITON_TO_NUMPY: dict[str, type] = {
    "BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32,
    "UINT64": np.uint64, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
    "INT64": np.int64, "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
}
NUMPY_TO_TRITON = {np.dtype(v): k for k, v in TRITON_TO_NUMPY.items()}


def triton_dtype(array: np.ndarray) -> str:
    """Triton's datatype of an array (``FP32``...); ValueError for types Triton lacks."""
    try:
        return NUMPY_TO_TRITON[array.dtype]
    except KeyError:
        raise ValueError(f"dtype {array.dtype} has no Triton datatype (one of "
                         f"{', '.join(TRITON_TO_NUMPY)})") from None


@dataclass(frozen=True)
class TensorSpec:
    """One input or output as config.pbtxt describes it: dims leave out the batch
    dimension when the model batches; -1 is a dimension that varies."""

    name: str
    datatype: str
    dims: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "datatype": self.datatype, "dims": list(self.dims)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TensorSpec:
        return cls(data["name"], data["datatype"], tuple(data["dims"]))


def spec_of(name: str, array: np.ndarray, batched: bool) -> TensorSpec:
    dims = array.shape[1:] if batched else array.shape
    return TensorSpec(name, triton_dtype(array), tuple(int(d) for d in dims))


def to_torch(array: np.ndarray) -> Any:
    import torch

    return torch.from_numpy(np.ascontiguousarray(array))


def to_numpy(value: Any) -> np.ndarray:
    """A torch tensor (any device) or array-like as a numpy array."""
    if hasattr(value, "detach"):
        return value.detach().cpu().numpy()
    return np.asarray(value)
