"""Sample inputs: from a ``.npz`` file, from perf_analyzer's JSON input file, or generated
from ``--input NAME:DATATYPE:DIMS`` (``x:FP32:batch,3,32,32``: the leading dimension written
as a name, or -1, is the batch axis).

Every check and timing runs on :class:`Samples`: arrays by input name, in the order the model
takes them, with the batch on axis 0 when the model batches.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from naiad_convert.errors import usage_error
from naiad_convert.tensors import TRITON_TO_NUMPY, TensorSpec, spec_of

DEFAULT_BATCH_AXIS = "batch"
GENERATED_ROWS = 4   # rows generated when only shapes are given
RANDOM_SEED = 0      # the same command generates the same samples


@dataclass(frozen=True)
class InputArg:
    """``--input NAME:DATATYPE:DIMS`` parsed; ``batch_axis`` is the batch dimension's name
    (None when the dims have none)."""

    name: str
    datatype: str
    dims: tuple[int, ...]     # without the batch axis
    batch_axis: str | None


def parse_input_arg(text: str) -> InputArg:
    """``NAME:DATATYPE:D1,D2,...``; a leading non-numeric dimension or -1 is the batch axis."""
    parts = text.rsplit(":", 2)
    if len(parts) != 3 or not parts[0]:
        raise usage_error(f"--input '{text}': expected NAME:DATATYPE:DIMS, like "
                          "x:FP32:batch,3,32,32")
    name, datatype, dims_text = parts
    datatype = datatype.upper().removeprefix("TYPE_")
    if datatype not in TRITON_TO_NUMPY:
        raise usage_error(f"--input '{text}': datatype '{datatype}' is not one of "
                          f"{', '.join(TRITON_TO_NUMPY)}")
    tokens = [t.strip() for t in dims_text.split(",") if t.strip()]
    batch_axis = None
    if tokens and (tokens[0] == "-1" or not tokens[0].lstrip("-").isdigit()):
        batch_axis = DEFAULT_BATCH_AXIS if tokens[0] == "-1" else tokens[0]
        tokens = tokens[1:]
    try:
        dims = tuple(int(t) for t in tokens)
    except ValueError:
        raise usage_error(f"--input '{text}': only the first dimension may be a name (the "
                          "batch axis); the others are sizes") from None
    if any(d < 1 for d in dims):
        raise usage_error(f"--input '{text}': dimensions after the batch axis must be sizes "
                          ">= 1 to generate samples (give a sample file for varying ones)")
    return InputArg(name, datatype, dims, batch_axis)


@dataclass
class Samples:
    """The sample inputs: ``arrays`` by name, batch on axis 0 when ``batched``."""

    arrays: dict[str, np.ndarray]
    batched: bool
    batch_axis: str = DEFAULT_BATCH_AXIS

    @property
    def rows(self) -> int:
        return next(iter(self.arrays.values())).shape[0] if self.batched else 1

    def specs(self) -> list[TensorSpec]:
        return [spec_of(name, array, self.batched) for name, array in self.arrays.items()]

    def reordered(self, names: Sequence[str]) -> Samples:
        return Samples({n: self.arrays[n] for n in names}, self.batched, self.batch_axis)

    def at_batch(self, size: int) -> dict[str, np.ndarray]:
        """A batch of ``size`` rows, cycling through the samples' rows (rows, not copies of
        one, so a format that mixes rows up in a batch is caught)."""
        if not self.batched:
            return dict(self.arrays)
        index = np.arange(size) % self.rows
        return {n: np.ascontiguousarray(a[index]) for n, a in self.arrays.items()}

    def row(self, i: int) -> dict[str, np.ndarray]:
        return {n: a[i:i + 1] for n, a in self.arrays.items()} if self.batched else self.arrays


def generate(args: Sequence[InputArg], rows: int = GENERATED_ROWS,
             seed: int = RANDOM_SEED) -> dict[str, np.ndarray]:
    """Random arrays for ``--input`` specs: floats in [-1, 1), integers in [0, 10), booleans;
    ``rows`` along the batch axis of the inputs that have one."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for arg in args:
        shape = ((rows,) if arg.batch_axis else ()) + arg.dims
        dtype = np.dtype(TRITON_TO_NUMPY[arg.datatype])
        if dtype.kind == "f":
            values = rng.uniform(-1.0, 1.0, shape)
        elif dtype.kind == "b":
            values = rng.integers(0, 2, shape)
        else:
            values = rng.integers(0, 10, shape)
        arrays[arg.name] = values.astype(dtype)
    return arrays


