"""The model configuration as the server holds it (``pytriton.model_config.triton_model_config``):
what ``triton_context``, ``ModelClient.model_config`` and the decorators read."""

from __future__ import annotations

import dataclasses
from typing import Any

from naiad.pytriton.model_config.common import DeviceKind, DynamicBatcher, ModelWarmup


@dataclasses.dataclass
class ResponseCache:
    """Whether the server's response cache serves this model."""

    enable: bool


@dataclasses.dataclass
class TensorSpec:
    """One input or output: name, shape (without the batch axis) and numpy dtype."""

    name: str
    shape: tuple
    dtype: Any
    optional: bool | None = False


@dataclasses.dataclass
class TritonModelConfig:
    """A Python model's configuration, from which config.pbtxt's JSON form is generated."""

    model_name: str
    model_version: int = 1
    max_batch_size: int = 4
    batching: bool = True
    batcher: DynamicBatcher | None = None
    instance_group: dict[DeviceKind, int | None] = dataclasses.field(default_factory=dict)
    decoupled: bool = False
    backend_parameters: dict[str, str] = dataclasses.field(default_factory=dict)
    inputs: list[TensorSpec] | None = None
    outputs: list[TensorSpec] | None = None
    response_cache: ResponseCache | None = None
    model_warmup: list[ModelWarmup] | None = None

    @property
    def backend(self) -> str:
        """Always ``python``: bound callables run in naiad's Python backend."""
        return "python"
