"""What Triton adds to a model's configuration when it loads it.

Observed on tritonserver 2.51 (``GET /v2/models/{m}/config``) and read in
triton-inference-server/core ``model_config_utils.cc`` (``AutoCompleteBackendFields``,
``NormalizeModelConfig``, ``NormalizeInstanceGroup``). These are the core's defaults: the
Python backend adds nothing of its own unless ``model.py`` has an ``auto_complete_config``,
which runs before this (the manager calls the backend first).
"""

from __future__ import annotations

from collections.abc import MutableSequence, Sequence

from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from naiad.config.platforms import default_model_filename
from naiad.gpus import gpu_count

SEQUENCE_IDLE_DEFAULT_MICROSECONDS = 1_000_000
"""``max_sequence_idle_microseconds`` when the config leaves it 0 (one second)."""

DEFAULT_INSTANCE_COUNT = 1
# Triton gives KIND_CPU groups two instances for these backends only (others, e.g. pytorch,
# pay too much per instance).
DEFAULT_CPU_INSTANCE_COUNT = 2
_TWO_CPU_INSTANCE_BACKENDS = frozenset({"tensorflow", "onnxruntime"})


def fill_defaults(config: ModelConfig, model_name: str, *,
                  gpus: Sequence[int] | None = None) -> None:
    """Add Triton's defaults to ``config`` in place (after backend auto-complete).

    ``gpus`` are the usable GPU ids (KIND_AUTO becomes KIND_GPU on them, KIND_GPU without
    ``gpus`` uses them all); by default the GPUs the NVIDIA driver exposes.
    """
    if not config.name:
        config.name = model_name
    if not config.default_model_filename:
        config.default_model_filename = default_model_filename(config.backend, config.platform)
    if not config.HasField("version_policy"):
        config.version_policy.latest.num_versions = 1
    if config.HasField("dynamic_batching"):
        _prefer_max_batch(config, config.dynamic_batching.preferred_batch_size)
    if config.HasField("sequence_batching"):
        sequence = config.sequence_batching
        if sequence.max_sequence_idle_microseconds == 0:
            sequence.max_sequence_idle_microseconds = SEQUENCE_IDLE_DEFAULT_MICROSECONDS
        if sequence.HasField("oldest"):
            _prefer_max_batch(config, sequence.oldest.preferred_batch_size)
    # An ensemble runs no instances of its own: Triton leaves optimization and instance_group
    # unset, and always shows model_transaction_policy (decoupled when one of its steps is:
    # the ensemble scheduler sets that, knowing the steps' models).
    if config.HasField("ensemble_scheduling"):
        config.model_transaction_policy.SetInParent()
        return
    optimization = config.optimization
    if not optimization.HasField("input_pinned_memory"):
        optimization.input_pinned_memory.enable = True
    if not optimization.HasField("output_pinned_memory"):
        optimization.output_pinned_memory.enable = True
    _fill_instance_groups(config, _available_gpus() if gpus is None else list(gpus))


def _prefer_max_batch(config: ModelConfig, preferred: MutableSequence[int]) -> None:
    # Without preferred sizes Triton prefers a full batch (nothing for a non-batching model).
    if not preferred and config.max_batch_size > 0:
        preferred.append(config.max_batch_size)


def _fill_instance_groups(config: ModelConfig, gpus: list[int]) -> None:
    if not config.instance_group:
        # The one implicit group is named after the model itself (not "<model>_0").
        config.instance_group.add(name=config.name)
    for index, group in enumerate(config.instance_group):
        if not group.name:
            group.name = f"{config.name}_{index}"
        if group.kind == ModelInstanceGroup.KIND_AUTO:
            on_gpu = bool(gpus) and all(g in gpus for g in group.gpus)
            group.kind = ModelInstanceGroup.KIND_GPU if on_gpu else ModelInstanceGroup.KIND_CPU
        # Triton replaces any count below 1 (0 or negative) with the default, silently.
        if group.count < 1:
            two = (group.kind == ModelInstanceGroup.KIND_CPU
                   and config.backend in _TWO_CPU_INSTANCE_BACKENDS)
            group.count = DEFAULT_CPU_INSTANCE_COUNT if two else DEFAULT_INSTANCE_COUNT
        if group.kind == ModelInstanceGroup.KIND_GPU and not group.gpus:
            group.gpus.extend(gpus)


def _available_gpus() -> list[int]:
    return list(range(gpu_count()))