def load_npz(path: Path) -> dict[str, np.ndarray]:
    """The arrays of a ``.npz`` file (``np.savez``), in the file's order."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: np.asarray(data[name]) for name in data.files}
    except (OSError, ValueError) as exc:
        raise usage_error(f"--samples {path}: not a readable .npz file ({exc})") from None


def load_perf_json(path: Path, args: Sequence[InputArg]) -> dict[str, np.ndarray]:
    """perf_analyzer's ``--input-data`` JSON: ``{"data": [STEP, ...]}``, each STEP one row
    (a flat or nested list, ``{"content": [...], "shape": [...]}`` or ``{"b64": ...}``).
    Rows are stacked on a new batch axis. A flat list takes its shape and type from the
    matching ``--input`` (FP32 and the list's own length without one)."""
    try:
        data = json.loads(path.read_text())
        steps = data["data"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise usage_error(f"--samples {path}: not perf_analyzer's JSON input ({exc})") from None
    if steps and isinstance(steps[0], list):
        steps = [step for stream in steps for step in stream]
    if not steps:
        raise usage_error(f"--samples {path}: 'data' holds no step")
    declared = {arg.name: arg for arg in args}
    columns: dict[str, list[np.ndarray]] = {}
    for number, step in enumerate(steps):
        for name, value in step.items():
            columns.setdefault(name, []).append(
                _json_value(path, number, name, value, declared.get(name)))
    try:
        return {name: np.stack(rows) for name, rows in columns.items()}
    except ValueError as exc:
        raise usage_error(f"--samples {path}: steps disagree in shape ({exc})") from None


def _json_value(path: Path, step: int, name: str, value: Any, arg: InputArg | None
                ) -> np.ndarray:
    dtype = np.dtype(TRITON_TO_NUMPY[arg.datatype]) if arg else np.dtype(np.float32)
    shape: tuple[int, ...] | None = arg.dims if arg else None
    if isinstance(value, dict) and "b64" in value:
        flat = np.frombuffer(base64.b64decode(value["b64"]), dtype=dtype)
    else:
        if isinstance(value, dict):
            if "shape" in value:
                shape = tuple(int(d) for d in value["shape"])
            value = value.get("content")
        flat = np.asarray(value, dtype=dtype).reshape(-1)
    try:
        return flat.reshape(shape if shape is not None else flat.shape)
    except ValueError:
        raise usage_error(f"--samples {path}: step {step}, input '{name}': {flat.size} values "
                          f"do not fill the shape {list(shape or ())}") from None


def load_samples(path: Path | None, args: Sequence[InputArg], batched: bool) -> Samples:
    """The samples a run checks and times: from a file when given, else generated from
    ``args``. ``batched``: the model batches (max_batch_size > 0), so every input needs a
    batch axis."""
    if path is not None:
        if not path.is_file():
            raise usage_error(f"--samples {path}: no such file")
        arrays = load_npz(path) if path.suffix == ".npz" else load_perf_json(path, args)
    elif args:
        arrays = generate(args)
    else:
        raise usage_error("no sample inputs: give --samples FILE (.npz or perf_analyzer JSON) "
                          "or --input NAME:DATATYPE:DIMS for each input")
    if not arrays:
        raise usage_error(f"--samples {path}: holds no array")
    axis_names = {a.batch_axis for a in args if a.batch_axis}
    if batched:
        missing = [a.name for a in args if a.batch_axis is None and path is None]
        if missing:
            raise usage_error(f"input '{missing[0]}' has no batch axis: write it first "
                              f"(batch,{','.join(map(str, args[0].dims))}) or pass "
                              "--max-batch-size 0 for a model that does not batch")
        rows = {a.shape[0] if a.ndim else 0 for a in arrays.values()}
        if 0 in rows or len(rows) != 1:
            raise usage_error("the sample inputs disagree on the batch axis (axis 0): "
                              + ", ".join(f"{n} {list(a.shape)}" for n, a in arrays.items()))
    for name, array in arrays.items():
        spec_of(name, array, batched)  # refuses types Triton has no name for
    axis = axis_names.pop() if len(axis_names) == 1 else DEFAULT_BATCH_AXIS
    return Samples(arrays, batched, axis)
