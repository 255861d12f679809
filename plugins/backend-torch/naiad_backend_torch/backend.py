"""The ``pytorch`` backend: loads TorchScript and torch.export models into instances."""

from __future__ import annotations

import threading
from pathlib import Path

import torch
from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig

from naiad.backend_utils import config_to_datatype
from naiad.errors import invalid_arg
from naiad.types import Backend, InstanceInfo, ModelContext
from naiad_backend_torch.autocomplete import auto_complete
from naiad_backend_torch.device import instance_device, model_device
from naiad_backend_torch.dtypes import DATATYPES
from naiad_backend_torch.instance import TorchModelInstance
from naiad_backend_torch.loading import LoadedModel, load_model, resolve_model_file
from naiad_backend_torch.naming import bind_inputs, bind_outputs
from naiad_backend_torch.parameters import read_settings
from naiad_backend_torch.threads import ProcessSettings, ThreadBudget

_SharedKey = tuple[str, int, str, str]  # model, version, file, device


class TorchBackend(Backend):
    """Serves models whose config says ``backend: "pytorch"`` / ``platform:
    "pytorch_libtorch"``."""

    name = "pytorch"
    default_model_filename = "model.pt"

    def __init__(self, backend_config: dict[str, str] | None = None) -> None:
        self.backend_config = dict(backend_config or {})
        self.budget = ThreadBudget()
        self.process_settings = ProcessSettings()
        # ENABLE_WEIGHT_SHARING: one loaded module per model version and device.
        self._shared: dict[_SharedKey, tuple[LoadedModel, int]] = {}
        self._shared_lock = threading.Lock()

    def auto_complete_config(self, config: ModelConfig, model_dir: Path) -> list[str]:
        return auto_complete(config, model_dir, self.backend_config)

    def create_instance(self, context: ModelContext, instance: InstanceInfo
                        ) -> TorchModelInstance:
        config, model = context.config, context.name
        _refuse_bytes(config, model)
        settings = read_settings(config, model)
        device = instance_device(model, instance)
        path = resolve_model_file(context.version_dir, config.default_model_filename,
                                  context.name)
        key = (model, context.version, str(path), str(device))
        loaded = self._acquire(key, path, device, model, settings.weight_sharing)
        try:
            _require_tensors(config, model, loaded)
            inputs = bind_inputs(model, [t.name for t in config.input], loaded.arguments)
            outputs = bind_outputs(model, [t.name for t in config.output])
            self.process_settings.apply(model, settings)
        except BaseException:
            self._release(key, settings.weight_sharing)
            raise
        if device is None:  # KIND_MODEL: inputs go where the model's weights are
            device = model_device(loaded.module)
        # A CPU instance without a thread count of its own takes a share of the cores.
        budget = None
        if device.type == "cpu" and settings.intra_op_threads is None:
            budget = self.budget
            budget.join()
        return TorchModelInstance(
            model, config, instance, loaded, device, inputs, outputs, settings, budget,
            lambda: self._release(key, settings.weight_sharing))

    # --- weight sharing -----------------------------------------------------------------

    def _acquire(self, key: _SharedKey, path: Path, device: torch.device | None, model: str,
                 shared: bool) -> LoadedModel:
        if not shared:
            return load_model(path, device, model)
        # Held while loading, so instances loading in parallel load the file once.
        with self._shared_lock:
            entry = self._shared.get(key)
            loaded = entry[0] if entry is not None else load_model(path, device, model)
            self._shared[key] = (loaded, (entry[1] if entry is not None else 0) + 1)
            return loaded

    def _release(self, key: _SharedKey, shared: bool) -> None:
        if not shared:
            return
        with self._shared_lock:
            entry = self._shared.get(key)
            if entry is None:
                return
            if entry[1] <= 1:
                del self._shared[key]
            else:
                self._shared[key] = (entry[0], entry[1] - 1)


def _require_tensors(config: ModelConfig, model: str, loaded: LoadedModel) -> None:
    """A config with no inputs or no outputs (Triton refuses those too), with what to add."""
    for kind, tensors in (("inputs", config.input), ("outputs", config.output)):
        if not tensors:
            hint = (f"forward({', '.join(loaded.arguments.names)})" if kind == "inputs"
                    else "what forward() returns")
            raise invalid_arg(
                f"model '{model}': the configuration lists no {kind}; a TorchScript file "
                f"records no datatypes or shapes, so config.pbtxt must list the {kind} of "
                f"{hint} (a torch.export program, model.pt2, can fill them itself)")


def _refuse_bytes(config: ModelConfig, model: str) -> None:
    """TorchScript tensors hold no strings: refuse BYTES (and anything torch lacks) at load."""
    for kind, tensors in (("input", config.input), ("output", config.output)):
        for tensor in tensors:
            datatype = config_to_datatype(DataType.Name(tensor.data_type))
            if datatype not in DATATYPES:
                raise invalid_arg(
                    f"model '{model}': {kind} '{tensor.name}' has datatype "
                    f"{DataType.Name(tensor.data_type)} ({datatype}), which the PyTorch "
                    f"backend does not support (torch tensors hold no strings); supported: "
                    f"{', '.join(sorted(DATATYPES))}")
