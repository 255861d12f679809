"""The JSON of ``GET /v2/models/{m}/config``, shaped exactly as tritonserver 2.51 sends it.

Triton prints the protobuf with ``preserve_proto_field_names`` and
``always_print_primitive_fields`` (so snake_case keys, every scalar, enum, repeated and map
field present, unset sub-messages absent), then turns *some* 64-bit fields back from the
strings protobuf's JSON uses into numbers (``ModelConfigToJson`` in
triton-inference-server/core ``model_config_utils.cc``). The others stay strings in Triton's
answer, so they stay strings here: ``instance_group.secondary_devices.device_id``,
``sequence_batching.state.initial_state.dims`` (Triton looks for ``initial_state`` in the
wrong object) and the CUDA graph shapes under ``optimization``.
"""

from __future__ import annotations

import inspect
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from tritonclient.grpc.model_config_pb2 import ModelConfig

# Dotted field paths (map values share their map's path) that Triton prints as numbers.
NUMERIC_INT64_FIELDS = frozenset({
    "input.dims",
    "input.reshape.shape",
    "output.dims",
    "output.reshape.shape",
    "version_policy.specific.versions",
    "dynamic_batching.max_queue_delay_microseconds",
    "dynamic_batching.priority_levels",
    "dynamic_batching.default_priority_level",
    "dynamic_batching.default_queue_policy.default_timeout_microseconds",
    "dynamic_batching.priority_queue_policy.default_timeout_microseconds",
    "sequence_batching.max_sequence_idle_microseconds",
    "sequence_batching.oldest.max_queue_delay_microseconds",
    "sequence_batching.direct.max_queue_delay_microseconds",
    "sequence_batching.state.dims",
    "ensemble_scheduling.step.model_version",
    "model_warmup.inputs.dims",
})

# Fields tritonclient's schema has but tritonserver 2.51's lacks: printed only when set, so a
# config that does not use them renders as 2.51 renders it.
NEWER_THAN_TRITON_2_51 = frozenset({"ensemble_scheduling.max_inflight_requests", "model_metrics"})

_INT64_TYPES = frozenset({
    FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_FIXED64, FieldDescriptor.TYPE_SFIXED64,
})
_FLOAT_TYPES = frozenset({FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE})
# protobuf 5.26 renamed the option that prints fields left at their default value.
_NEW_OPTION = "always_print_fields_with_no_presence"
_PRINT_ALL = {
    _NEW_OPTION if _NEW_OPTION in inspect.signature(json_format.MessageToDict).parameters
    else "including_default_value_fields": True
}
# C++ prints a whole float without a fraction ("1", not "1.0") up to its exponent form.
_WHOLE_FLOAT_LIMIT = 1e15


def config_to_json(config: ModelConfig) -> dict[str, Any]:
    """``config`` as the dict Triton serves: keys in .proto declaration order, int64 fields
    numbers where Triton makes them numbers, map entries sorted by key (Triton prints them in
    its hash table's order, which no client can rely on)."""
    raw = json_format.MessageToDict(config, preserving_proto_field_name=True, **_PRINT_ALL)
    return _message(raw, config.DESCRIPTOR, "")


def _message(raw: dict[str, Any], descriptor: Descriptor, prefix: str) -> dict[str, Any]:
    # Python's printer puts set fields first. Triton's (C++) follows declaration order,
    # except that a scalar member of a oneof comes after all other fields.
    fields = sorted(descriptor.fields, key=_is_oneof_scalar)
    out: dict[str, Any] = {}
    for field in fields:
        if field.name not in raw:
            continue
        path = f"{prefix}{field.name}"
        value = raw[field.name]
        if path in NEWER_THAN_TRITON_2_51 and not value:
            continue
        if _is_map(field):
            out[field.name] = _map(value, field, path)
        elif isinstance(value, list):
            out[field.name] = [_value(v, field, path) for v in value]
        else:
            out[field.name] = _value(value, field, path)
    return out


def _map(raw: dict[str, Any], field: FieldDescriptor, path: str) -> dict[str, Any]:
    key_field = field.message_type.fields_by_name["key"]
    value_field = field.message_type.fields_by_name["value"]
    numeric_keys = key_field.cpp_type in (
        FieldDescriptor.CPPTYPE_INT32, FieldDescriptor.CPPTYPE_INT64,
        FieldDescriptor.CPPTYPE_UINT32, FieldDescriptor.CPPTYPE_UINT64)
    keys = sorted(raw, key=int) if numeric_keys else sorted(raw)
    return {key: _value(raw[key], value_field, path) for key in keys}


def _value(value: Any, field: FieldDescriptor, path: str) -> Any:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return _message(value, field.message_type, f"{path}.")
    if field.type in _INT64_TYPES and path in NUMERIC_INT64_FIELDS:
        return int(value)
    if (field.type in _FLOAT_TYPES and isinstance(value, float) and value.is_integer()
            and abs(value) < _WHOLE_FLOAT_LIMIT):
        return int(value)
    return value


def _is_map(field: FieldDescriptor) -> bool:
    return (field.type == FieldDescriptor.TYPE_MESSAGE
            and field.message_type.GetOptions().map_entry)


def _is_oneof_scalar(field: FieldDescriptor) -> bool:
    return field.containing_oneof is not None and field.type != FieldDescriptor.TYPE_MESSAGE
