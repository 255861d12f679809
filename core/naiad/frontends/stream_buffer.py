"""Bounds on the responses a streaming frontend holds for a client that does not read.

A decoupled model sends responses at its own pace; gRPC ``ModelStreamInfer`` and HTTP
``generate_stream`` hand each one to a sender that waits while the client reads nothing
(grpc's flow control, uvicorn's write buffer). What the model sends meanwhile waits in the
frontend, and each waiting response keeps its outputs alive: for a Python model, a
shared-memory region, a file descriptor and a mapping per response. Without a bound a client
that opens a stream and never reads exhausts ``/dev/shm`` and the process's descriptors.

:class:`ResponseBudget` is that bound, with its two named settings:

- ``--stream-max-buffered-responses`` (responses): what one stream (a ``ModelStreamInfer``
  call, a ``generate_stream`` request) may hold. The stream that goes beyond it is ended:
  its requests are cancelled, its buffered responses dropped at once, and the client gets an
  error naming the flag.
- ``--stream-max-buffered-responses-total`` (responses): what every stream together may hold.
  Beyond it the stream holding the most is ended the same way, so one slow reader cannot
  take the budget of the others.

The model is not paused: naiad's backends have no way to hold a model's ``send`` back, so a
stream that cannot keep up ends with an error rather than waiting (see
docs/security-and-limits.md).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from naiad.server import InferenceServer

#: Defaults of the two flags (responses).
DEFAULT_MAX_BUFFERED_RESPONSES = 1024
DEFAULT_MAX_BUFFERED_RESPONSES_TOTAL = 4096

PER_STREAM_FLAG = "--stream-max-buffered-responses"
TOTAL_FLAG = "--stream-max-buffered-responses-total"


class StreamBuffer:
    """The count of one stream's buffered responses. :meth:`add` when a response is put
    aside for the client, :meth:`taken` when it left the buffer (sent, encoded or dropped),
    :meth:`close` when the stream is over. ``on_overflow(message)`` ends the stream; it is
    called at most once, on whichever thread added the response that overflowed, outside
    the budget's lock."""

    __slots__ = ("_budget", "_on_overflow", "count", "ended", "label")

    def __init__(self, budget: ResponseBudget, label: str,
                 on_overflow: Callable[[str], None]) -> None:
        self._budget = budget
        self._on_overflow = on_overflow
        self.label = label
        self.count = 0
        self.ended = False

    def add(self) -> bool:
        """Count one more buffered response; False when the stream was ended (now or
        before): drop the response instead of buffering it."""
        return self._budget._add(self)

    def taken(self, count: int = 1) -> None:
        """``count`` buffered responses left the buffer."""
        self._budget._take(self, count)

    def close(self) -> None:
        """The stream is over: what it still counted is given back to the total."""
        self._budget._close(self)

    def _overflowed(self, message: str) -> None:
        self._on_overflow(message)


class ResponseBudget:
    """The per-stream and server-wide bounds (``per_stream``, ``total``, in responses;
    0: no bound) shared by every streaming frontend of one server."""

    def __init__(self, per_stream: int = DEFAULT_MAX_BUFFERED_RESPONSES,
                 total: int = DEFAULT_MAX_BUFFERED_RESPONSES_TOTAL) -> None:
        self.per_stream = per_stream
        self.total = total
        self.buffered = 0  # every open stream's count together
        self._streams: set[StreamBuffer] = set()
        self._lock = threading.Lock()

    def open(self, label: str, on_overflow: Callable[[str], None]) -> StreamBuffer:
        """A counter for a new stream; ``label`` names it in messages (the RPC or route)."""
        buffer = StreamBuffer(self, label, on_overflow)
        with self._lock:
            self._streams.add(buffer)
        return buffer

    def _add(self, buffer: StreamBuffer) -> bool:
        victim: StreamBuffer | None = None
        message = ""
        with self._lock:
            if buffer.ended:
                return False
            buffer.count += 1
            self.buffered += 1
            if self.per_stream and buffer.count > self.per_stream:
                victim = buffer
                message = (f"{buffer.label}: the client read too slowly: "
                           f"{buffer.count - 1} responses were waiting for it, the most "
                           f"{PER_STREAM_FLAG}={self.per_stream} allows; the stream is ended "
                           f"and its requests are cancelled")
            elif self.total and self.buffered > self.total:
                victim = max(self._streams, key=lambda each: each.count)
                message = (f"{victim.label}: the client read too slowly: {victim.count} "
                           f"responses were waiting for it when the server's streams held "
                           f"{self.buffered - 1}, the most "
                           f"{TOTAL_FLAG}={self.total} allows; the stream is ended and its "
                           f"requests are cancelled")
            if victim is not None:
                victim.ended = True
                self._release(victim)
        if victim is not None:
            victim._overflowed(message)
        return victim is not buffer

    def _take(self, buffer: StreamBuffer, count: int) -> None:
        with self._lock:
            if buffer.ended:
                return  # given back when it was ended
            count = min(count, buffer.count)
            buffer.count -= count
            self.buffered -= count

    def _close(self, buffer: StreamBuffer) -> None:
        with self._lock:
            buffer.ended = True
            self._release(buffer)

    def _release(self, buffer: StreamBuffer) -> None:
        """Under the lock: ``buffer`` no longer counts."""
        if buffer in self._streams:
            self._streams.discard(buffer)
            self.buffered -= buffer.count
        buffer.count = 0


_BUDGETS: weakref.WeakKeyDictionary[InferenceServer, ResponseBudget] = \
    weakref.WeakKeyDictionary()
_BUDGETS_LOCK = threading.Lock()


def budget_of(server: InferenceServer) -> ResponseBudget:
    """The one budget every streaming frontend of ``server`` shares, from its options."""
    options = server.options
    with _BUDGETS_LOCK:
        try:
            budget = _BUDGETS.get(server)
        except TypeError:  # a stand-in server without weak references: its own budget
            return ResponseBudget(options.stream_max_buffered_responses,
                                  options.stream_max_buffered_responses_total)
        if budget is None:
            budget = _BUDGETS[server] = ResponseBudget(
                options.stream_max_buffered_responses,
                options.stream_max_buffered_responses_total)
        return budget


__all__ = ["DEFAULT_MAX_BUFFERED_RESPONSES", "DEFAULT_MAX_BUFFERED_RESPONSES_TOTAL",
           "PER_STREAM_FLAG", "TOTAL_FLAG", "ResponseBudget", "StreamBuffer", "budget_of"]
