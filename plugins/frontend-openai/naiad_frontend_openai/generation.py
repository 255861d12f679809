"""One generation as text: a model's responses read as text deltas, with stop sequences,
token counts and the finish reason. Shared by chat and completions.

Stop sequences reach the model (``stop_words``, vLLM's ``stop``) and are applied here as
well, so a model that does not take them still stops where the client asked: the text is
cut before the first stop sequence, the model's work is cancelled, and up to the longest
stop sequence's length minus one character is held back while it could still start one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from naiad_frontend_openai.engine import ResponseStream
from naiad_frontend_openai.formats import output_text, token_counts


class StopMatcher:
    """Cuts a stream of text at the first of ``stops``."""

    def __init__(self, stops: list[str]) -> None:
        self.stops = [stop for stop in stops if stop]
        self.hold = max((len(stop) for stop in self.stops), default=1) - 1
        self.pending = ""
        self.stopped = False

    def feed(self, delta: str) -> str:
        """The text that may be sent now."""
        if not self.stops:
            return delta
        self.pending += delta
        found = [index for index in (self.pending.find(stop) for stop in self.stops)
                 if index >= 0]
        if found:
            self.stopped = True
            text, self.pending = self.pending[:min(found)], ""
            return text
        if len(self.pending) <= self.hold:
            return ""
        cut = len(self.pending) - self.hold
        text, self.pending = self.pending[:cut], self.pending[cut:]
        return text

    def flush(self) -> str:
        text, self.pending = self.pending, ""
        return text


class TextGeneration:
    """The text deltas of one request's responses (async iteration), then its outcome:
    :attr:`finish_reason`, :attr:`prompt_tokens`, :attr:`completion_tokens` (None where the
    model does not report them)."""

    def __init__(self, responses: ResponseStream, stops: list[str], max_tokens: int) -> None:
        self.responses = responses
        self.matcher = StopMatcher(stops)
        self.max_tokens = max_tokens
        self.finish_reason = "stop"
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.response_count = 0

    def _count(self, response: Any) -> None:
        prompt, completion = token_counts(response)
        if prompt is not None and self.prompt_tokens is None:
            self.prompt_tokens = prompt
        if completion is not None:
            self.completion_tokens = (self.completion_tokens or 0) + completion

    async def deltas(self) -> AsyncIterator[str]:
        """Each piece of text to send, in order (empty pieces left out)."""
        async for response, _final in self.responses:
            self.response_count += 1
            self._count(response)
            text = self.matcher.feed(output_text(response))
            if text:
                yield text
            if self.matcher.stopped:
                self.responses.cancel()
                return
        rest = self.matcher.flush()
        if rest:
            yield rest
        if self.completion_tokens is not None and self.completion_tokens >= self.max_tokens:
            self.finish_reason = "length"

    def cancel(self) -> None:
        self.responses.cancel()
