"""``POST /v1/embeddings`` for models in vLLM's embedding format: an ``embedding_request``
input (JSON: ``input``, ``pooling_params``) and the embedding as a JSON list in
``text_output``. Several inputs are sent as one request each, concurrently."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import numpy as np
from starlette.requests import Request
from starlette.responses import Response

from naiad_frontend_openai import fields
from naiad_frontend_openai.errors import bad_request, invalid_field, server_error
from naiad_frontend_openai.formats import embedding_request, output_text, token_counts
from naiad_frontend_openai.service import OpenAIService, json_response, new_id

#: most inputs one embeddings request may hold (OpenAI's own limit)
MAX_INPUTS = 2048


def _inputs(body: dict[str, Any]) -> list[str]:
    if "input" not in body:
        raise invalid_field("Field required", ["input"], "missing")
    given = body["input"]
    inputs = [given] if isinstance(given, str) else given
    if not isinstance(inputs, list) or not all(isinstance(item, str) for item in inputs):
        raise bad_request("input: only a string or a list of strings is supported (not "
                          "token arrays)", "input")
    if not inputs or any(not item for item in inputs):
        raise bad_request("input must be non-empty", "input")
    if len(inputs) > MAX_INPUTS:
        raise bad_request(f"input: at most {MAX_INPUTS} inputs per request", "input")
    return inputs


async def embeddings(service: OpenAIService, request: Request) -> Response:
    body = fields.parse_body(await request.body())
    name = fields.required_str(body, "model")
    inputs = _inputs(body)
    encoding = body.get("encoding_format") or "float"
    if encoding not in ("float", "base64"):
        raise invalid_field("Input should be 'float' or 'base64'", ["encoding_format"],
                            "enum")
    dimensions = fields.optional(body, "dimensions", int, "a valid integer", 1)
    model, model_format = service.model(name)
    request_id = new_id("embd")

    async def one(index: int, text: str) -> tuple[list[float], int | None]:
        stream = service.start(model, embedding_request(model_format, [text], dimensions,
                                                        f"{request_id}-{index}"))
        responses = await stream.collect()
        if not responses:
            raise server_error(f"model '{name}' sent no embedding")
        try:
            vector = json.loads(output_text(responses[-1]))
        except json.JSONDecodeError as exc:
            raise server_error(f"model '{name}': text_output is not a JSON list of numbers: "
                               f"{exc}") from None
        if not isinstance(vector, list) or not all(isinstance(v, (int, float))
                                                   for v in vector):
            raise server_error(f"model '{name}': text_output is not a JSON list of numbers")
        return vector, token_counts(responses[-1])[0]

    results = await asyncio.gather(*(one(i, text) for i, text in enumerate(inputs)))
    data = []
    for index, (vector, _) in enumerate(results):
        embedding: Any = vector
        if encoding == "base64":
            embedding = base64.b64encode(np.asarray(vector, np.float32).tobytes()).decode()
        data.append({"object": "embedding", "index": index, "embedding": embedding})
    counted = [tokens for _, tokens in results]
    prompt_tokens = sum(counted) if all(t is not None for t in counted) else 0  # type: ignore[misc]
    return json_response({"object": "list", "data": data, "model": name,
                          "usage": {"prompt_tokens": prompt_tokens,
                                    "total_tokens": prompt_tokens}})
