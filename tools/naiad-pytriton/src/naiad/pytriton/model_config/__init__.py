"""Model configuration classes (``pytriton.model_config``)."""

from naiad.pytriton.model_config.common import (
    DeviceKind,
    DynamicBatcher,
    ModelWarmup,
    QueuePolicy,
    TimeoutAction,
    WarmupInput,
)
from naiad.pytriton.model_config.model_config import ModelConfig
from naiad.pytriton.model_config.tensor import Tensor

__all__ = ["DeviceKind", "DynamicBatcher", "ModelConfig", "ModelWarmup", "QueuePolicy",
           "Tensor", "TimeoutAction", "WarmupInput"]
