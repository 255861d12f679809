"""Finding and loading a model file: TorchScript (``model.pt``) or torch.export (``model.pt2``).

Both become a :class:`LoadedModel`: something to call with tensors, what its ``forward()``
takes (for :mod:`naiad_backend_torch.naming`) and what kind of result it returns.
"""

from __future__ import annotations

import logging
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from naiad.backend_utils import model_file_path
from naiad.errors import unavailable
from naiad_backend_torch.naming import Arguments

log = logging.getLogger("naiad.backend.pytorch")

TORCHSCRIPT_FILENAME = "model.pt"
EXPORT_FILENAME = "model.pt2"
"""Triton's name for PyTorch 2 artifacts (``INDUCTOR_MODEL_ARTIFACT_NAME_DEFAULT``)."""

# What a model returns, which decides how config outputs are found in it.
_EXPORT_LOAD_LOCK = threading.Lock()

RETURNS_TENSOR = "tensor"
RETURNS_SEQUENCE = "sequence"  # a tuple or list: outputs by index
RETURNS_DICT = "dict"  # outputs by key


@dataclass(frozen=True, slots=True)
class LoadedModel:
    """A loaded model, ready to call as ``module(*tensors)``."""

    module: Any  # torch.jit.ScriptModule or the torch.nn.Module of an ExportedProgram
    arguments: Arguments
    returns: str
    exported: bool  # True for a torch.export program
    path: Path


def resolve_model_file(version_dir: Path, filename: str, model: str = "") -> Path:
    """The model file of a version: ``filename`` (config's ``default_model_filename``), except
    that a version folder holding only ``model.pt2`` serves it when the default ``model.pt``
    is asked for. A ``filename`` that leaves the version folder is refused (INVALID_ARG)."""
    path = model_file_path(version_dir, filename or TORCHSCRIPT_FILENAME,
                           model or version_dir.parent.name)
    if not path.exists() and path.name == TORCHSCRIPT_FILENAME:
        exported = version_dir / EXPORT_FILENAME
        if exported.is_file():
            return exported
    return path


