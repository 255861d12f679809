"""What every target format provides: whether it fits this source and machine, how to write
the model file, and how to run the written file (the checks and timings run what was
written, never the object in memory)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from naiad_convert.samples import Samples
    from naiad_convert.source import Source

Runner = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]
"""Inputs by name -> outputs by name, numpy on both sides."""


@dataclass(frozen=True)
class ExportSettings:
    max_batch_size: int          # 0: the model does not batch
    opset: int                   # ONNX opset
    onnx_exporter: str           # "dynamo" | "torchscript"
    device: str = "cpu"          # where torch formats run when checked and timed
    tensorrt_fp16: bool = False
    tensorrt_workspace_bytes: int = 1 << 30
    tensorrt_opt_batch: int = 0  # the profile's optimum (0: max_batch_size)

    def to_json(self) -> dict[str, object]:
        return dict(self.__dict__)


class Format:
    """One target format. ``platform`` and ``file_name`` are what config.pbtxt names."""

    name = ""
    file_name = ""
    platform = ""
    description = ""

    def unavailable(self, source: Source, settings: ExportSettings) -> str | None:
        """Why this format does not fit the source or the machine (the report's 'skipped'
        reason), or None when it does."""
        return None

    def export(self, source: Source, samples: Samples, path: Path, settings: ExportSettings,
               previous: dict[str, Path]) -> None:
        """Write the model file at ``path``. ``previous``: files of the formats that passed
        before this one, by format name (TensorRT builds from the ONNX one). Raises
        whatever the exporter raises: the run records it as this format's failure."""
        raise NotImplementedError

    def load(self, path: Path, source: Source, settings: ExportSettings) -> Runner:
        """A callable that runs the written file."""
        raise NotImplementedError
