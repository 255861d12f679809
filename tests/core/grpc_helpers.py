"""The gRPC end-to-end tests' repository, built from the models in tests/zoo.py: add_sub,
one identity model per datatype, a batching identity, a model that raises in execute and one
that fails to load."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import ml_dtypes
import numpy as np
from zoo import (
    ADD_SUB_CONFIG,
    ADD_SUB_PY,
    BROKEN_INIT_PY,
    IDENTITY_PY,
    RAISES_PY,
    identity_config,
    write_model,
)

# V2 datatype -> numpy dtype of the test data (BYTES: object arrays of bytes)
DATATYPES = {
    "BOOL": np.bool_,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BF16": ml_dtypes.bfloat16,
    "BYTES": np.object_,
}

def config_type(datatype: str) -> str:
    return "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"


def identity_name(datatype: str) -> str:
    return f"identity_{datatype.lower()}"


def write_repository(root: Path, only: Collection[str] | None = None) -> Path:
    """The test repository under ``root``; returns its path. ``only``: the names of the
    models to write, for a module that uses a few (each Python model is a worker process
    of every server started on the repository: about 0.6 s of CPU each)."""
    repo = root / "models"
    models = {
        "add_sub": (ADD_SUB_CONFIG, ADD_SUB_PY),
        **{identity_name(datatype): (identity_config(identity_name(datatype),
                                                     config_type(datatype)), IDENTITY_PY)
           for datatype in DATATYPES},
        "identity_batch": (identity_config("identity_batch", "TYPE_FP32", 8), IDENTITY_PY),
        "counted": (identity_config("counted", "TYPE_INT32"), IDENTITY_PY),
        "raises": (identity_config("raises", "TYPE_FP32", dims="4"), RAISES_PY),
        "broken": (identity_config("broken", "TYPE_FP32", dims="4"), BROKEN_INIT_PY),
    }
    unknown = set(only or ()) - models.keys()
    assert not unknown, f"no such model in the gRPC test repository: {sorted(unknown)}"
    for name, (config, model_py) in models.items():
        if only is None or name in only:
            write_model(repo, name, config, model_py)
    return repo


def sample(datatype: str, shape: tuple[int, ...] = (2, 3)) -> np.ndarray:
    """Test data of ``datatype`` with awkward values (extremes, non-UTF-8 bytes)."""
    count = int(np.prod(shape))
    if datatype == "BYTES":
        values = [b"", b"hello", "wörld".encode(), b"\xff\x00\xfe"] * count
        return np.array(values[:count], dtype=np.object_).reshape(shape)
    if datatype == "BOOL":
        return (np.arange(count) % 3 == 0).reshape(shape)
    dtype = np.dtype(DATATYPES[datatype])
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        values = [info.min, info.max, 0, 1, info.max // 3, info.min // 7 if info.min else 7]
        return np.array((values * count)[:count], dtype=dtype).reshape(shape)
    values = [1.5, -2.25, 0.0, 1024.0, -0.125, 3.0]
    return np.array((values * count)[:count], dtype=np.float32).astype(dtype).reshape(shape)
