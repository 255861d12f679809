"""``POST /v1/completions``: one prompt, plain or streamed."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from naiad_frontend_openai import fields
from naiad_frontend_openai.errors import bad_request, invalid_field
from naiad_frontend_openai.formats import Generation, build_request
from naiad_frontend_openai.generation import TextGeneration
from naiad_frontend_openai.service import (
    SSE_DONE,
    OpenAIService,
    event_stream,
    json_response,
    new_id,
    sse,
    unless_disconnected,
)
from naiad_frontend_openai.tokenizer import count_tokens


def _prompt(body: dict[str, Any]) -> str:
    if "prompt" not in body:
        raise invalid_field("Field required", ["prompt"], "missing")
    prompt = body["prompt"]
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not prompt:
        raise bad_request("prompt must be non-empty", "prompt")
    if not isinstance(prompt, str):
        raise bad_request("only single string input is supported", "prompt")
    return prompt


async def completions(service: OpenAIService, request: Request) -> Response:
    body = fields.parse_body(await request.body())
    name = fields.required_str(body, "model")
    prompt = _prompt(body)
    if body.get("suffix") is not None:
        raise bad_request("suffix is not currently supported", "suffix")
    fields.common_refusals(body)
    best_of = fields.optional(body, "best_of", int, "a valid integer", 0, 20)
    if best_of is not None and best_of > 1:
        raise bad_request(f"Received best_of={best_of}, but only single choice (best_of=1) "
                          f"is currently supported", "best_of")
    logprobs = fields.optional(body, "logprobs", int, "a valid integer", 0, 5)
    if logprobs:
        raise bad_request("logprobs are currently available only for the vLLM backend",
                          "logprobs")
    stream, include_usage = fields.stream_settings(body)
    echo = fields.optional(body, "echo", bool, "a valid boolean")
    max_tokens = (fields.optional(body, "max_tokens", int, "a valid integer", 1)
                  or service.settings.default_max_tokens)
    model, model_format = service.model(name)
    generation = Generation(prompt=prompt, stream=stream, max_tokens=max_tokens,
                            stop=fields.stop_sequences(body), echo=echo, extra=body,
                            **fields.sampling(body))
    request_id = new_id("cmpl")
    responses = service.start(model, build_request(model_format, generation, request_id))
    # A model without an echo input gets the prompt put in front here instead.
    echo_here = bool(echo) and model_format.echo_input is None
    tokenizer = await service.tokenizers.get(model)
    completion = _Completion(name, request_id, TextGeneration(
        responses, generation.stop, max_tokens), tokenizer, prompt, include_usage, echo_here)
    if stream:
        return event_stream(completion.chunks(), responses.cancel)
    return json_response(await unless_disconnected(request, completion.answer(),
                                                   responses.cancel))


class _Completion:
    def __init__(self, model: str, request_id: str, text: TextGeneration, tokenizer: Any,
                 prompt: str, include_usage: bool, echo_here: bool) -> None:
        self.model = model
        self.id = request_id
        self.created = int(time.time())
        self.text = text
        self.tokenizer = tokenizer
        self.prompt = prompt
        self.include_usage = include_usage
        self.echo_here = echo_here

    def _usage(self, completion: str) -> dict[str, int] | None:
        prompt_tokens = self.text.prompt_tokens
        completion_tokens = self.text.completion_tokens
        if self.tokenizer is not None:
            if prompt_tokens is None:
                prompt_tokens = count_tokens(self.tokenizer, self.prompt)
            if completion_tokens is None:
                completion_tokens = count_tokens(self.tokenizer, completion)
        if prompt_tokens is None or completion_tokens is None:
            return None  # neither the model nor a tokenizer can say
        return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens}

    def _body(self, text: str, finish_reason: str | None) -> dict[str, Any]:
        return {"id": self.id, "object": "text_completion", "created": self.created,
                "model": self.model, "system_fingerprint": None,
                "choices": [{"index": 0, "text": text, "logprobs": None,
                             "finish_reason": finish_reason}]}

    async def answer(self) -> dict[str, Any]:
        completion = "".join([piece async for piece in self.text.deltas()])
        text = self.prompt + completion if self.echo_here else completion
        body = self._body(text, self.text.finish_reason)
        body["usage"] = self._usage(completion)
        return body

    async def chunks(self) -> AsyncIterator[bytes]:
        if self.echo_here:
            yield sse(self._body(self.prompt, None))
        completion = []
        async for piece in self.text.deltas():
            completion.append(piece)
            yield sse(self._body(piece, None))
        yield sse(self._body("", self.text.finish_reason))
        if self.include_usage:
            usage = self._usage("".join(completion))
            if usage is not None:
                yield sse({**self._body("", None), "choices": [], "usage": usage})
        yield SSE_DONE
