"""The ``tensorrt`` backend: serialized TensorRT engines (``model.plan``) on NVIDIA GPUs.

Before anything touches TensorRT or CUDA, :func:`placement_problems` checks what can be
known cheaply (no KIND_CPU instance groups, a GPU present, the packages installed) and the
load fails with every problem it found, named. Auto-complete then deserializes the engine
once to fill the config (:mod:`naiad_backend_tensorrt.autocomplete`); each instance
deserializes it again on its own GPU and checks the config against it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from naiad.backend_utils import gpu_count, model_file_path, newest_version_file
from naiad.errors import unavailable
from naiad.types import Backend, InstanceInfo, ModelContext
from naiad_backend_tensorrt.autocomplete import check_config, complete_config
from naiad_backend_tensorrt.cuda import Cuda
from naiad_backend_tensorrt.engine import import_tensorrt, load_engine, missing_packages
from naiad_backend_tensorrt.engine_io import read_engine_io
from naiad_backend_tensorrt.instance import TensorRTInstance
from naiad_backend_tensorrt.profiles import group_profiles

log = logging.getLogger("naiad.backend.tensorrt")

DEFAULT_MODEL_FILENAME = "model.plan"
_GPU_KINDS = (ModelInstanceGroup.KIND_GPU, ModelInstanceGroup.KIND_AUTO)


class TensorRTBackend(Backend):
    """Serves models whose config says ``backend: "tensorrt"`` / ``platform: "tensorrt_plan"``."""

    name = "tensorrt"
    default_model_filename = DEFAULT_MODEL_FILENAME

    def __init__(self, backend_config: dict[str, str] | None = None) -> None:
        self.backend_config = dict(backend_config or {})

    # --- auto-complete ------------------------------------------------------------------

    def auto_complete_config(self, config: ModelConfig, model_dir: Path) -> list[str]:
        """Fill inputs, outputs and max_batch_size from the engine of the newest version
        folder, deserialized on the first GPU the config names (GPU 0 by default)."""
        model = config.name or model_dir.name
        problems = placement_problems(config, model)
        if problems:
            raise unavailable(f"model '{model}' cannot load: {'; '.join(problems)}")
        trt = import_tensorrt(model)
        cuda = Cuda.load(model)
        device = _first_gpu(config)
        cuda.set_device(device)
        filename = engine_filename(config, cuda.compute_capability(device))
        path = newest_version_file(model_dir, filename)
        if path is None:
            raise unavailable(f"model '{model}': no version folder of '{model_dir}' holds the "
                              f"TensorRT engine file '{filename}'")
        loaded = load_engine(trt, path, model)
        try:
            io = read_engine_io(loaded.engine, trt)
        finally:
            del loaded
        return complete_config(config, io, model)

    # --- instances ----------------------------------------------------------------------

    def create_instance(self, context: ModelContext, instance: InstanceInfo) -> TensorRTInstance:
        config, model = context.config, context.name
        if instance.kind != "KIND_GPU":
            raise unavailable(
                f"model '{model}': instance '{instance.name}' has kind {instance.kind}, but a "
                f"TensorRT engine runs only on an NVIDIA GPU; use kind: KIND_GPU")
        problems = placement_problems(config, model)
        if problems:
            raise unavailable(f"model '{model}' cannot load: {'; '.join(problems)}")
        trt = import_tensorrt(model)
        cuda = Cuda.load(model)
        cuda.set_device(instance.device_id)
        filename = engine_filename(config, cuda.compute_capability(instance.device_id))
        path = model_file_path(context.version_dir, filename, model,
                               "cc_model_filenames / default_model_filename")
        if not path.is_file():
            raise unavailable(f"model '{model}' version {context.version}: TensorRT engine "
                              f"file not found: '{path}'")
        loaded = load_engine(trt, path, model)
        io = read_engine_io(loaded.engine, trt)
        check_config(config, io, model)
        profiles = group_profiles(_group_of(config, instance), io.num_profiles, model)
        log.info("model '%s' instance '%s': engine '%s' on GPU %d, optimization profiles %s",
                 model, instance.name, path, instance.device_id, profiles)
        return TensorRTInstance(model=model, config=config, io=io, loaded=loaded, cuda=cuda,
                                device_id=instance.device_id, profiles=profiles)


def placement_problems(config: ModelConfig, model: str) -> list[str]:
    """What stops a TensorRT model from loading here, found without importing TensorRT or
    CUDA: instance groups that are not on a GPU, no GPU, packages not installed."""
    problems = []
    for index, group in enumerate(config.instance_group):
        if group.kind not in _GPU_KINDS:
            kind = ModelInstanceGroup.Kind.Name(group.kind)
            name = group.name or f"{model}_{index}"  # the name the core gives it later
            problems.append(
                f"instance group '{name}' has kind {kind}, but a TensorRT engine runs only on "
                f"an NVIDIA GPU (use kind: KIND_GPU)")
    if gpu_count() == 0:
        problems.append("TensorRT engines run only on an NVIDIA GPU and this machine has none "
                        "(no GPU under /proc/driver/nvidia/gpus, or CUDA_VISIBLE_DEVICES "
                        "hides them all)")
    missing = missing_packages()
    if missing:
        problems.append(f"the Python package(s) {', '.join(repr(m) for m in missing)} are not "
                        f"installed (pip install {' '.join(missing)})")
    return problems


def engine_filename(config: ModelConfig, compute_capability: str) -> str:
    """The engine file for a GPU: ``cc_model_filenames[<major.minor>]`` if the config has
    one for it, else ``default_model_filename``, else ``model.plan``."""
    by_capability = config.cc_model_filenames.get(compute_capability)
    return by_capability or config.default_model_filename or DEFAULT_MODEL_FILENAME


def _first_gpu(config: ModelConfig) -> int:
    for group in config.instance_group:
        if group.kind in _GPU_KINDS and group.gpus:
            return int(group.gpus[0])
    return 0


def _group_of(config: ModelConfig, instance: InstanceInfo) -> Any:
    """The instance group an instance came from: instances are named ``<group>_<n>``."""
    group_name = instance.name.rsplit("_", 1)[0]
    for group in config.instance_group:
        if group.name == group_name:
            return group
    return ModelInstanceGroup()  # no profiles listed: profile 0
