"""The parameters naiad reads from an inference request and the type each must have: one
table for both frontends.

A row says what a parameter's value must be once decoded (a Python value: JSON gives
``bool``, ``int``, ``float``, ``str``; a gRPC ``InferParameter`` its one set field) and how
each protocol says so: HTTP in JSON words, gRPC by the ``InferParameter`` fields it takes,
as tritonserver's gRPC frontend names them ("invalid value type for 'priority' parameter,
expected int64_param or uint64_param"). A value of the wrong type is INVALID_ARG naming
the parameter, the model (and tensor) and the expected type, before the request is queued:
a scheduler never sees ``"high"`` as a priority or ``"yes"`` as a sequence start.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from naiad.errors import invalid_arg


@dataclass(frozen=True)
class Expected:
    """What one parameter's value must be."""

    json: str  # the JSON type, in the words of an HTTP answer
    grpc_fields: tuple[str, ...]  # the InferParameter fields gRPC accepts, in Triton's order
    test: Callable[[Any], bool]  # on the decoded value, of a field gRPC accepts

    @property
    def grpc(self) -> str:
        """The accepted fields as a gRPC answer says them: "int64_param or uint64_param"."""
        *first, last = self.grpc_fields
        return f"{', '.join(first)} or {last}" if first else last


def _is_bool(value: Any) -> bool:
    return value is True or value is False


def _is_uint(value: Any) -> bool:
    return type(value) is int and value >= 0


def _is_uint_or_string(value: Any) -> bool:
    return _is_uint(value) or type(value) is str


def _is_string(value: Any) -> bool:
    return type(value) is str


def _is_scalar(value: Any) -> bool:
    return type(value) in (int, float, bool, str)


BOOL = Expected("true or false", ("bool_param",), _is_bool)
UINT = Expected("an unsigned integer", ("int64_param", "uint64_param"), _is_uint)
REGION = Expected("a region name (a string)", ("string_param",), _is_string)
SEQUENCE_ID = Expected("an unsigned integer or a string",
                       ("int64_param", "uint64_param", "string_param"), _is_uint_or_string)

# The parameters tritonserver's frontends read. Tritonserver refuses a wrong type too (HTTP
# with a 500, naiad a 400; gRPC INVALID_ARGUMENT, as naiad).
REQUEST_PARAMETERS: dict[str, Expected] = {
    "binary_data_output": BOOL, "priority": UINT, "timeout": UINT,
    "sequence_id": SEQUENCE_ID, "sequence_start": BOOL, "sequence_end": BOOL,
}
INPUT_PARAMETERS: dict[str, Expected] = {
    "binary_data_size": UINT, "shared_memory_region": REGION,
    "shared_memory_byte_size": UINT, "shared_memory_offset": UINT,
}
OUTPUT_PARAMETERS: dict[str, Expected] = {
    "binary_data": BOOL, "classification": UINT, "shared_memory_region": REGION,
    "shared_memory_byte_size": UINT, "shared_memory_offset": UINT,
}
# Any other request parameter reaches the model: tritonserver takes integers, booleans and
# strings (and numbers, observed in 2.51 over HTTP); naiad the same on both protocols, so a
# model never sees a list, an object, a null or a gRPC parameter with no value.
CUSTOM = Expected("an integer, number, boolean or string",
                  ("int64_param", "uint64_param", "double_param", "bool_param",
                   "string_param"), _is_scalar)


def _shown(value: Any) -> str:
    try:
        text = orjson.dumps(value).decode()
    except TypeError:  # not JSON: bytes, from a gRPC map of ModelRepositoryParameter
        text = repr(value)
    return text if len(text) <= 40 else text[:40] + "..."


def check_json_parameters(params: Mapping[str, Any], known: Mapping[str, Expected],
                          what: str, custom: Expected | None = None) -> None:
    """Refuse (INVALID_ARG) a JSON parameter whose type is not the one ``known`` (for the
    others: ``custom``; None: anything) expects, naming ``what`` it belongs to ("model
    'm'"), the parameter, the expected type and the value."""
    for key, value in params.items():
        rule = known.get(key, custom)
        if rule is not None and not rule.test(value):
            raise invalid_arg(f"{what}: parameter '{key}' must be {rule.json}, got "
                              f"{_shown(value)}")


def grpc_parameters(params: Any, known: Mapping[str, Expected], what: str,
                    custom: Expected | None = None) -> dict[str, Any]:
    """A protobuf ``map<string, InferParameter>`` as a plain dict, each value checked as
    :func:`check_json_parameters` does, the answer in gRPC's words. An entry with no
    field set becomes None where no rule applies."""
    out: dict[str, Any] = {}
    for key, param in params.items():
        which = param.WhichOneof("parameter_choice")
        value = getattr(param, which) if which is not None else None
        rule = known.get(key, custom)
        if rule is not None:
            if which not in rule.grpc_fields:
                raise invalid_arg(f"invalid value type for '{key}' parameter of {what}, "
                                  f"expected {rule.grpc}, got "
                                  f"{which or 'no value'}"
                                  f"{'' if which is None else ' ' + _shown(value)}")
            if not rule.test(value):
                raise invalid_arg(f"invalid value for '{key}' parameter of {what}, expected "
                                  f"{rule.json}, got {which} {_shown(value)}")
        out[key] = value
    return out
