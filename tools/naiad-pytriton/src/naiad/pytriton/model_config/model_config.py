"""The per-model settings a user gives ``bind`` (``pytriton.model_config.model_config``)."""

from __future__ import annotations

import dataclasses

from naiad.pytriton.model_config.common import DynamicBatcher, ModelWarmup


@dataclasses.dataclass
class ModelConfig:
    """Batching (``max_batch_size``, the dynamic ``batcher``), the response cache, decoupled
    (streaming) execution and warmup of one bound model, with PyTriton's defaults."""

    batching: bool = True
    max_batch_size: int = 4
    batcher: DynamicBatcher = dataclasses.field(default_factory=DynamicBatcher)
    response_cache: bool = False
    decoupled: bool = False
    model_warmup: list[ModelWarmup] | None = None
