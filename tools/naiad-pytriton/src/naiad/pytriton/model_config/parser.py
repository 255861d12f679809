"""A model's config as the server answers it (JSON form) to a TritonModelConfig: what the
clients' ``model_config`` and the decorators' ``triton_context`` hold."""

from __future__ import annotations

from typing import Any

import numpy as np
from tritonclient.utils import triton_to_np_dtype

from naiad.pytriton.exceptions import PyTritonModelConfigError
from naiad.pytriton.model_config.common import (
    DeviceKind,
    DynamicBatcher,
    QueuePolicy,
    TimeoutAction,
)
from naiad.pytriton.model_config.triton_model_config import (
    ResponseCache,
    TensorSpec,
    TritonModelConfig,
)


def numpy_dtype(data_type: str) -> Any:
    """The numpy type of ``TYPE_FP32``...; ``np.bytes_`` for TYPE_STRING."""
    kind = data_type.split("_", 1)[-1] if data_type else ""
    if not kind:
        raise PyTritonModelConfigError("Data type not defined.")
    if kind == "STRING":
        return np.bytes_
    dtype = triton_to_np_dtype(kind)
    if dtype is None:
        raise PyTritonModelConfigError(f"Unsupported data type `{data_type}`.")
    return np.bool_ if dtype is bool else np.dtype(dtype).type


def _get(found: dict[str, Any], snake: str, default: Any = None) -> Any:
    """A field under its proto name or its JSON (camelCase) name."""
    if snake in found:
        return found[snake]
    head, *rest = snake.split("_")
    return found.get(head + "".join(part.title() for part in rest), default)


def _policy(found: dict[str, Any]) -> QueuePolicy:
    return QueuePolicy(
        timeout_action=TimeoutAction(_get(found, "timeout_action", "REJECT")),
        default_timeout_microseconds=int(_get(found, "default_timeout_microseconds", 0)),
        allow_timeout_override=bool(_get(found, "allow_timeout_override", False)),
        max_queue_size=int(_get(found, "max_queue_size", 0)))


def _batcher(found: dict[str, Any]) -> DynamicBatcher:
    default_policy = _get(found, "default_queue_policy")
    priority_policies = _get(found, "priority_queue_policy")
    return DynamicBatcher(
        max_queue_delay_microseconds=int(_get(found, "max_queue_delay_microseconds", 0)),
        preferred_batch_size=[int(s) for s in _get(found, "preferred_batch_size", [])] or None,
        preserve_ordering=bool(_get(found, "preserve_ordering", False)),
        priority_levels=int(_get(found, "priority_levels", 0)),
        default_priority_level=int(_get(found, "default_priority_level", 0)),
        default_queue_policy=_policy(default_policy) if default_policy else None,
        priority_queue_policy=({int(k): _policy(v) for k, v in priority_policies.items()}
                               if priority_policies else None))


def _tensor(item: dict[str, Any], kind: str, index: int) -> TensorSpec:
    name = item.get("name")
    if not name:
        raise PyTritonModelConfigError(f"Name for {kind} at index {index} not provided.")
    return TensorSpec(name=name, shape=tuple(int(d) for d in item.get("dims", [])),
                      dtype=numpy_dtype(_get(item, "data_type", "")),
                      optional=bool(item.get("optional", False)))


def parse_model_config(found: dict[str, Any]) -> TritonModelConfig:
    """The TritonModelConfig of a config in protobuf's JSON form (proto or camelCase names)."""
    max_batch_size = int(_get(found, "max_batch_size", 0))
    batching = _get(found, "dynamic_batching")
    parameters = found.get("parameters") or {}
    cache = _get(found, "response_cache")
    return TritonModelConfig(
        model_name=found["name"],
        batching=max_batch_size > 0,
        max_batch_size=max_batch_size,
        batcher=_batcher(batching) if batching is not None else None,
        inputs=[_tensor(item, "input", i) for i, item in enumerate(found.get("input", []))]
        or None,
        outputs=[_tensor(item, "output", i) for i, item in enumerate(found.get("output", []))]
        or None,
        instance_group={DeviceKind(group.get("kind", "KIND_AUTO")): group.get("count")
                        for group in _get(found, "instance_group", [])},
        decoupled=bool(_get(_get(found, "model_transaction_policy", {}) or {}, "decoupled",
                            False)),
        backend_parameters={name: _get(value, "string_value", "")
                            for name, value in parameters.items()},
        response_cache=ResponseCache(enable=bool(cache.get("enable"))) if cache else None)
