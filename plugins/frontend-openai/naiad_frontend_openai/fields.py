"""Reading an OpenAI request body: the fields the API defines, checked with FastAPI's
answers (422 for a body that does not match the schema, 400 for what is not supported).

Fields the frontend does not know are accepted and ignored (Triton's strictness there is
a complaint: triton-inference-server/server#8444); the ones that would change what the
answer means and that naiad cannot honour (``n`` > 1, ``logit_bias``, ``suffix``) are 400.
"""

from __future__ import annotations

from typing import Any

import orjson

from naiad_frontend_openai.errors import OpenAIError, bad_request, invalid_field

_NUMBER = (int, float)


def parse_body(raw: bytes) -> dict[str, Any]:
    """The JSON object a request body holds."""
    if not raw:
        raise invalid_field("Field required", [], "missing")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise OpenAIError(422, f"the request body is not JSON: {exc}", "invalid_json",
                          detail=[{"type": "json_invalid", "loc": ["body", 0],
                                   "msg": "JSON decode error"}]) from None
    if not isinstance(body, dict):
        raise invalid_field("Input should be a valid dictionary or object", [],
                            "model_attributes_type")
    return body


def required_str(body: dict[str, Any], name: str) -> str:
    if name not in body:
        raise invalid_field("Field required", [name], "missing")
    value = body[name]
    if not isinstance(value, str):
        raise invalid_field("Input should be a valid string", [name], "string_type")
    return value


def optional(body: dict[str, Any], name: str, kinds: type | tuple[type, ...],
             what: str, minimum: float | None = None, maximum: float | None = None) -> Any:
    """``body[name]`` when given (None when absent or null), checked against ``kinds`` and
    the bounds."""
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple)
                                                else (kinds,)):
        raise invalid_field(f"Input should be {what}", [name], "type_error")
    if not isinstance(value, kinds):
        raise invalid_field(f"Input should be {what}", [name], "type_error")
    if minimum is not None and value < minimum:
        raise invalid_field(f"Input should be greater than or equal to {minimum}", [name],
                            "greater_than_equal")
    if maximum is not None and value > maximum:
        raise invalid_field(f"Input should be less than or equal to {maximum}", [name],
                            "less_than_equal")
    return value


def stop_sequences(body: dict[str, Any]) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop]
    if isinstance(stop, list) and all(isinstance(item, str) for item in stop):
        if len(stop) > 4:
            raise bad_request("stop: at most 4 stop sequences are allowed", "stop")
        return [item for item in stop if item]
    raise invalid_field("Input should be a valid string or a list of strings", ["stop"],
                        "type_error")


def sampling(body: dict[str, Any]) -> dict[str, Any]:
    """The sampling parameters every model format carries, checked."""
    vllm_extensions(body)
    return {
        "temperature": optional(body, "temperature", _NUMBER, "a valid number", 0, 2),
        "top_p": optional(body, "top_p", _NUMBER, "a valid number", 0, 1),
        "frequency_penalty": optional(body, "frequency_penalty", _NUMBER, "a valid number",
                                      -2, 2),
        "presence_penalty": optional(body, "presence_penalty", _NUMBER, "a valid number",
                                     -2, 2),
        "seed": optional(body, "seed", int, "a valid integer", 0),
    }


def vllm_extensions(body: dict[str, Any]) -> None:
    """Check the extensions to the spec Triton's schema takes (vLLM's sampling
    parameters), when given."""
    optional(body, "top_k", int, "a valid integer", -1)
    optional(body, "min_tokens", int, "a valid integer", 0)
    optional(body, "min_p", _NUMBER, "a valid number", 0, 1)
    optional(body, "repetition_penalty", _NUMBER, "a valid number", 0)
    for flag in ("ignore_eos", "skip_special_tokens", "spaces_between_special_tokens",
                 "include_stop_str_in_output"):
        optional(body, flag, bool, "a valid boolean")
    stop_ids = body.get("stop_token_ids")
    if stop_ids is not None and not (isinstance(stop_ids, list) and all(
            isinstance(i, int) and not isinstance(i, bool) for i in stop_ids)):
        raise invalid_field("Input should be a list of integers", ["stop_token_ids"],
                            "list_type")


def common_refusals(body: dict[str, Any]) -> None:
    """What neither endpoint supports: more than one choice, logit_bias."""
    n = optional(body, "n", int, "a valid integer", 1, 128)
    if n is not None and n > 1:
        raise bad_request(f"Received n={n}, but only single choice (n=1) is currently "
                          f"supported", "n")
    if body.get("logit_bias") is not None:
        raise bad_request("logit bias is not currently supported", "logit_bias")


def stream_settings(body: dict[str, Any]) -> tuple[bool, bool]:
    """(stream, include_usage)."""
    stream = optional(body, "stream", bool, "a valid boolean") or False
    options = body.get("stream_options")
    if options is not None:
        if not isinstance(options, dict):
            raise invalid_field("Input should be a valid dictionary", ["stream_options"],
                                "dict_type")
        if not stream:
            raise bad_request("`stream_options` can only be used when `stream` is True",
                              "stream_options")
    include_usage = bool(options and options.get("include_usage"))
    return stream, include_usage
