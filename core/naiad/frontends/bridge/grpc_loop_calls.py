"""``ModelInfer`` and ``ModelStreamInfer`` of grpc's thread-pool server in a frontend process
(``--grpc-server=grpcio``), sent on the frontend's HTTP link to the engine's event loop, as
naiad's gRPC server there sends them (``GRPC_INFER``, ``GRPC_STREAM``: :mod:`.frames`).

Why: sent as ``CALL`` exchanges on the gRPC link (:mod:`.grpc_engine`), each ran on a thread
of the engine's, and an open stream held one for as long as it was open. Here the engine
answers them on its loop with no thread of its own, whichever gRPC server the frontend runs.

In the frontend each call keeps grpc's threads, as in a single-process grpcio server: its
handler thread waits for the answer, or yields a stream's responses as the engine sends
them, and a stream's requests are read on a thread of their own. The link belongs to the
frontend's event loop: a thread hands it what to write with ``call_soon_threadsafe``, and
the loop hands a thread the engine's answers through a queue.

A stream's responses reach the client's connection when grpc takes them from the handler
(grpc's server asks for the next one once it sent the last), so the handler reports them
``SENT`` from there, a quarter of :data:`~.frames.ANSWER_WINDOW_BYTES` at a time: a client
that does not read leaves at most that window in this process, and the rest waits in the
engine, counted against the stream's bound (``--stream-max-buffered-responses``).
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from naiad.frontends.bridge import frames
from naiad.frontends.bridge.frontend import EngineLink, ForwardedGRPCInfer, StreamExchange
from naiad.frontends.grpc.stream import call_ender

_SHUTTING_DOWN = (grpc.StatusCode.UNAVAILABLE, "the server is shutting down")
# What a handler thread waiting on the engine gets when its call ended on the client's side
# (grpc answers the client itself: this only wakes the thread).
_ENDED = (grpc.StatusCode.CANCELLED, "the call ended on the client's side")
#: Response bytes a stream's handler lets the client take before it reports them SENT.
REPORT_BYTES = frames.ANSWER_WINDOW_BYTES // 4


class LoopCalls:
    """The handlers of grpc's server in a frontend for ``ModelInfer`` (:meth:`infer`) and
    ``ModelStreamInfer`` (:meth:`stream`), forwarding through ``link`` on ``loop``."""

    def __init__(self, link: EngineLink, loop: asyncio.AbstractEventLoop) -> None:
        self.link = link
        self.loop = loop
        self.infers = ForwardedGRPCInfer(link)

    def on_loop(self, callback: Callable[..., object], *args: Any) -> bool:
        """Run ``callback`` on the link's loop, from a thread; False when the loop is closed
        (the frontend is stopping)."""
        try:
            self.loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:
            return False
        return True

    # --- ModelInfer ---------------------------------------------------------------------

    def infer(self, request: bytes, context: grpc.ServicerContext) -> bytes | None:
        """A unary ``ModelInfer``: sent as ``GRPC_INFER``, answered from the engine's loop."""
        call = _InferCall(self)
        if not self.on_loop(call.start, request, context.invocation_metadata()):
            context.abort(*_SHUTTING_DOWN)
        if not context.add_callback(call.call_ended):  # it ended already
            call.call_ended()
        code, details, message = call.answers.get()
        call.answered = True
        if code is not grpc.StatusCode.OK:
            context.abort(code, details)
        return message

    # --- ModelStreamInfer ---------------------------------------------------------------

    def stream(self, requests: Iterator[bytes], context: grpc.ServicerContext
               ) -> Iterator[bytes]:
        """A ``ModelStreamInfer``: sent as ``GRPC_STREAM`` and its requests as they come;
        yields the engine's responses until its ``STREAM_END``."""
        stream = ThreadStream(self, call_ender(context))
        if not self.on_loop(stream.open, context.invocation_metadata()):
            context.abort(*_SHUTTING_DOWN)
        if not context.add_callback(stream.call_ended):  # it ended already
            stream.call_ended()
        threading.Thread(target=self._read, args=(stream, requests), daemon=True,
                         name="naiad-grpc-pump").start()
        answers = stream.answers
        taken = 0
        while True:
            item = answers.get()
            if type(item) is bytes:
                yield item  # grpc asks for the next one once the client's connection took it
                taken += len(item)
                if taken >= REPORT_BYTES:
                    self.on_loop(stream.report_sent, taken)
                    taken = 0
            else:
                code, details = item
                break
        if code is not grpc.StatusCode.OK:
            context.abort(code, details)

    def _read(self, stream: ThreadStream, requests: Iterator[bytes]) -> None:
        """The stream's requests, to the engine as they come (on a thread of their own)."""
        try:
            for message in requests:
                if not self.on_loop(stream.on_message, message):
                    return
        except Exception:  # the call ended (cancelled): its callback told the engine
            return
        self.on_loop(stream.on_client_end)


class _InferCall:
    """One ``ModelInfer`` whose handler thread waits for the engine's answer."""

    __slots__ = ("answered", "answers", "calls", "withdraw")

    def __init__(self, calls: LoopCalls) -> None:
        self.calls = calls
        self.answers: queue.SimpleQueue[tuple[grpc.StatusCode, str, bytes | None]] = (
            queue.SimpleQueue())
        self.withdraw: Callable[[], object] | None = None  # set on the loop by start
        self.answered = False  # the handler took the answer

    def start(self, request: bytes, metadata: Any) -> None:
        """On the loop: send the call (or answer it, when the engine's link is gone)."""
        if not self.calls.infers.takes():
            self.answers.put((*_SHUTTING_DOWN, None))
            return
        self.withdraw = self.calls.infers.start(request, metadata, self.on_answer)

    def on_answer(self, code: grpc.StatusCode, details: str, message: bytes | None) -> None:
        self.answers.put((code, details, message))

    def call_ended(self) -> None:
        """grpc's callback as the call ends: unless it was answered, the client gave up
        (cancelled, past its deadline) and the engine withdraws the request."""
        if self.answered:
            return
        self.calls.on_loop(self._withdraw)
        self.answers.put((*_ENDED, None))

    def _withdraw(self) -> None:
        if self.withdraw is not None:
            self.withdraw()


class ThreadStream(StreamExchange):
    """A ``ModelStreamInfer`` of grpc's server: the engine's frames (on the loop) go to
    :attr:`answers`, which the call's handler thread reads; ``end_call`` ends the call at
    once with a status, from any thread (grpc's call, cancelled with it)."""

    def __init__(self, calls: LoopCalls,
                 end_call: Callable[[grpc.StatusCode, str], object]) -> None:
        super().__init__(calls.link)
        self.calls = calls
        self.end_call = end_call
        # responses, then (status, details)
        self.answers: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.ended = False  # the engine's end came (on the loop)

    def on_response(self, message: bytes, uncompressed: bool) -> None:
        self.answers.put(message)

    def on_end(self, code: grpc.StatusCode, details: str, now: bool) -> None:
        self.ended = True
        if now:  # the client does not read: the status goes out at once, past what waits
            self.end_call(code, details)
        self.answers.put((code, details))

    def call_ended(self) -> None:
        """grpc's callback as the call ends (any thread): unless the engine ended it, the
        client gave up, and the engine withdraws what runs; the handler thread wakes."""
        if self.ended:
            return
        self.calls.on_loop(self.withdraw)
        self.answers.put(_ENDED)


__all__ = ["REPORT_BYTES", "LoopCalls", "ThreadStream"]
