"""The OpenAI frontend's settings, each with its unit, read from ``naiad serve``'s flags."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

BYTES = 1
MIB = 1024 * 1024 * BYTES
SECONDS = 1.0

#: API group -> the "METHOD /path-prefix" routes it covers (Triton's ENDPOINT_MAPPING)
API_GROUPS: dict[str, tuple[str, ...]] = {
    "inference": ("POST /v1/chat/completions", "POST /v1/completions", "POST /v1/embeddings"),
    "model-repository": ("GET /v1/models", "POST /v1/models/"),
    "metrics": ("GET /metrics",),
    "health": ("GET /health/ready",),
}


def parse_restrictions(given: list[list[str]]) -> dict[str, tuple[str, str]]:
    """``--openai-restricted-api APIS HEADER VALUE`` (repeatable) -> API -> (header, value).
    Raises ValueError naming an unknown or twice-restricted API, as Triton does."""
    restrictions: dict[str, tuple[str, str]] = {}
    for apis, header, value in given:
        for api in apis.split(","):
            if api not in API_GROUPS:
                raise ValueError(f"Unknown API '{api}'. Available APIs: {list(API_GROUPS)}")
            if api in restrictions:
                raise ValueError(f"restricted api '{api}' can not be specified in multiple "
                                 f"config groups")
            restrictions[api] = (header.lower(), value)
    return restrictions


@dataclass(frozen=True)
class OpenAISettings:
    address: str = "0.0.0.0"
    port: int = 9000
    #: SO_REUSEPORT: other processes that set it too may listen on the port
    reuse_port: bool = False
    #: a tokenizer folder or hub id for every model without one in its folder; None: none
    tokenizer: str | None = None
    #: a Jinja chat template file overriding the tokenizers'
    chat_template: Path | None = None
    tool_call_parser: str | None = None
    max_tool_call_parse_bytes: int = 1 * MIB
    default_max_tokens: int = 16
    #: "vllm" or "tensorrtllm" for every model; None: by each model's backend
    request_format: str | None = None
    restrictions: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: largest request body (naiad's --http-max-input-size, as Triton's frontend)
    max_body_bytes: int = 64 * MIB
    #: generations under way at once; more are refused with 503
    max_concurrent_streams: int = 1024
    #: how long a request body may take to arrive in full
    body_timeout_s: float = 60 * SECONDS
    #: how long stop() lets the responses under way finish before it closes connections
    drain_timeout_s: float = 5 * SECONDS

    @classmethod
    def from_options(cls, options: argparse.Namespace) -> OpenAISettings:
        """Settings from the parsed flags; raises ValueError for a bad restriction."""
        template = getattr(options, "chat_template", None)
        return cls(
            address=(options.openai_address
                     or getattr(options, "http_address", None) or "0.0.0.0"),
            port=options.openai_port,
            reuse_port=options.reuse_openai_port,
            tokenizer=options.tokenizer,
            chat_template=Path(template) if template else None,
            tool_call_parser=options.tool_call_parser,
            max_tool_call_parse_bytes=options.max_tool_call_parse_bytes,
            default_max_tokens=options.default_max_tokens,
            request_format=options.openai_request_format,
            restrictions=parse_restrictions(options.openai_restricted_api or []),
            max_body_bytes=getattr(options, "http_max_input_size", 64 * MIB),
            max_concurrent_streams=options.openai_max_concurrent_streams,
        )
