"""PyTriton's ``Model`` (``pytriton.models.model``): one bound callable with its signature,
as what naiad's repository load API takes: PyTriton's configuration as the ``config``
override, and ``file:`` overrides holding the generic proxy model.py and the callables
pickled by value (cloudpickle), which naiad's Python backend runs."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import sys
import sysconfig
import types
from collections.abc import Callable, Sequence
from typing import Any

import cloudpickle

from naiad.pytriton.decorators import TritonContext
from naiad.pytriton.exceptions import PyTritonBadParameterError, PyTritonValidationError
from naiad.pytriton.model_config.common import DeviceKind
from naiad.pytriton.model_config.generator import model_config_dict
from naiad.pytriton.model_config.model_config import ModelConfig
from naiad.pytriton.model_config.tensor import Tensor
from naiad.pytriton.model_config.triton_model_config import (
    ResponseCache,
    TensorSpec,
    TritonModelConfig,
)
from naiad.pytriton.proxy import runtime
from naiad.pytriton.utils.workspace import Workspace

PROXY_MODEL = pathlib.Path(__file__).parents[1] / "proxy" / "model.py"


def _site_dirs() -> list[str]:
    found = {sysconfig.get_paths()[key] for key in ("purelib", "platlib", "stdlib")}
    return [os.path.realpath(path) for path in found]


def _by_value_modules(callables: Sequence[Callable[..., Any]]) -> list[types.ModuleType]:
    """The user's own modules the callables come from: pickled with them, so the worker
    needs neither the user's files nor to import (and run) the user's script."""
    sites = _site_dirs()
    found = []
    for item in callables:
        while item is not None:
            module = sys.modules.get(getattr(item, "__module__", None) or "")
            path = os.path.realpath(getattr(module, "__file__", None) or "") if module else ""
            if (module is not None and module.__name__ not in ("__main__", "builtins")
                    and not module.__name__.startswith(("naiad.", "numpy"))
                    and path and not any(path.startswith(site) for site in sites)):
                found.append(module)
            item = (getattr(item, "_naiad_wrapped", None) or getattr(item, "__wrapped__", None)
                    or getattr(item, "__func__", None))
    return found


def pickle_callables(model_name: str, callables: Sequence[Callable[..., Any]],
                     strict: bool) -> bytes:
    """The callables (and ``strict``) as callables.pkl: cloudpickle, by value."""
    modules = _by_value_modules(callables)
    for module in modules:
        with contextlib.suppress(ValueError):
            cloudpickle.register_pickle_by_value(module)
    try:
        return cloudpickle.dumps({"callables": list(callables), "strict": strict})
    except Exception as exc:
        raise PyTritonBadParameterError(
            f"model '{model_name}': the inference callable cannot be pickled into naiad's "
            f"worker process ({type(exc).__name__}: {exc}); create what it cannot pickle "
            "(locks, sockets, open files, CUDA handles) inside the callable on its first call "
            "(docs/pytriton.md)") from exc
    finally:
        for module in modules:
            with contextlib.suppress(ValueError):
                cloudpickle.unregister_pickle_by_value(module)


class Model:
    """One bound callable (or list of them, one per instance) with its signature."""

    def __init__(self, model_name: str, model_version: int,
                 infer_func: Callable[..., Any] | Sequence[Callable[..., Any]],
                 inputs: Sequence[Tensor], outputs: Sequence[Tensor], config: ModelConfig,
                 strict: bool, triton_context: TritonContext, workspace: Workspace) -> None:
        self.model_name = model_name
        self.model_version = model_version
        self.infer_functions = [infer_func] if callable(infer_func) else list(infer_func)
        if not self.infer_functions or not all(callable(f) for f in self.infer_functions):
            raise PyTritonValidationError(
                "inference_fn has to be either callable or sequence of callables")
        if any(output.optional for output in outputs):
            raise PyTritonValidationError("Output tensors cannot be optional.")
        self.inputs, self.outputs, self.config, self.strict = inputs, outputs, config, strict
        self.triton_config = TritonModelConfig(
            model_name=model_name, model_version=model_version, batching=config.batching,
            batcher=config.batcher, max_batch_size=config.max_batch_size,
            decoupled=config.decoupled,
            instance_group={DeviceKind.KIND_CPU: len(self.infer_functions)},
            # PyTriton's one backend parameter (its proxy's sockets live there): kept so the
            # config is PyTriton's; naiad's proxy model does not read it.
            backend_parameters={"workspace-path": workspace.path.as_posix()},
            inputs=[TensorSpec(name=spec.name or f"INPUT_{i}", dtype=spec.dtype,
                               shape=tuple(spec.shape), optional=spec.optional)
                    for i, spec in enumerate(inputs, start=1)],
            outputs=[TensorSpec(name=spec.name or f"OUTPUT_{i}", dtype=spec.dtype,
                                shape=tuple(spec.shape))
                     for i, spec in enumerate(outputs, start=1)],
            response_cache=ResponseCache(enable=True) if config.response_cache else None)
        self.config_json = json.dumps(model_config_dict(self.triton_config))
        for function in self.infer_functions:
            triton_context.model_configs[function] = self.triton_config
        self.files = {
            f"file:{model_version}/model.py": PROXY_MODEL.read_bytes(),
            f"file:{model_version}/{runtime.CALLABLES_FILE}":
                pickle_callables(model_name, self.infer_functions, strict),
        }
        if config.model_warmup:
            self.files[f"file:{model_version}/{runtime.WARMUP_FILE}"] = cloudpickle.dumps(
                list(config.model_warmup))
