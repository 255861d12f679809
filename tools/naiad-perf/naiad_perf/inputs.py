"""The tensors the load sends: zeros, random values, or perf_analyzer's JSON input files.

A JSON file is ``{"data": [STEP, ...]}`` (each request takes the next step) or
``{"data": [[STEP, ...], [STEP, ...]]}`` (streams: one list per sequence, a sequence model's
requests walk one stream from its start to its end). A STEP maps each input to its values: a
flat or nested list, ``{"content": [...], "shape": [...]}``, or ``{"b64": "..."}`` (the raw
bytes of the tensor). ``validation_data`` is accepted and not checked.
"""

from __future__ import annotations

import base64
import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from naiad_perf.api import LoadSpec
from naiad_perf.model import ModelInfo, PerfError, TensorInfo

NUMPY_TYPES = {
    "BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32,
    "UINT64": np.uint64, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
    "INT64": np.int64, "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
}
# Random seed of the random data: the same run sends the same values.
RANDOM_SEED = 0


@dataclass(frozen=True)
class Tensor:
    """One input of one request, ready for the wire."""

    name: str
    datatype: str
    shape: tuple[int, ...]           # with the batch dimension when the model batches
    raw: bytes                       # V2 binary layout (BYTES: 4-byte length before each)


Step = tuple[Tensor, ...]


def serialize_bytes(items: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(item)) + item for item in items)


def _dims(spec: LoadSpec, model: ModelInfo, tensor: TensorInfo,
          given: list[int] | None = None) -> tuple[int, ...]:
    dims = tuple(spec.shapes.get(tensor.name, given if given is not None else tensor.dims))
    if any(d < 0 for d in dims):
        raise PerfError(f"input '{tensor.name}' of model '{model.name}' has variable dims "
                        f"{list(tensor.dims)}: give them with --shape {tensor.name}:"
                        f"{','.join('4' if d < 0 else str(d) for d in tensor.dims)}")
    return dims


def _batched(model: ModelInfo, spec: LoadSpec, dims: tuple[int, ...], raw: bytes,
             datatype: str) -> tuple[tuple[int, ...], bytes]:
    """The shape and bytes of a request: the element repeated over the batch."""
    if model.max_batch_size == 0:
        return dims, raw
    return (spec.batch_size, *dims), raw * spec.batch_size


def _generated(spec: LoadSpec, model: ModelInfo, rng: np.random.Generator) -> Step:
    tensors = []
    for info in model.inputs:
        dims = _dims(spec, model, info)
        count = int(np.prod(dims)) if dims else 1
        if info.datatype == "BYTES":
            if spec.input_data == "zero":
                items = [b"0" * spec.string_length] * count
            else:
                letters = rng.integers(ord("a"), ord("z") + 1, size=(count, spec.string_length))
                items = [bytes(row.astype(np.uint8)) for row in letters]
            raw = serialize_bytes(items)
        elif info.datatype == "BF16":
            raw = bytes(2 * count)
        else:
            dtype = NUMPY_TYPES.get(info.datatype)
            if dtype is None:
                raise PerfError(f"input '{info.name}' of model '{model.name}': datatype "
                                f"{info.datatype} is not supported")
            if spec.input_data == "zero":
                array = np.zeros(count, dtype)
            elif np.issubdtype(dtype, np.floating):
                array = rng.random(count).astype(dtype)
            elif dtype is np.bool_:
                array = rng.integers(0, 2, count).astype(dtype)
            else:
                array = rng.integers(0, 100, count).astype(dtype)
            raw = array.tobytes()
        shape, raw = _batched(model, spec, dims, raw, info.datatype)
        tensors.append(Tensor(info.name, info.datatype, shape, raw))
    return tuple(tensors)


def _flatten(values: Any) -> list[Any]:
    if isinstance(values, list):
        return [x for v in values for x in _flatten(v)]
    return [values]


def _from_json(spec: LoadSpec, model: ModelInfo, info: TensorInfo, value: Any,
               where: str) -> Tensor:
    given: list[int] | None = None
    if isinstance(value, dict) and "b64" in value:
        raw = base64.b64decode(value["b64"])
        if info.datatype == "BYTES":
            raw = serialize_bytes([raw])
        given = value.get("shape")
        if given is None and info.datatype != "BYTES":
            itemsize = np.dtype(NUMPY_TYPES.get(info.datatype, np.uint8)).itemsize
            given = [len(raw) // itemsize]
        dims = _dims(spec, model, info, given or [1])
    else:
        if isinstance(value, dict):
            if "content" not in value:
                raise PerfError(f"{where}: input '{info.name}' needs a list, "
                                f"{{\"content\": ..., \"shape\": ...}} or {{\"b64\": ...}}")
            given = value.get("shape")
            value = value["content"]
        items = _flatten(value)
        dims = _dims(spec, model, info, given if given is not None else
                     ([len(items)] if any(d < 0 for d in info.dims) and len(info.dims) == 1
                      else None))
        if int(np.prod(dims)) != len(items):
            raise PerfError(f"{where}: input '{info.name}' has {len(items)} values, its "
                            f"shape {list(dims)} needs {int(np.prod(dims))}")
        if info.datatype == "BYTES":
            raw = serialize_bytes([str(x).encode() if not isinstance(x, bytes) else x
                                   for x in items])
        else:
            dtype = NUMPY_TYPES.get(info.datatype)
            if dtype is None:
                raise PerfError(f"{where}: datatype {info.datatype} of '{info.name}' "
                                f"cannot be read from JSON")
            raw = np.asarray(items, dtype=dtype).tobytes()
    shape, raw = _batched(model, spec, dims, raw, info.datatype)
    return Tensor(info.name, info.datatype, shape, raw)


def _json_streams(spec: LoadSpec, model: ModelInfo, path: Path) -> list[list[Step]]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PerfError(f"--input-data {path}: {exc}") from exc
    data = document.get("data") if isinstance(document, dict) else None
    if not isinstance(data, list) or not data:
        raise PerfError(f"--input-data {path}: expected {{\"data\": [...]}} with at least "
                        f"one step")
    streams = data if all(isinstance(s, list) for s in data) else [data]
    result = []
    for s, stream in enumerate(streams):
        steps = []
        for i, step in enumerate(stream):
            where = f"--input-data {path}: stream {s} step {i}"
            if not isinstance(step, dict):
                raise PerfError(f"{where}: expected an object of inputs")
            missing = [t.name for t in model.inputs if t.name not in step]
            if missing:
                raise PerfError(f"{where}: no value for input(s) {', '.join(missing)} of "
                                f"model '{model.name}'")
            steps.append(tuple(_from_json(spec, model, t, step[t.name], where)
                               for t in model.inputs))
        if not steps:
            raise PerfError(f"--input-data {path}: stream {s} is empty")
        result.append(steps)
    return result


def build_streams(spec: LoadSpec, model: ModelInfo) -> list[list[Step]]:
    """The data the load walks: one or more streams of steps."""
    if spec.input_data in ("zero", "random"):
        rng = np.random.default_rng(RANDOM_SEED)
        return [[_generated(spec, model, rng)]]
    path = Path(spec.input_data)
    if path.is_dir():
        raise PerfError(f"--input-data {path}: a folder of raw files is not supported; "
                        f"use zero, random or a JSON file")
    if not path.is_file():
        raise PerfError(f"--input-data {spec.input_data}: expected zero, random or a JSON "
                        f"file that exists")
    return _json_streams(spec, model, path)
