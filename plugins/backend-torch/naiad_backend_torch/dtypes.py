"""V2 datatypes and torch dtypes, and moving arrays between numpy and torch without copies.

torch has every fixed-size V2 datatype (UINT16/32/64 since torch 2.3, with few operators of
their own). BF16 has no numpy dtype in numpy itself: naiad carries it as
``ml_dtypes.bfloat16``, which torch.from_numpy does not know, so the 2-byte payload crosses
as int16 and is reinterpreted on the other side (a view, never a round trip through float32).
BYTES has no tensor form in TorchScript and is refused when the model loads.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

TORCH_DTYPES: dict[str, torch.dtype] = {
    "BOOL": torch.bool,
    "UINT8": torch.uint8,
    "UINT16": torch.uint16,
    "UINT32": torch.uint32,
    "UINT64": torch.uint64,
    "INT8": torch.int8,
    "INT16": torch.int16,
    "INT32": torch.int32,
    "INT64": torch.int64,
    "FP16": torch.float16,
    "FP32": torch.float32,
    "FP64": torch.float64,
    "BF16": torch.bfloat16,
}
"""Every V2 datatype this backend serves, with its torch dtype (BYTES is not one)."""

DATATYPES: frozenset[str] = frozenset(TORCH_DTYPES)

_FROM_TORCH: dict[torch.dtype, str] = {v: k for k, v in TORCH_DTYPES.items()}
_BF16 = np.dtype(ml_dtypes.bfloat16)


def torch_to_datatype(dtype: torch.dtype) -> str | None:
    """The V2 datatype of a torch dtype, or None when V2 has none (complex, float8...)."""
    return _FROM_TORCH.get(dtype)


def to_tensor(array: np.ndarray) -> torch.Tensor:
    """A CPU tensor over ``array``'s memory (no copy), BF16 included.

    A read-only array (a view of the request's bytes) is copied first: torch tensors are
    always writable, and a model that updates its input in place must not write into memory
    the server does not own.
    """
    if not array.flags.writeable:
        array = array.copy()
    if array.dtype == _BF16:
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A numpy array over a CPU tensor's memory (no copy); BF16 becomes ml_dtypes.bfloat16."""
    if tensor.requires_grad:  # outside inference mode a model may return autograd tensors
        tensor = tensor.detach()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(_BF16)
    return tensor.numpy()
