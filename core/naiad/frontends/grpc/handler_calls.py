"""The calls of a connection of naiad's gRPC server (:mod:`.connection`) that run in the
servicer's method handlers, on a thread of the service's pool, as on grpc's thread-pool
server: every RPC but a plain ``ModelInfer`` and a ``ModelStreamInfer`` taken on the loop
(:mod:`.loop_infer`, :mod:`.loop_stream`).

A handler gets a :class:`~.calls.CallContext` and sends its answers back through the loop.
A stream run so takes its messages from a queue the loop fills, giving each one's window
back as it takes it, and waits (``Call.writable``) while the client does not read.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from naiad.frontends.grpc import http2
from naiad.frontends.grpc.call import Call
from naiad.frontends.grpc.calls import CallContext, run_call
from naiad.frontends.grpc.status import bounded_message

END = object()  # the end of a stream's messages, on its queue


class HandlerCalls:
    """What :class:`~.connection.GRPCConnection` does for the calls its handlers run."""

    # The connection's, used here.
    loop: asyncio.AbstractEventLoop
    service: Any
    closing: bool
    give_back: Callable[[int], None]
    write: Callable[[bytes], None]
    send_message: Callable[..., None]
    finish: Callable[[Call, grpc.StatusCode, str], None]
    cancel_call: Callable[[Call], None]
    end_now: Callable[[Call, grpc.StatusCode, str], None]

    def start_stream_in_thread(self, call: Call, timeout: float | None) -> None:
        call.messages = queue.SimpleQueue()
        call.writable = threading.Event()
        call.writable.set()
        call.context = self.context_of(call, timeout)
        self.service.pool.submit(self.run_in_thread, call, b"")

    def messages(self, call: Call) -> Iterator[bytes]:
        """A stream's messages, for its handler's thread; each gives back its window."""
        get = call.messages.get  # type: ignore[union-attr]
        while True:
            item = get()
            if item is END:
                return
            message, size = item
            self.loop.call_soon_threadsafe(self.message_taken, call, size)
            yield message

    def message_taken(self, call: Call, size: int) -> None:
        if self.closing:
            return
        if call.held >= size:  # else the call is over and gave its window back
            call.held -= size
            self.give_back(size)
        if not call.closed and not call.ended:
            self.write(http2.window_update(call.id, size))

    def run_in_thread(self, call: Call, request: bytes) -> None:
        """Run ``call`` in the servicer's method handlers (on a pool thread)."""
        context = call.context
        if context is None:
            context = call.context = self.context_of(call, None if call.deadline is None
                                                     else call.deadline.when() - self.loop.time())
        streaming = call.messages is not None

        def send(data: bytes, uncompressed: bool) -> None:
            if call.closed:
                return
            self.loop.call_soon_threadsafe(self.send_message, call, data, uncompressed)
            if streaming:
                call.writable.wait()  # type: ignore[union-attr]

        code, details = run_call(self.service.handlers, call.method, streaming, request,
                                 self.messages(call) if streaming else (), context, send)
        self.loop.call_soon_threadsafe(self.finish, call, code, bounded_message(details))

    def context_of(self, call: Call, seconds_left: float | None) -> CallContext:
        """The context ``call``'s handler gets; what it cancels or ends, ends on the wire."""
        call_soon = self.loop.call_soon_threadsafe
        return CallContext(call.metadata, seconds_left,
                           lambda: call_soon(self.cancel_call, call),
                           lambda code, message: call_soon(self.end_now, call, code, message))


__all__ = ["END", "HandlerCalls"]
