"""TorchScript, by tracing (``torch.jit.trace`` on a batch of the samples) and by scripting
(``torch.jit.script``), served by naiad's PyTorch backend as ``model.pt``.

Tracing records one path through the code: a model whose control flow depends on values
traces without error and answers wrong on other inputs, which the correctness check catches.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from naiad_convert.formats.base import ExportSettings, Format, Runner
from naiad_convert.tensors import to_torch

if TYPE_CHECKING:
    from naiad_convert.samples import Samples
    from naiad_convert.source import Source

TRACE_BATCH = 2  # traced on a batch of two, so a size of 1 is never baked in as a constant


def torch_runner(module: object, source: Source, device: str) -> Runner:
    import torch

    def run(inputs: dict) -> dict:
        with torch.inference_mode():
            result = module(*(to_torch(a).to(device) for a in inputs.values()))  # type: ignore[operator]
        return source.name_outputs(result)

    return run


class _TorchScriptFormat(Format):
    file_name = "model.pt"
    platform = "pytorch_libtorch"

    def load(self, path: Path, source: Source, settings: ExportSettings) -> Runner:
        import torch

        module = torch.jit.load(str(path), map_location=settings.device).eval()
        return torch_runner(module, source, settings.device)


class TraceFormat(_TorchScriptFormat):
    name = "torchscript-trace"
    description = "TorchScript by torch.jit.trace"

    def unavailable(self, source: Source, settings: ExportSettings) -> str | None:
        from naiad_convert.source import PYTORCH

        if source.kind != PYTORCH:
            return f"tracing needs an nn.Module; the source is a {source.kind} model"
        return None

    def export(self, source: Source, samples: Samples, path: Path, settings: ExportSettings,
               previous: dict[str, Path]) -> None:
        import torch

        example = tuple(to_torch(a) for a in samples.at_batch(TRACE_BATCH).values())
        with torch.no_grad():
            traced = torch.jit.trace(source.model, example, check_trace=False, strict=False)
        traced.save(str(path))


class ScriptFormat(_TorchScriptFormat):
    name = "torchscript-script"
    description = "TorchScript by torch.jit.script"

    def unavailable(self, source: Source, settings: ExportSettings) -> str | None:
        from naiad_convert.source import PYTORCH, TORCHSCRIPT

        if source.kind not in (PYTORCH, TORCHSCRIPT):
            return f"scripting needs an nn.Module; the source is a {source.kind} model"
        return None

    def export(self, source: Source, samples: Samples, path: Path, settings: ExportSettings,
               previous: dict[str, Path]) -> None:
        import torch

        from naiad_convert.source import TORCHSCRIPT

        scripted = source.model if source.kind == TORCHSCRIPT else torch.jit.script(source.model)
        scripted.save(str(path))
