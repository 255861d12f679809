"""Expanding ``instance_group`` into instances, and the devices they may use."""

from __future__ import annotations

from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from naiad.errors import invalid_arg
from naiad.gpus import gpu_count
from naiad.types import InstanceInfo

_KIND_NAMES = {
    ModelInstanceGroup.KIND_AUTO: "KIND_AUTO",
    ModelInstanceGroup.KIND_CPU: "KIND_CPU",
    ModelInstanceGroup.KIND_GPU: "KIND_GPU",
    ModelInstanceGroup.KIND_MODEL: "KIND_MODEL",
}


def requested_instances(config: ModelConfig, available_gpus: int | None = None) -> int:
    """How many instances ``config``'s ``instance_group`` makes: each group's count, times
    its GPUs for KIND_GPU (every GPU when it names none), over every group."""
    gpus = gpu_count() if available_gpus is None else available_gpus
    requested = 0
    for group in config.instance_group:
        devices = (len(group.gpus) or gpus or 1) if group.kind == \
            ModelInstanceGroup.KIND_GPU else 1
        requested += max(group.count, 1) * devices
    return requested


def expand_instance_groups(model_name: str, config: ModelConfig,
                           limit: int = 64) -> list[InstanceInfo]:
    """One :class:`InstanceInfo` per instance, named ``<group name>_<i>`` as Triton does.

    KIND_GPU on a machine without a GPU is a load error, never a silent CPU fallback; so is
    asking for more than ``limit`` instances (``--max-instances-per-model``), which would
    start that many threads or processes.
    """
    available_gpus = gpu_count()
    requested = requested_instances(config, available_gpus)
    if requested > limit:
        raise invalid_arg(
            f"model '{model_name}': instance_group asks for {requested} instances, more than "
            f"the {limit} one model may have (--max-instances-per-model)")
    instances: list[InstanceInfo] = []
    for group in config.instance_group:
        kind = _KIND_NAMES[group.kind]
        if kind == "KIND_GPU":
            devices = list(group.gpus) or list(range(available_gpus))
            if not devices:
                raise invalid_arg(
                    f"model '{model_name}': instance group '{group.name}' asks for KIND_GPU but "
                    f"this machine has no GPU (run it on a GPU machine, or use KIND_CPU where "
                    f"its backend supports that)")
            for gpu in devices:
                if gpu >= available_gpus:
                    raise invalid_arg(
                        f"model '{model_name}': instance group '{group.name}' names GPU {gpu} "
                        f"but {available_gpus} GPU(s) are available")
        else:
            devices = [0]
        for device in devices:
            for _ in range(max(group.count, 1)):
                instances.append(InstanceInfo(
                    name=f"{group.name}_{len(instances)}",
                    kind=kind,
                    device_id=device,
                    index=len(instances),
                ))
    return instances
