"""A TritonModelConfig as the JSON config the repository load API takes, field for field
what PyTriton 0.7 sends, so naiad and Triton hold equal configs for one bound model."""

from __future__ import annotations

from typing import Any

import numpy as np
from tritonclient.utils import np_to_triton_dtype

from naiad.pytriton.exceptions import PyTritonBadParameterError
from naiad.pytriton.model_config.common import DynamicBatcher, QueuePolicy
from naiad.pytriton.model_config.triton_model_config import TensorSpec, TritonModelConfig

BYTES_DTYPES = (np.object_, object, bytes, np.bytes_)


def triton_data_type(dtype: Any) -> str:
    """``TYPE_FP32``... for a numpy dtype; ``TYPE_STRING`` for object and bytes."""
    if dtype in BYTES_DTYPES:
        return "TYPE_STRING"
    try:
        name = np_to_triton_dtype(np.dtype(dtype))
    except TypeError:
        name = None
    if name is None:
        raise PyTritonBadParameterError(f"dtype {dtype!r} has no Triton data type")
    return f"TYPE_{name}"


def _queue_policy(policy: QueuePolicy) -> dict[str, Any]:
    return {
        "timeoutAction": policy.timeout_action.value,
        "defaultTimeoutMicroseconds": int(policy.default_timeout_microseconds),
        "allowTimeoutOverride": policy.allow_timeout_override,
        "maxQueueSize": int(policy.max_queue_size),
    }


def _dynamic_batching(batcher: DynamicBatcher) -> dict[str, Any]:
    found: dict[str, Any] = {}
    if batcher.max_queue_delay_microseconds > 0:
        found["maxQueueDelayMicroseconds"] = int(batcher.max_queue_delay_microseconds)
    if batcher.preferred_batch_size:
        found["preferredBatchSize"] = [int(size) for size in batcher.preferred_batch_size]
    if batcher.preserve_ordering:
        found["preserveOrdering"] = batcher.preserve_ordering
    if batcher.priority_levels:
        found["priorityLevels"] = batcher.priority_levels
    if batcher.default_priority_level:
        if batcher.default_priority_level > batcher.priority_levels:
            raise PyTritonBadParameterError(
                f"The `default_priority_level` must be between 1 and {batcher.priority_levels}.")
        found["defaultPriorityLevel"] = batcher.default_priority_level
    if batcher.default_queue_policy:
        found["defaultQueuePolicy"] = _queue_policy(batcher.default_queue_policy)
    if batcher.priority_queue_policy:
        if not batcher.priority_levels:
            raise PyTritonBadParameterError(
                "Provide the `priority_levels` if you want to define `priority_queue_policy` "
                "for Dynamic Batching.")
        policies = {}
        for priority, policy in batcher.priority_queue_policy.items():
            if priority < 0 or priority > batcher.priority_levels:
                raise PyTritonBadParameterError(
                    f"Invalid `priority`={priority} provided. The value must be between "
                    f"1 and {batcher.priority_levels}.")
            policies[priority] = _queue_policy(policy)
        found["priorityQueuePolicy"] = policies
    return found


def _tensor(spec: TensorSpec) -> dict[str, Any]:
    item: dict[str, Any] = {"name": spec.name, "dims": [int(d) for d in spec.shape],
                            "data_type": triton_data_type(spec.dtype)}
    if spec.optional:
        item["optional"] = True
    return item


def model_config_dict(config: TritonModelConfig) -> dict[str, Any]:
    """The model's config as a dict in protobuf's JSON form."""
    found: dict[str, Any] = {"name": config.model_name, "backend": config.backend}
    if not config.batching:
        found["max_batch_size"] = 0
    else:
        if config.max_batch_size < 1:
            raise PyTritonBadParameterError("The `max_batch_size` must be greater or equal to 1.")
        found["max_batch_size"] = config.max_batch_size
        if isinstance(config.batcher, DynamicBatcher):
            found["dynamic_batching"] = _dynamic_batching(config.batcher)
    if config.inputs:
        found["input"] = [_tensor(spec) for spec in config.inputs]
    if config.outputs:
        optional = [spec.name for spec in config.outputs if spec.optional]
        if optional:
            raise PyTritonBadParameterError(
                "Optional flag for outputs is not supported. "
                f"Outputs marked as optional: {', '.join(optional)}.")
        found["output"] = [_tensor(spec) for spec in config.outputs]
    groups = [{"count": count, "kind": kind.value}
              for kind, count in config.instance_group.items()]
    if groups:
        found["instance_group"] = groups
    if config.decoupled:
        found["model_transaction_policy"] = {"decoupled": True}
    if config.backend_parameters:
        found["parameters"] = {key: {"string_value": str(value)}
                               for key, value in config.backend_parameters.items()}
    if config.response_cache:
        found["response_cache"] = {"enable": config.response_cache.enable}
    return found
