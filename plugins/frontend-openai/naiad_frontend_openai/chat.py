"""``POST /v1/chat/completions``: messages through the chat template, plain or streamed.

Streaming follows OpenAI's chunks: a first chunk with the role alone, content (or
``tool_calls``) deltas, a last chunk with ``finish_reason``, a usage chunk with no choices
when ``stream_options.include_usage``, then ``data: [DONE]``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from naiad_frontend_openai import fields
from naiad_frontend_openai.errors import OpenAIError, bad_request, invalid_field, server_error
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
from naiad_frontend_openai.tool_parsers import StreamingToolCalls, ToolCall


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    if "messages" not in body:
        raise invalid_field("Field required", ["messages"], "missing")
    messages = body["messages"]
    if not isinstance(messages, list):
        raise invalid_field("Input should be a valid list", ["messages"], "list_type")
    if not messages:
        raise invalid_field("List should have at least 1 item after validation, not 0",
                            ["messages"], "too_short")
    conversation = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise invalid_field("Input should be a valid dictionary", ["messages", index],
                                "dict_type")
        if "role" not in message:
            raise invalid_field("Field required", ["messages", index, "role"], "missing")
        content = message.get("content")
        if isinstance(content, list):  # content parts: the text ones, joined
            texts = [part.get("text", "") for part in content
                     if isinstance(part, dict) and part.get("type") == "text"]
            if len(texts) != len(content):
                raise bad_request(f"messages[{index}].content: only text parts are "
                                  f"supported", "messages")
            content = "".join(texts)
        conversation.append({**message, "content": content})
    return conversation


def _tool_choice(body: dict[str, Any], service: OpenAIService
                 ) -> tuple[list[dict] | None, str | None, bool]:
    """(tools for the template, the function a named or required choice forces, whether
    the parser reads the output for tool calls: choice auto)."""
    tools = body.get("tools")
    choice = body.get("tool_choice")
    if tools is not None and (not isinstance(tools, list) or not all(
            isinstance(tool, dict) and isinstance(tool.get("function"), dict)
            and isinstance(tool["function"].get("name"), str) for tool in tools)):
        raise invalid_field("Input should be a list of function tools", ["tools"],
                            "type_error")
    if choice == "none":
        return tools or None, None, False
    if choice == "required":
        if not tools:
            raise bad_request('"required" tool choice requires '
                              'CreateChatCompletionRequest.tools to be provided', "tool_choice")
        return tools, tools[0]["function"]["name"], False
    if isinstance(choice, dict):
        if not tools:
            raise bad_request("Named tool choice requires CreateChatCompletionRequest.tools "
                              "to be provided", "tool_choice")
        name = (choice.get("function") or {}).get("name")
        if name not in {tool["function"]["name"] for tool in tools}:
            raise bad_request(f"Tool '{name}' has not been passed in `tools`.", "tool_choice")
        return tools, name, False
    if choice not in (None, "auto"):
        raise invalid_field("Input should be 'none', 'auto', 'required' or a named tool",
                            ["tool_choice"], "enum")
    if choice == "auto" and service.tool_parser is None:
        raise bad_request('"auto" tool choice requires --tool-call-parser to be set',
                          "tool_choice")
    if tools and service.tool_parser is None:
        raise bad_request("having tools in the request requires --tool-call-parser to be set",
                          "tools")
    return tools or None, None, bool(tools)


async def chat_completions(service: OpenAIService, request: Request) -> Response:
    body = fields.parse_body(await request.body())
    name = fields.required_str(body, "model")
    conversation = _messages(body)
    fields.common_refusals(body)
    stream, include_usage = fields.stream_settings(body)
    if body.get("logprobs") or body.get("top_logprobs") is not None:
        raise bad_request("logprobs are currently available only for the vLLM backend",
                          "logprobs")
    tools, forced_function, parse_tools = _tool_choice(body, service)
    max_tokens = (fields.optional(body, "max_completion_tokens", int, "a valid integer", 1)
                  or fields.optional(body, "max_tokens", int, "a valid integer", 1)
                  or service.settings.default_max_tokens)
    model, model_format = service.model(name)
    tokenizer = await service.tokenizers.get(model)
    if tokenizer is None:
        raise server_error("Unknown tokenizer")
    prompt = service.tokenizers.apply_chat_template(tokenizer, conversation, tools)
    generation = Generation(prompt=prompt, stream=stream, max_tokens=max_tokens,
                            stop=fields.stop_sequences(body), extra=body,
                            **fields.sampling(body))
    request_id = new_id("chatcmpl")
    responses = service.start(model, build_request(model_format, generation, request_id))
    text = TextGeneration(responses, generation.stop, max_tokens)
    chat = _Chat(service, name, request_id, text, tokenizer, prompt, include_usage,
                 forced_function, parse_tools)
    if stream:
        return event_stream(chat.chunks(), responses.cancel)
    return json_response(await unless_disconnected(request, chat.answer(), responses.cancel))


class _Chat:
    """One chat completion's answer, whole or as chunks."""

    def __init__(self, service: OpenAIService, model: str, request_id: str,
                 text: TextGeneration, tokenizer: Any, prompt: str, include_usage: bool,
                 forced_function: str | None, parse_tools: bool) -> None:
        self.service = service
        self.model = model
        self.id = request_id
        self.created = int(time.time())
        self.text = text
        self.tokenizer = tokenizer
        self.prompt = prompt
        self.include_usage = include_usage
        self.forced_function = forced_function
        self.parse_tools = parse_tools

    def _usage(self, completion: str) -> dict[str, int]:
        prompt_tokens = self.text.prompt_tokens
        completion_tokens = self.text.completion_tokens
        if prompt_tokens is None:
            prompt_tokens = count_tokens(self.tokenizer, self.prompt)
        if completion_tokens is None:
            completion_tokens = count_tokens(self.tokenizer, completion)
        return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens}

    async def answer(self) -> dict[str, Any]:
        pieces = [piece async for piece in self.text.deltas()]
        completion = "".join(pieces)
        message: dict[str, Any] = {"role": "assistant", "content": completion}
        finish_reason = self.text.finish_reason
        if self.forced_function is not None:
            call = ToolCall(self.forced_function, completion)
            message = {"role": "assistant", "content": "", "tool_calls": [call.as_message()]}
        elif self.parse_tools and self.service.tool_parser is not None:
            content, calls = self.service.tool_parser.parse(completion)
            if calls:
                message = {"role": "assistant", "content": content,
                           "tool_calls": [call.as_message() for call in calls]}
                finish_reason = "tool_calls"
        return {"id": self.id, "object": "chat.completion", "created": self.created,
                "model": self.model, "system_fingerprint": None,
                "choices": [{"index": 0, "message": message, "logprobs": None,
                             "finish_reason": finish_reason}],
                "usage": self._usage(completion)}

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        chunk: dict[str, Any] = {
            "id": self.id, "object": "chat.completion.chunk", "created": self.created,
            "model": self.model, "system_fingerprint": None,
            "choices": [{"index": 0, "delta": delta, "logprobs": None,
                         "finish_reason": finish_reason}]}
        if self.include_usage:
            chunk["usage"] = None
        return sse(chunk)

    async def chunks(self) -> AsyncIterator[bytes]:
        yield self._chunk({"role": "assistant"})
        tools = (StreamingToolCalls(self.service.tool_parser)
                 if self.parse_tools and self.service.tool_parser is not None else None)
        limit = self.service.settings.max_tool_call_parse_bytes
        completion: list[str] = []
        finish_reason: str | None = None
        forced_id = None
        parsed_bytes = 0
        async for piece in self.text.deltas():
            completion.append(piece)
            if self.forced_function is not None:
                call: dict[str, Any] = {"index": 0, "function": {"arguments": piece}}
                if forced_id is None:
                    forced_id = ToolCall(self.forced_function, "").id
                    call.update(id=forced_id, type="function",
                                function={"name": self.forced_function, "arguments": piece})
                yield self._chunk({"tool_calls": [call]})
                continue
            if tools is None:
                yield self._chunk({"content": piece})
                continue
            parsed_bytes += len(piece.encode())
            if parsed_bytes > limit:
                # The parser re-reads everything so far: past the bound, stop the model.
                self.text.cancel()
                finish_reason = "length"
                break
            for delta in tools.feed(piece, final=False):
                yield self._chunk(delta)
        if tools is not None and finish_reason is None:
            for delta in tools.feed("", final=True):
                yield self._chunk(delta)
        if finish_reason is None:
            finish_reason = ("tool_calls" if tools is not None and tools.called
                             else self.text.finish_reason)
        yield self._chunk({}, finish_reason)
        if self.include_usage:
            yield sse({"id": self.id, "object": "chat.completion.chunk",
                       "created": self.created, "model": self.model,
                       "system_fingerprint": None, "choices": [],
                       "usage": self._usage("".join(completion))})
        yield SSE_DONE


__all__ = ["OpenAIError", "chat_completions"]
