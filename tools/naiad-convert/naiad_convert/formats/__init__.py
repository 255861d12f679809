"""The target formats, one module each, in the order a run tries them (TensorRT builds from
the ONNX export, so it comes after it)."""

from __future__ import annotations

from naiad_convert.formats.base import ExportSettings, Format, Runner
from naiad_convert.formats.export import TorchExportFormat
from naiad_convert.formats.onnx import OnnxFormat
from naiad_convert.formats.tensorrt import TensorRTFormat
from naiad_convert.formats.torchscript import ScriptFormat, TraceFormat

ALL_FORMATS: tuple[Format, ...] = (TraceFormat(), ScriptFormat(), TorchExportFormat(),
                                   OnnxFormat(), TensorRTFormat())
FORMAT_NAMES = tuple(f.name for f in ALL_FORMATS)


def format_named(name: str) -> Format:
    for candidate in ALL_FORMATS:
        if candidate.name == name:
            return candidate
    raise KeyError(name)


__all__ = ["ALL_FORMATS", "FORMAT_NAMES", "ExportSettings", "Format", "Runner", "format_named"]
