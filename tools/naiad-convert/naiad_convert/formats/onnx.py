"""ONNX (``torch.onnx.export``) with a dynamic batch axis and a chosen opset, checked and
timed in onnxruntime and served by naiad's ONNX Runtime backend as ``model.onnx``.

Two exporters: ``dynamo`` (torch.export then onnxscript, torch's default since 2.9) and
``torchscript`` (the tracing exporter: quicker, and the only one for a TorchScript source).
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from naiad_convert.formats.base import ExportSettings, Format, Runner
from naiad_convert.formats.export import dynamic_shapes
from naiad_convert.formats.torchscript import TRACE_BATCH
from naiad_convert.tensors import to_torch

if TYPE_CHECKING:
    from naiad_convert.samples import Samples
    from naiad_convert.source import Source

DEFAULT_OPSET = 18
EXPORTERS = ("dynamo", "torchscript")


def default_exporter() -> str:
    """dynamo when onnxscript (which it needs) is installed, else the tracing exporter."""
    try:
        import onnxscript  # noqa: F401
    except ImportError:
        return "torchscript"
    return "dynamo"


def session(path: Path, device: str = "cpu") -> Any:
    import onnxruntime as ort

    providers = ["CPUExecutionProvider"]
    if device.startswith("cuda") and "CUDAExecutionProvider" in ort.get_available_providers():
        providers.insert(0, "CUDAExecutionProvider")
    return ort.InferenceSession(str(path), providers=providers)


def run_onnx_session(sess: Any, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, inputs), strict=True))


class OnnxFormat(Format):
    name = "onnx"
    file_name = "model.onnx"
    platform = "onnxruntime_onnx"
    description = "ONNX, run by onnxruntime"

    def unavailable(self, source: Source, settings: ExportSettings) -> str | None:
        from naiad_convert.source import EXPORT, ONNX, TORCHSCRIPT

        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            return "onnxruntime is not installed (pip install 'naiad-convert[onnx]')"
        if source.kind == ONNX:
            return None
        try:
            import onnx  # noqa: F401
        except ImportError:
            return "torch.onnx.export needs the onnx package (pip install onnx)"
        if settings.onnx_exporter == "dynamo" and source.kind == TORCHSCRIPT:
            return ("the dynamo exporter takes an nn.Module or a torch.export program, not "
                    "TorchScript: use --onnx-exporter torchscript")
        if settings.onnx_exporter == "torchscript" and source.kind == EXPORT:
            return ("the torchscript exporter cannot read a torch.export program: use "
                    "--onnx-exporter dynamo")
        if settings.onnx_exporter == "dynamo" and default_exporter() != "dynamo":
            return "the dynamo exporter needs onnxscript (pip install onnxscript)"
        return None

    def export(self, source: Source, samples: Samples, path: Path, settings: ExportSettings,
               previous: dict[str, Path]) -> None:
        import torch

        from naiad_convert.source import EXPORT, ONNX

        if source.kind == ONNX:
            shutil.copyfile(source.model, path)
            return
        example = tuple(to_torch(a) for a in samples.at_batch(TRACE_BATCH).values())
        names = list(samples.arrays)
        kwargs: dict[str, Any] = {"input_names": names, "output_names": source.output_names,
                                  "opset_version": settings.opset}
        if settings.onnx_exporter == "dynamo":
            kwargs["dynamo"] = True
            kwargs["dynamic_shapes"] = dynamic_shapes(samples, settings)
            kwargs["external_data"] = False
            kwargs["verbose"] = False  # its step-by-step lines would bury naiad convert's
        else:
            kwargs["dynamo"] = False
            if settings.max_batch_size > 0:
                axis = {0: samples.batch_axis}
                kwargs["dynamic_axes"] = {n: axis for n in (*names, *source.output_names)}
        model = source.model.module() if source.kind == EXPORT else source.model
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the tracing exporter's deprecation notice
            torch.onnx.export(model, example, str(path), **kwargs)

    def load(self, path: Path, source: Source, settings: ExportSettings) -> Runner:
        sess = session(path, settings.device)
        return lambda inputs: run_onnx_session(sess, inputs)
