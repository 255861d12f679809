"""Where an instance runs: ``instance_group`` kind and GPU id -> a torch device."""

from __future__ import annotations

import torch

from naiad.errors import unavailable
from naiad.types import InstanceInfo


def instance_device(model: str, instance: InstanceInfo) -> torch.device | None:
    """``cuda:N`` for KIND_GPU, None for KIND_MODEL (the model keeps the devices it was
    saved with, as in Triton), the CPU otherwise. A GPU instance on a machine or torch build
    without CUDA is a load error, never a silent move to the CPU."""
    if instance.kind == "KIND_GPU":
        if not torch.cuda.is_available():
            raise unavailable(
                f"model '{model}' instance '{instance.name}' asks for GPU {instance.device_id} "
                f"(KIND_GPU) but torch {torch.__version__} sees no CUDA device "
                f"(torch.cuda.is_available() is False); use KIND_CPU or install a CUDA build "
                f"of torch on a machine with a GPU")
        count = torch.cuda.device_count()
        if instance.device_id >= count:
            raise unavailable(
                f"model '{model}' instance '{instance.name}' asks for GPU {instance.device_id} "
                f"but torch sees {count} CUDA device(s)")
        return torch.device("cuda", instance.device_id)
    if instance.kind == "KIND_MODEL":
        return None
    return torch.device("cpu")


def model_device(module: torch.nn.Module) -> torch.device:
    """The device of a module's first parameter (or buffer), the CPU for one with neither:
    where a KIND_MODEL instance puts its inputs, as Triton does."""
    for tensor in module.parameters():
        return tensor.device
    for tensor in module.buffers():
        return tensor.device
    return torch.device("cpu")
