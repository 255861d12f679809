"""Tensors as Triton's trace file shows them at level TENSORS.

Triton writes each value with C++'s stream defaults: integers in decimal, floating point
values with six significant digits (``%g``: ``0.1``, ``1e+06``, ``nan``), booleans as
``1``/``0``, each BYTES element between double quotes; FP16 and BF16 tensors get no data.
The shape is ``"1,16"``, the datatype its protocol name. One difference: Triton writes
INT8 and UINT8 values as raw characters (which can make the file unreadable JSON); naiad
writes them as numbers.

The record is made when the tensor is seen (a request's input may be a view of a shared
memory region its client reuses afterwards), only for requests traced at level TENSORS.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_NO_DATA = frozenset(("FP16", "BF16"))
_FLOATS = frozenset(("FP32", "FP64"))


def tensor_text(datatype: str, data: Any) -> str:
    """The comma-separated values of a tensor, as Triton's trace file writes them."""
    if datatype in _NO_DATA:
        return ""
    flat = np.asarray(data).reshape(-1)
    if datatype == "BYTES":
        return ",".join(f'"{_text(item)}"' for item in flat)
    if datatype == "BOOL":
        return ",".join("1" if item else "0" for item in flat.tolist())
    if datatype in _FLOATS:
        return ",".join(format(item, "g") for item in flat.tolist())
    return ",".join(str(item) for item in flat.tolist())


def _text(item: object) -> str:
    if isinstance(item, bytes | bytearray | memoryview):
        return bytes(item).decode("utf-8", errors="replace")
    return str(item)


def tensor_record(name: str, datatype: str, shape: tuple[int, ...], data: Any
                  ) -> dict[str, str]:
    """``{"name", "data", "shape", "dtype"}`` of one tensor, in Triton's order."""
    return {"name": name, "data": tensor_text(datatype, data),
            "shape": ",".join(str(dim) for dim in shape), "dtype": datatype}
