"""Running requests on the server's models from the event loop, response by response.

``InferenceServer.stream`` calls back on model threads; :class:`ResponseStream` hands each
response to the loop (``call_soon_threadsafe``) and yields them in order. Closing the stream
early (the client went away, the tool-call parser gave up) cancels the request: its
``Cancellation`` withdraws it from the queue and lets a decoupled model see
``request.is_cancelled()`` and stop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from naiad.errors import InferenceServerError
from naiad.types import Cancellation, InferenceRequest, InferenceResponse
from naiad_frontend_openai.errors import OpenAIError, from_server_error


class Admission:
    """At most ``limit`` generations under way; the rest are refused (503), not queued
    without bound."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.active = 0

    def enter(self) -> None:
        if self.active >= self.limit:
            raise OpenAIError(503, f"the OpenAI frontend has {self.active} generations under "
                              f"way, its limit (--openai-max-concurrent-streams "
                              f"{self.limit}); try again later", "too_many_requests")
        self.active += 1

    def leave(self) -> None:
        self.active -= 1


class ResponseStream:
    """The responses of one request, as an async iterator; ``cancel()`` gives it up."""

    def __init__(self, server: Any, model: Any, request: InferenceRequest,
                 admission: Admission) -> None:
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue[tuple[InferenceResponse | None, bool]] = asyncio.Queue()
        self.request = request
        self.cancellation = request.cancellation = Cancellation()
        self.done = False
        self.admission = admission
        admission.enter()
        try:
            server.stream(model, request, self._on_response)
        except InferenceServerError as exc:
            admission.leave()
            raise from_server_error(exc) from None
        except BaseException:
            admission.leave()
            raise

    def _on_response(self, response: InferenceResponse | None, final: bool) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, (response, final))
        if final:  # the request is over, read or not: it no longer counts
            self.loop.call_soon_threadsafe(self._finish)

    async def __aiter__(self) -> AsyncIterator[tuple[InferenceResponse, bool]]:
        """Each response with whether it is the last; a failed one raises OpenAIError. The
        final flag alone (no response) comes as an empty response."""
        try:
            while True:
                response, final = await self.queue.get()
                if final:
                    self._finish()
                if response is not None and response.error is not None:
                    raise from_server_error(response.error)
                yield (response or InferenceResponse()), final
                if final:
                    return
        finally:
            if not self.done:
                self.cancel()

    def cancel(self) -> None:
        """Give the request up (idempotent): the model may stop early."""
        if not self.done:
            self.cancellation.cancel()
            self._finish()

    def _finish(self) -> None:
        if not self.done:
            self.done = True
            self.admission.leave()

    async def collect(self) -> list[InferenceResponse]:
        """Every response (a non-streaming answer)."""
        return [response async for response, _ in self]
