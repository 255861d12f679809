"""``torch.export`` programs (``model.pt2``), with the batch dimension dynamic up to
max_batch_size; naiad's PyTorch backend serves them."""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING

from naiad_convert.formats.base import ExportSettings, Format, Runner
from naiad_convert.formats.torchscript import TRACE_BATCH, torch_runner
from naiad_convert.tensors import to_torch

if TYPE_CHECKING:
    from naiad_convert.samples import Samples
    from naiad_convert.source import Source


def batch_dim(settings: ExportSettings, name: str) -> object:
    import torch

    return torch.export.Dim(name, min=1, max=max(TRACE_BATCH, settings.max_batch_size))


def dynamic_shapes(samples: Samples, settings: ExportSettings) -> tuple | None:
    """One ``{0: Dim}`` per input when the model batches (the same Dim object: every input
    shares the batch size), else None (static shapes)."""
    if settings.max_batch_size <= 0:
        return None
    dim = batch_dim(settings, samples.batch_axis)
    return tuple({0: dim} for _ in samples.arrays)


class TorchExportFormat(Format):
    name = "torch-export"
    file_name = "model.pt2"
    platform = "pytorch_libtorch"
    description = "torch.export program"

    def unavailable(self, source: Source, settings: ExportSettings) -> str | None:
        from naiad_convert.source import EXPORT, PYTORCH

        if source.kind not in (PYTORCH, EXPORT):
            return f"torch.export needs an nn.Module; the source is a {source.kind} model"
        return None

    def export(self, source: Source, samples: Samples, path: Path, settings: ExportSettings,
               previous: dict[str, Path]) -> None:
        import torch

        from naiad_convert.source import EXPORT

        if source.kind == EXPORT:
            program = source.model
        else:
            example = tuple(to_torch(a) for a in samples.at_batch(TRACE_BATCH).values())
            program = torch.export.export(source.model, example,
                                          dynamic_shapes=dynamic_shapes(samples, settings))
        buffer = io.BytesIO()  # through a buffer: torch.export.save wants a .pt2 path
        torch.export.save(program, buffer)
        path.write_bytes(buffer.getvalue())

    def load(self, path: Path, source: Source, settings: ExportSettings) -> Runner:
        import torch

        module = torch.export.load(str(path)).module()
        if settings.device != "cpu":
            module = module.to(settings.device)
        return torch_runner(module, source, settings.device)
