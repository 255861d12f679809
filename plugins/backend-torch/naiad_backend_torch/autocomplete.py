"""Filling a partial config.pbtxt from the model file, where the file says enough.

TorchScript keeps no datatypes or shapes for a model's inputs and outputs (nor does Triton's
PyTorch backend auto-complete them): a ``model.pt`` needs its inputs and outputs in
config.pbtxt. A torch.export program (``model.pt2``) does record them, so for it:

- ``input``: one per ``forward()`` argument, named after it (Triton's FORWARD_ARGUMENT
  convention), with its datatype and dims (-1 where the export left a dimension dynamic);
- ``output``: ``OUTPUT__<i>`` for each result, or the keys of a returned dictionary;
- ``max_batch_size``: when the config sets neither it nor any tensor, and the leading dim
  of every input and output is dynamic, Triton's ``default-max-batch-size`` (4, or
  ``--backend-config pytorch,default-max-batch-size=N``), capped at the export's upper bound
  for that dimension; then ``dynamic_batching {}`` too, when the config picks no scheduler
  and max_batch_size > 1 (what Triton's ONNX and TensorFlow backends do).

Inputs are filled only when the config lists none, outputs likewise.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig

from naiad.backend_utils import datatype_to_config, model_file_path, version_folders
from naiad.errors import invalid_arg
from naiad_backend_torch.dtypes import torch_to_datatype
from naiad_backend_torch.loading import (
    EXPORT_FILENAME,
    TORCHSCRIPT_FILENAME,
    exported_argument_names,
    is_export_file,
    load_exported_program,
)

log = logging.getLogger("naiad.backend.pytorch")

DEFAULT_MAX_BATCH_SIZE = 4
"""Triton's ``default-max-batch-size`` backend setting when none is given."""


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """An input or output of an exported program, with its full shape (-1: dynamic)."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    batch_limit: int | None  # the upper bound of a dynamic leading dim, if finite


def auto_complete(config: ModelConfig, model_dir: Path, backend_config: dict[str, str]
                  ) -> list[str]:
    """Fill ``config`` in place from the newest version's model file; return the names of
    the top-level fields filled."""
    model = config.name or model_dir.name
    versions = version_folders(model_dir)
    if not versions:
        return []
    version_dir = versions[0]
    filled = []
    if not config.default_model_filename and not (version_dir / TORCHSCRIPT_FILENAME).exists() \
            and (version_dir / EXPORT_FILENAME).is_file():
        config.default_model_filename = EXPORT_FILENAME
        filled.append("default_model_filename")
    path = model_file_path(version_dir, config.default_model_filename or TORCHSCRIPT_FILENAME,
                           model)
    if config.input and config.output:
        return filled
    if not is_export_file(path) or not path.is_file():
        log.warning("model '%s': TorchScript records no input or output datatypes and shapes; "
                    "config.pbtxt must list them (auto-complete skipped)", model)
        return filled
    inputs, outputs = exported_io(load_exported_program(path, model), model)
    if config.max_batch_size == 0 and not config.input and not config.output:
        limit = _batch_limit(inputs + outputs, backend_config)
        if limit > 0:
            config.max_batch_size = limit
            filled.append("max_batch_size")
            if limit > 1 and not _has_scheduler(config):
                config.dynamic_batching.SetInParent()
                filled.append("dynamic_batching")
    batching = config.max_batch_size > 0
    if not config.input:
        _add(config.input, inputs, batching, model)
        filled.append("input")
    if not config.output:
        _add(config.output, outputs, batching, model)
        filled.append("output")
    return filled


def exported_io(program: torch.export.ExportedProgram, model: str
                ) -> tuple[list[TensorInfo], list[TensorInfo]]:
    """The user inputs and outputs of an exported program, with Triton-style names."""
    nodes = {node.name: node for node in program.graph.nodes}
    signature = program.graph_signature
    names = exported_argument_names(program, model)
    inputs = [_info(name, nodes[node], program, model)
              for name, node in zip(names, signature.user_inputs, strict=True)]
    out_spec = program.call_spec.out_spec
    user_outputs = list(signature.user_outputs)
    if out_spec is not None and out_spec.type is dict:
        output_names = [str(key) for key in out_spec.context]
    else:
        output_names = [f"OUTPUT__{i}" for i in range(len(user_outputs))]
    outputs = []
    for name, node in zip(output_names, user_outputs, strict=True):
        if node not in nodes:
            raise invalid_arg(f"model '{model}': cannot auto-complete output '{name}': the "
                              f"exported program returns a constant; list it in config.pbtxt")
        outputs.append(_info(name, nodes[node], program, model))
    return inputs, outputs


def _info(name: str, node: Any, program: torch.export.ExportedProgram, model: str
          ) -> TensorInfo:
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor):
        raise invalid_arg(f"model '{model}': cannot auto-complete '{name}': the exported "
                          f"program does not record it as a tensor; list it in config.pbtxt")
    datatype = torch_to_datatype(value.dtype)
    if datatype is None:
        raise invalid_arg(f"model '{model}': cannot auto-complete '{name}': torch dtype "
                          f"{value.dtype} has no V2 datatype")
    shape = tuple(d if isinstance(d, int) else -1 for d in value.shape)
    limit = None
    if shape and shape[0] == -1:
        limit = _upper_bound(value.shape[0], program)
    return TensorInfo(name, datatype, shape, limit)


def _upper_bound(dim: Any, program: torch.export.ExportedProgram) -> int | None:
    try:
        upper = program.range_constraints[dim.node.expr].upper
    except (AttributeError, KeyError):
        return None
    # Unbounded is sympy's oo or torch's int_oo, whose flags and int() differ by version.
    try:
        bound = int(upper)
    except Exception:
        return None
    return bound if upper == bound else None


def _batch_limit(tensors: list[TensorInfo], backend_config: dict[str, str]) -> int:
    """The max_batch_size to fill in: 0 unless every tensor has a dynamic leading dim."""
    if not tensors or not all(t.shape and t.shape[0] == -1 for t in tensors):
        return 0
    text = backend_config.get("default-max-batch-size", str(DEFAULT_MAX_BATCH_SIZE))
    try:
        limit = int(text)
    except ValueError:
        raise invalid_arg(f"--backend-config pytorch,default-max-batch-size must be an "
                          f"integer, got '{text}'") from None
    for tensor in tensors:
        if tensor.batch_limit is not None:
            limit = min(limit, tensor.batch_limit)
    return max(limit, 0)


def _add(target: Any, tensors: list[TensorInfo], batching: bool, model: str) -> None:
    for tensor in tensors:
        dims = tensor.shape
        if batching:
            if not dims:
                raise invalid_arg(f"model '{model}': '{tensor.name}' is a 0-d tensor, so it "
                                  f"has no batch dimension; max_batch_size must be 0")
            dims = dims[1:]
        target.add(name=tensor.name, data_type=DataType.Value(datatype_to_config(
            tensor.datatype)), dims=list(dims))


def _has_scheduler(config: ModelConfig) -> bool:
    return any(config.HasField(field) for field in
               ("dynamic_batching", "sequence_batching", "ensemble_scheduling"))
