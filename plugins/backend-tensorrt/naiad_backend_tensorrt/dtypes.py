"""TensorRT data types and Triton config data types, mapped by name.

TensorRT's ``trt.DataType`` members are named here as strings (``"FLOAT"``, ``"HALF"``), so
the tables need no tensorrt module; :func:`trt_type_name` turns a live member into its name.
The mapping is the one Triton's TensorRT backend uses.
"""

from __future__ import annotations

import numpy as np

from naiad.backend_utils import NUMPY_DTYPES, config_to_datatype
from naiad.errors import InferenceServerError, unsupported

TRT_TO_CONFIG: dict[str, str] = {
    "FLOAT": "TYPE_FP32",
    "HALF": "TYPE_FP16",
    "BF16": "TYPE_BF16",
    "INT8": "TYPE_INT8",
    "INT32": "TYPE_INT32",
    "INT64": "TYPE_INT64",
    "BOOL": "TYPE_BOOL",
    "UINT8": "TYPE_UINT8",
}
"""TensorRT ``DataType`` member name -> Triton config type name."""

CONFIG_TO_TRT: dict[str, str] = {config: trt for trt, config in TRT_TO_CONFIG.items()}
"""Triton config type name -> TensorRT ``DataType`` member name."""

NO_TRITON_TYPE: frozenset[str] = frozenset({"FP8", "INT4", "FP4", "E8M0"})
"""TensorRT types with no Triton datatype (8-bit float and sub-byte formats): an engine whose
I/O tensors use them cannot be served; quantize inside the network instead."""


def trt_type_name(dtype: object) -> str:
    """The member name of a ``trt.DataType`` (``trt.float32`` -> ``"FLOAT"``)."""
    name = getattr(dtype, "name", None)
    return name if isinstance(name, str) else str(dtype).rsplit(".", 1)[-1]


def config_type(trt_name: str, what: str) -> str:
    """The Triton config type of a TensorRT type, or an error naming ``what`` (a tensor)."""
    found = TRT_TO_CONFIG.get(trt_name)
    if found is None:
        raise _no_mapping(trt_name, what)
    return found


def trt_type(config_name: str, what: str) -> str:
    """The TensorRT type a Triton config type maps to, or an error naming ``what``."""
    found = CONFIG_TO_TRT.get(config_name)
    if found is None:
        raise unsupported(f"{what} has data_type {config_name}, which TensorRT has no type "
                          f"for; TensorRT engines take {', '.join(sorted(CONFIG_TO_TRT))}")
    return found


def numpy_dtype(trt_name: str, what: str) -> np.dtype:
    """The numpy dtype holding a tensor of TensorRT type ``trt_name`` on the host."""
    dtype = NUMPY_DTYPES[config_to_datatype(config_type(trt_name, what))]
    assert dtype is not None  # every mapped type has a fixed size
    return dtype


def _no_mapping(trt_name: str, what: str) -> InferenceServerError:
    reason = ("an 8-bit float or sub-byte format" if trt_name in NO_TRITON_TYPE
              else "a type this backend does not know")
    return unsupported(f"{what} has TensorRT type {trt_name}, {reason} with no Triton "
                       f"datatype; serve engines whose inputs and outputs use "
                       f"{', '.join(sorted(TRT_TO_CONFIG))}")
