"""The model to convert, and how to run it as the reference every format is checked against.

``SOURCE`` is one of:

- ``package.module:attr`` or ``path/to/file.py:attr``: an ``nn.Module``, an ``nn.Module``
  class, or a factory function returning one (called without arguments);
- a TorchScript file (``torch.jit.save``: ``.pt``, ``.ts``, ``.torchscript``);
- a ``torch.export`` program (``torch.export.save``: ``.pt2``, or any file holding one);
- an ONNX file (``.onnx``): only its checks, timings and repository are made (and TensorRT).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
import warnings
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from naiad_convert.errors import ConvertError, first_line, usage_error
from naiad_convert.samples import Samples
from naiad_convert.tensors import to_numpy, to_torch

PYTORCH, TORCHSCRIPT, EXPORT, ONNX = "pytorch", "torchscript", "torch.export", "onnx"
OUTPUT_PREFIX = "OUTPUT__"  # Triton's PyTorch naming for the i-th result
# Other frameworks' model files (a SavedModel is a folder): refused by name, not by a
# loader's confusing error.
NOT_SUPPORTED_SUFFIXES = (".pb", ".h5", ".keras", ".tflite", ".savedmodel", ".xml", ".plan")


@dataclass
class Source:
    """A loaded model: ``kind`` is one of PYTORCH, TORCHSCRIPT, EXPORT, ONNX; ``model`` the
    nn.Module, ScriptModule, ExportedProgram, or the ONNX file's path."""

    kind: str
    text: str                        # as the user wrote it
    model: Any
    argument_names: list[str]        # forward()'s arguments, or the ONNX graph's inputs
    output_names: list[str] = field(default_factory=list)  # filled by ``outputs_of``
    returns_dict: bool = False
    _module: Any = field(default=None, repr=False)  # what run() calls, made once

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The reference outputs, by name."""
        if self.kind == ONNX:
            from naiad_convert.formats.onnx import run_onnx_session, session

            return run_onnx_session(session(self.model), inputs)
        import torch

        if self._module is None:
            self._module = self.model.module() if self.kind == EXPORT else self.model
        module = self._module
        with torch.inference_mode():
            result = module(*(to_torch(a) for a in inputs.values()))
        return self.name_outputs(result)

    def name_outputs(self, result: Any) -> dict[str, np.ndarray]:
        """A torch model's result by output name: one tensor is ``OUTPUT__0``, a tuple or
        list ``OUTPUT__i`` by position, a dictionary keeps its keys (Triton's PyTorch
        backend finds outputs the same ways)."""
        if isinstance(result, dict):
            self.returns_dict = True
            named = {str(k): to_numpy(v) for k, v in result.items()}
        elif isinstance(result, (tuple, list)):
            named = {f"{OUTPUT_PREFIX}{i}": to_numpy(v) for i, v in enumerate(result)}
        else:
            named = {f"{OUTPUT_PREFIX}0": to_numpy(result)}
        if not self.output_names:
            self.output_names = list(named)
        return named

    def bind(self, samples: Samples) -> Samples:
        """The samples in the order the model takes its arguments: by name when every sample
        is named after an argument, else by position. A count that does not match (or an
        ONNX input with no sample) is a usage error naming both sides."""
        names = list(samples.arrays)
        arguments = self.argument_names
        if set(names) == set(arguments) or (self.kind == ONNX and set(arguments) <= set(names)):
            return samples.reordered(arguments)
        if self.kind == ONNX:
            missing = sorted(set(arguments) - set(names))
            raise usage_error(f"the ONNX model's inputs are {arguments}; the samples lack "
                              f"{missing} (they hold {names})")
        if len(names) != len(arguments):
            raise usage_error(f"{self.text}: forward() takes {len(arguments)} input(s) "
                              f"({', '.join(arguments)}), the samples give {len(names)} "
                              f"({', '.join(names)})")
        return samples


def _forward_arguments(forward: Any) -> list[str]:
    parameters = inspect.signature(forward).parameters.values()
    return [p.name for p in parameters
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            and p.default is p.empty]


def _import_attribute(text: str) -> Any:
    target, _, attr = text.rpartition(":")
    try:
        if target.endswith(".py"):
            path = Path(target).resolve()
            spec = importlib.util.spec_from_file_location(path.stem, path)
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot import {path}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[path.stem] = module
            spec.loader.exec_module(module)
        else:
            if "" not in sys.path and str(Path.cwd()) not in sys.path:
                sys.path.insert(0, str(Path.cwd()))
            module = importlib.import_module(target)
    except Exception as exc:  # the user's module: any error it raises is theirs to see
        raise ConvertError(f"{text}: importing {target} failed: {first_line(exc)}") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ConvertError(f"{text}: {target} has no attribute '{attr}'") from None


def _is_export_archive(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as archive:
            return any(n.count("/") == 1 and n.endswith("/archive_format")
                       for n in archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def load_source(text: str) -> Source:
    """Load ``text`` (see the module's docstring); ConvertError when it cannot be."""
    path = Path(text)
    if path.is_dir() or path.suffix in NOT_SUPPORTED_SUFFIXES:
        raise usage_error(f"{text}: naiad convert takes an nn.Module entry point (module:attr), "
                          "a TorchScript or torch.export file, or an ONNX file; TensorFlow, "
                          "Keras and other frameworks' models are not supported")
    if path.suffix == ".onnx":
        if not path.is_file():
            raise usage_error(f"{text}: no such file")
        from naiad_convert.formats.onnx import session

        try:
            names = [i.name for i in session(path).get_inputs()]
        except Exception as exc:  # onnxruntime's own errors: a bad graph, an unknown op
            raise ConvertError(f"{text}: onnxruntime cannot load it: {first_line(exc)}"
                               ) from None
        return Source(ONNX, text, path, names)
    try:
        import torch
    except ImportError:
        raise ConvertError(f"{text}: a PyTorch model needs torch "
                           "(pip install 'naiad-convert[torch]')") from None
    if path.is_file():
        try:
            with warnings.catch_warnings():
                # torch 2.9+ deprecates torch.jit.load; loading TorchScript is the point here
                warnings.simplefilter("ignore", DeprecationWarning)
                return _load_torch_file(text, path)
        except Exception as exc:  # torch's loaders raise many types
            raise ConvertError(f"{text}: not a TorchScript or torch.export file torch can "
                               f"load: {first_line(exc)}") from None
    if ":" not in text:
        raise usage_error(f"{text}: no such file, and not an entry point (module:attr)")
    found = _import_attribute(text)
    try:
        if isinstance(found, torch.nn.Module):
            model = found
        elif callable(found):
            model = found()
        else:
            model = None
    except Exception as exc:  # the user's factory
        raise ConvertError(f"{text}: calling it failed: {first_line(exc)}") from None
    if not isinstance(model, torch.nn.Module):
        raise ConvertError(f"{text}: expected an nn.Module, an nn.Module class or a function "
                           f"returning one, got {type(model if model is not None else found)}")
    return Source(PYTORCH, text, model.eval(), _forward_arguments(model.forward))


def _load_torch_file(text: str, path: Path) -> Source:
    import torch

    if path.suffix == ".pt2" or _is_export_archive(path):
        program = torch.export.load(str(path))
        names = [spec.arg.name for spec in program.graph_signature.input_specs
                 if spec.kind.name == "USER_INPUT"]
        return Source(EXPORT, text, program, names)
    scripted = torch.jit.load(str(path), map_location="cpu").eval()
    arguments = [a.name for a in scripted.forward.schema.arguments[1:]
                 if not a.has_default_value()]
    return Source(TORCHSCRIPT, text, scripted, arguments)


def reference_outputs(source: Source, batches: Sequence[dict[str, np.ndarray]]
                      ) -> list[dict[str, np.ndarray]]:
    """The original model's outputs on each batch; a model that rejects the samples is a
    usage error (the input spec does not match the model)."""
    results = []
    for inputs in batches:
        try:
            results.append(source.run(inputs))
        except Exception as exc:  # whatever the model raises on the wrong inputs
            shapes = ", ".join(f"{n} {a.dtype} {list(a.shape)}" for n, a in inputs.items())
            raise usage_error(f"{source.text} does not run on the sample inputs ({shapes}): "
                              f"{first_line(exc)}") from None
    return results