def is_export_file(path: Path) -> bool:
    """Whether ``path`` holds a torch.export program rather than TorchScript: a ``.pt2``
    file is one, and so is any archive written by ``torch.export.save`` (it holds an
    ``archive_format`` record, TorchScript archives do not), whatever its name: a model
    exported to ``model.pt`` is found by the core's model file detection and served."""
    if path.suffix == ".pt2":
        return True
    try:
        with zipfile.ZipFile(path) as archive:
            return any(name.count("/") == 1 and name.endswith("/archive_format")
                       for name in archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def load_model(path: Path, device: torch.device | None, model: str) -> LoadedModel:
    """Load ``path`` onto ``device`` (None: where the file says). Raise an UNAVAILABLE
    error naming the model and the file when it is missing or not a model torch can load."""
    if not path.is_file():
        raise unavailable(f"unable to find '{path}' for model '{model}'")
    if is_export_file(path):
        return _load_exported(path, device, model)
    return _load_torchscript(path, device, model)


def load_exported_program(path: Path, model: str) -> torch.export.ExportedProgram:
    """``torch.export.load(path)`` with an error that says what the file must be."""
    try:
        # Opened here: torch warns about a path not ending in .pt2, not about a file object.
        # One at a time: torch.export's deserializer keeps its state in a module global
        # ("_CURRENT_DESERIALIZER is already set"), and naiad loads models concurrently
        # (--model-load-thread-count).
        with open(path, "rb") as file, _EXPORT_LOAD_LOCK:
            return torch.export.load(file)
    except Exception as exc:
        raise unavailable(
            f"model '{model}': failed to load '{path}' as a torch.export program "
            f"(torch.export.save); AOTInductor packages are not supported: "
            f"{type(exc).__name__}: {exc}") from exc


# --- TorchScript ------------------------------------------------------------------------


def _load_torchscript(path: Path, device: torch.device | None, model: str) -> LoadedModel:
    try:
        module = torch.jit.load(str(path), map_location=device)
    except Exception as exc:
        raise unavailable(
            f"model '{model}': failed to load '{path}' as TorchScript (torch.jit.save of a "
            f"scripted or traced module; a pickled nn.Module from torch.save is not one: "
            f"script it, trace it or torch.export it to {EXPORT_FILENAME}): "
            f"{type(exc).__name__}: {exc}") from exc
    module.eval()
    schema = module.forward.schema
    arguments = list(schema.arguments)
    if arguments and arguments[0].type.kind() == "ClassType":  # self
        arguments = arguments[1:]
    dictionary = len(arguments) == 1 and arguments[0].type.kind() == "DictType"
    for argument in arguments:
        if dictionary or argument.has_default_value():
            continue
        if argument.type.kind() != "TensorType":
            raise unavailable(
                f"model '{model}': forward() argument '{argument.name}' is of type "
                f"{argument.type}; the PyTorch backend passes Tensor arguments, or a single "
                f"Dict[str, Tensor]")
    required = sum(1 for argument in arguments if not argument.has_default_value())
    returned = schema.returns[0].type.kind() if schema.returns else "NoneType"
    returns = {"TensorType": RETURNS_TENSOR, "DictType": RETURNS_DICT}.get(
        returned, RETURNS_SEQUENCE)
    return LoadedModel(
        module=module,
        arguments=Arguments(tuple(a.name for a in arguments), required, dictionary),
        returns=returns,
        exported=False,
        path=path,
    )


# --- torch.export -----------------------------------------------------------------------


def _load_exported(path: Path, device: torch.device | None, model: str) -> LoadedModel:
    program = load_exported_program(path, model)
    names = exported_argument_names(program, model)
    if device is not None and device.type != "cpu":
        program = _move(program, device)
    module = program.module()
    out_spec = program.call_spec.out_spec
    if out_spec is None or out_spec.is_leaf():
        returns = RETURNS_TENSOR
    elif out_spec.type is dict:
        returns = RETURNS_DICT
    else:
        returns = RETURNS_SEQUENCE
    return LoadedModel(
        module=module,
        arguments=Arguments(names, len(names)),
        returns=returns,
        exported=True,
        path=path,
    )


def exported_argument_names(program: torch.export.ExportedProgram, model: str
                            ) -> tuple[str, ...]:
    """The positional argument names of an exported program, each one tensor. Programs
    exported with keyword arguments or nested inputs (lists, dicts) are refused."""
    in_spec = program.call_spec.in_spec
    args_spec, kwargs_spec = _children(in_spec)
    if kwargs_spec.num_leaves:
        raise unavailable(f"model '{model}': the torch.export program takes keyword arguments "
                          f"{kwargs_spec.context}; export it with positional tensors only")
    if not all(child.is_leaf() for child in _children(args_spec)):
        raise unavailable(f"model '{model}': the torch.export program takes nested inputs "
                          f"(lists, tuples or dicts of tensors); export it with one tensor "
                          f"per argument")
    count = args_spec.num_leaves
    signature = program.module_call_graph[0].signature if program.module_call_graph else None
    names = list(signature.forward_arg_names) if signature is not None else []
    if len(names) != count:
        names = list(program.graph_signature.user_inputs)
    if len(names) != count:
        names = [f"INPUT__{i}" for i in range(count)]
    return tuple(names)


def _children(spec: Any) -> list[Any]:
    # TreeSpec.children() replaced children_specs in torch 2.9.
    children = getattr(spec, "children", None)
    return list(children()) if callable(children) else list(spec.children_specs)


def _move(program: torch.export.ExportedProgram, device: torch.device
          ) -> torch.export.ExportedProgram:
    from torch.export.passes import move_to_device_pass

    return move_to_device_pass(program, device)
