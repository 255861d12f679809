"""Reading tool calls out of generated text: the ``llama3`` and ``mistral`` formats.

llama3 (Llama 3.1/3.2 JSON tool calling): optionally ``<|python_tag|>``, then one or more
``{"name": ..., "parameters": {...}}`` objects separated by ``;``. mistral: ``[TOOL_CALLS]``
then a JSON array of ``{"name": ..., "arguments": {...}}``.

Streaming: text that cannot (any longer) be a tool call streams as content at once; once it
is one, each call is sent as a ``tool_calls`` delta as soon as its JSON is complete. The
whole text so far is parsed again for every response, so the caller bounds its size
(``--max-tool-call-parse-bytes``).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

_DECODER = json.JSONDecoder()


@dataclass
class ToolCall:
    name: str
    arguments: str
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")

    def as_message(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}


def _call(item: Any, arguments_key: str) -> ToolCall | None:
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        return None
    arguments = item.get(arguments_key, item.get("arguments", item.get("parameters", {})))
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return ToolCall(item["name"], arguments)


class ToolCallParser:
    """One format; :meth:`parse` for a whole text, a :class:`StreamingToolCalls` per stream."""

    name = ""
    marker = ""

    def starts_call(self, text: str) -> bool | None:
        """True: ``text`` is a tool call; False: it cannot be; None: too early to tell."""
        stripped = text.lstrip()
        if not stripped:
            return None
        for opening in self.openings:
            if stripped.startswith(opening):
                return True
            if opening.startswith(stripped):
                return None
        return False

    openings: tuple[str, ...] = ()

    def complete_calls(self, text: str) -> tuple[list[ToolCall], bool]:
        """The calls whose JSON is complete in ``text``, and whether ``text`` is wholly
        tool calls that parsed (False: not a tool call, or malformed)."""
        raise NotImplementedError

    def parse(self, text: str) -> tuple[str | None, list[ToolCall]]:
        """(content, calls) of a whole generated text: content alone when it holds no
        (well-formed) tool call."""
        if self.starts_call(text):
            calls, whole = self.complete_calls(text)
            if calls and whole:
                return None, calls
        return text, []


class Llama3Parser(ToolCallParser):
    name = "llama3"
    openings = ("<|python_tag|>", "{")

    def complete_calls(self, text: str) -> tuple[list[ToolCall], bool]:
        body = text.strip()
        if body.startswith("<|python_tag|>"):
            body = body[len("<|python_tag|>"):]
        calls, position, whole = [], 0, True
        while True:
            while position < len(body) and body[position] in " \t\r\n;":
                position += 1
            if position >= len(body):
                break
            try:
                item, position = _DECODER.raw_decode(body, position)
            except json.JSONDecodeError:
                whole = False
                break
            call = _call(item, "parameters")
            if call is None:
                whole = False
                break
            calls.append(call)
        return calls, whole


class MistralParser(ToolCallParser):
    name = "mistral"
    openings = ("[TOOL_CALLS]",)

    def complete_calls(self, text: str) -> tuple[list[ToolCall], bool]:
        body = text.strip()[len("[TOOL_CALLS]"):].lstrip()
        if not body.startswith("["):
            return [], False
        calls, position = [], 1
        while True:
            while position < len(body) and body[position] in " \t\r\n,":
                position += 1
            if position >= len(body):
                return calls, False
            if body[position] == "]":
                return calls, body[position + 1:].strip() == ""
            try:
                item, position = _DECODER.raw_decode(body, position)
            except json.JSONDecodeError:
                return calls, False
            call = _call(item, "arguments")
            if call is None:
                return calls, False
            calls.append(call)


PARSERS: dict[str, type[ToolCallParser]] = {"llama3": Llama3Parser, "mistral": MistralParser}


class StreamingToolCalls:
    """One streamed generation through a parser: what each new piece of text sends."""

    def __init__(self, parser: ToolCallParser) -> None:
        self.parser = parser
        self.text = ""
        self.mode: bool | None = None  # None: undecided; True: tool calls; False: content
        self.sent: list[ToolCall] = []

    def feed(self, delta: str, final: bool) -> list[dict[str, Any]]:
        """The chat deltas (``{"content": ...}`` or ``{"tool_calls": [...]}``) to send for
        ``delta``; on the ``final`` piece, everything still held back."""
        self.text += delta
        if self.mode is None:
            self.mode = self.parser.starts_call(self.text)
            if self.mode is False or (self.mode is None and final):
                self.mode = False
                return [{"content": self.text}] if self.text else []
            if self.mode is None:
                return []
        if self.mode is False:
            return [{"content": delta}] if delta else []
        calls, whole = self.parser.complete_calls(self.text)
        deltas = []
        for index in range(len(self.sent), len(calls)):
            call = calls[index]
            self.sent.append(call)
            deltas.append({"tool_calls": [{"index": index, **call.as_message()}]})
        if final and not self.sent and not whole:
            # Not a tool call after all: what was held back is the content.
            self.mode = False
            return [{"content": self.text}]
        return deltas

    @property
    def called(self) -> bool:
        return bool(self.sent)
