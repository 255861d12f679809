"""PyTorch models for the backend tests, written into a repository at test time, and the
helpers that build a backend's context and requests in-process.

Each writer saves a real TorchScript (``torch.jit.script`` / ``trace`` + ``save``) or
torch.export (``torch.export.save``) file of a module the test keeps, so the test
computes the expected output by running the framework directly.
"""

from __future__ import annotations

import io
import textwrap
from pathlib import Path

import numpy as np
import torch
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from naiad.datatypes import numpy_to_datatype
from naiad.types import InferenceRequest, InstanceInfo, ModelContext, RequestedOutput, Tensor

SEED = 20240601

# torch 2.13 deprecates torch.jit (script, trace, load...); TorchScript files are what Triton
# users have, so the tests keep writing and loading them (test modules apply this filter).
SCRIPT_IS_DEPRECATED = r"ignore:`torch\.jit\.\w+` is deprecated:DeprecationWarning"


class AddSub(torch.nn.Module):
    """Triton's add_sub, with Triton's PyTorch names: INPUT__0/1 -> OUTPUT__0/1."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a + b, a - b


class ScaleAdd(torch.nn.Module):
    """Named arguments: config inputs are called ``x`` and ``y`` (FORWARD_ARGUMENT)."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x * 2 + y


class DictModel(torch.nn.Module):
    """A Dict[str, Tensor] in, a Dict[str, Tensor] out: tensors found by name."""

    def forward(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {"doubled": inputs["a"] * 2, "total": inputs["a"] + inputs["b"]}


class Guarded(torch.nn.Module):
    """Raises for inputs whose sum is over 1000: a forward() that fails on some requests."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool(x.sum() > 1000.0):
            raise RuntimeError("sum over 1000")
        return x * 3


class WrongDtype(torch.nn.Module):
    """Returns FP64 where its config declares FP32."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.double()


class Identity(torch.nn.Module):
    """The conformance kit's identity model (INPUT__0 is a valid Python name)."""

    def forward(self, INPUT__0: torch.Tensor) -> torch.Tensor:
        return INPUT__0


def mlp() -> torch.nn.Module:
    """A small MLP with fixed weights: [batch, 4] -> [batch, 3]."""
    torch.manual_seed(SEED)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(),
                               torch.nn.Linear(8, 3)).eval()


def write(repo: Path, name: str, config: str | None, save: object, filename: str = "model.pt"
          ) -> Path:
    """``repo/name/config.pbtxt`` (unless None) and the model file in version 1 (``save``
    is a scripted module or an ExportedProgram); returns the model file."""
    version_dir = repo / name / "1"
    version_dir.mkdir(parents=True)
    if config is not None:
        (repo / name / "config.pbtxt").write_text(textwrap.dedent(config))
    path = version_dir / filename
    if isinstance(save, torch.export.ExportedProgram):
        # Through a buffer: torch warns when a path does not end in .pt2.
        buffer = io.BytesIO()
        torch.export.save(save, buffer)
        path.write_bytes(buffer.getvalue())
    else:
        save.save(str(path))  # type: ignore[attr-defined]
    return path


def export_mlp(batch_max: int = 64) -> torch.export.ExportedProgram:
    """The MLP as a torch.export program with a dynamic batch dimension."""
    batch = torch.export.Dim("batch", min=1, max=batch_max)
    return torch.export.export(mlp(), (torch.zeros(2, 4),), dynamic_shapes=({0: batch},))


def tensor_config(name: str, datatype: str, dims: list[int]) -> str:
    return f'{{ name: "{name}" data_type: TYPE_{datatype} dims: {dims} }}'


# --- in-process helpers: a backend's context, instance info and requests -----------------


def parse_config(text: str) -> ModelConfig:
    return text_format.Parse(textwrap.dedent(text), ModelConfig())


def context_for(model_dir: Path, config: ModelConfig, version: int = 1) -> ModelContext:
    return ModelContext(
        name=model_dir.name,
        version=version,
        config=config,
        model_dir=model_dir,
        version_dir=model_dir / str(version),
        repository=model_dir.parent,
        backend_config={},
    )


def instance_info(model: str, index: int = 0, kind: str = "KIND_CPU",
                  device_id: int = 0) -> InstanceInfo:
    return InstanceInfo(name=f"{model}_0_{index}", kind=kind, device_id=device_id, index=index)


def request(model: str, inputs: dict[str, np.ndarray],
            outputs: list[str] | None = None) -> InferenceRequest:
    return InferenceRequest(
        model_name=model,
        model_version=1,
        inputs={name: Tensor(name, numpy_to_datatype(array.dtype), array.shape, array)
                for name, array in inputs.items()},
        requested_outputs=None if outputs is None else [RequestedOutput(o) for o in outputs],
    )
