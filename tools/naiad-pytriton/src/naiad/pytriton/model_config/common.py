"""Batching, queue policy, device kind and warmup settings (``pytriton.model_config.common``)."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any


class DeviceKind(enum.Enum):
    """Where a model instance runs (Triton's instance_group kind)."""

    KIND_AUTO = "KIND_AUTO"
    KIND_CPU = "KIND_CPU"
    KIND_GPU = "KIND_GPU"


class TimeoutAction(enum.Enum):
    """What a queue does with a request that timed out in it."""

    REJECT = "REJECT"
    DELAY = "DELAY"


@dataclasses.dataclass
class QueuePolicy:
    """Triton's ModelQueuePolicy: timeouts (microseconds) and the queue's size."""

    timeout_action: TimeoutAction = TimeoutAction.REJECT
    default_timeout_microseconds: int = 0
    allow_timeout_override: bool = False
    max_queue_size: int = 0


@dataclasses.dataclass
class DynamicBatcher:
    """Triton's dynamic batcher settings (delays in microseconds)."""

    max_queue_delay_microseconds: int = 0
    preferred_batch_size: list[int] | None = None
    preserve_ordering: bool = False
    priority_levels: int = 0
    default_priority_level: int = 0
    default_queue_policy: QueuePolicy | None = None
    priority_queue_policy: dict[int, QueuePolicy] | None = None


@dataclasses.dataclass
class WarmupInput:
    """One input of a warmup request: zeros, random data or a ``.npy`` file."""

    dtype: Any
    shape: tuple[int, ...]
    zero_data: bool | None = False
    random_data: bool | None = False
    input_data_file: str | None = None


@dataclasses.dataclass
class ModelWarmup:
    """Warmup requests PyTriton sends its callable before serving; not supported by naiad."""

    name: str
    batch_size: int
    inputs: dict[str, WarmupInput]
    count: int
