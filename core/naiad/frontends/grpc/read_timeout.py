"""A time limit on receiving a unary call's request message (``--grpc-message-timeout``).

grpc's thread-pool server gives a call a thread of the pool as soon as its headers arrive,
and for a unary RPC that thread then waits for the request message, with no limit: a client
that announces a message and sends part of it holds the thread for as long as it keeps the
connection open (keepalive pings keep a silent one alive), and about a thousand such calls,
a few kilobytes from one connection, leave no thread to anyone else. grpc core has no
per-stream read timeout, so naiad registers its unary RPCs as stream-unary ones (the wire
is the same: one message each way), whose handler runs at once and takes the message off
the stream itself, under a :class:`MessageWatch`: a call whose message has not come in
full after the timeout is cancelled, which wakes its thread. The client sees CANCELLED
(grpc cannot send a status on a call the server cancelled); a message that does come is
never affected, whatever the call does next.

This bounds how long one stalled call holds a thread, not how many a client can stall at
once: a client that keeps opening calls faster than the timeout ends them still takes
threads; serve untrusted clients behind a proxy that buffers requests.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from naiad.frontends.grpc.codec import UndecodableRequest


class MessageWatch:
    """Cancels the calls whose request message is late; one daemon thread, started with
    the first call and checking every quarter of the timeout (so a late call is cancelled
    between 1 and 1.25 timeouts after it started)."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._waiting: dict[int, tuple[float, grpc.ServicerContext]] = {}
        self._tokens = itertools.count()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()

    def receive(self, requests: Iterator[Any], context: grpc.ServicerContext) -> Any:
        """The call's first message; None when the call ended (or was cancelled) first."""
        token = next(self._tokens)  # itertools.count is atomic under the GIL
        self._waiting[token] = (time.monotonic() + self.timeout_s, context)
        if self._thread is None:
            self._start()
        try:
            return next(requests, None)
        except grpc.RpcError:  # cancelled: by the client, or by this watch
            return None
        finally:
            self._waiting.pop(token, None)

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="naiad-grpc-message-watch")
                self._thread.start()

    def _run(self) -> None:
        while not self._stopped.wait(self.timeout_s / 4):
            now = time.monotonic()
            late = [context for deadline, context in self._waiting.copy().values()
                    if deadline <= now]
            for context in late:
                context.cancel()

    def stop(self) -> None:
        self._stopped.set()


def receiving(watch: MessageWatch, method: str,
              behavior: Callable[[Any, grpc.ServicerContext], Any]
              ) -> Callable[[Iterator[Any], grpc.ServicerContext], Any]:
    """``behavior`` (a unary RPC's handler) as a stream-unary handler that takes its
    request off the stream under ``watch``; an undecodable request is INVALID_ARGUMENT."""

    def call(requests: Iterator[Any], context: grpc.ServicerContext) -> Any:
        request = watch.receive(requests, context)
        if request is None:
            if context.is_active():  # the client half-closed without a message
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              f"{method}: the call ended without a request message")
            return None  # cancelled: there is no one to answer
        if type(request) is UndecodableRequest:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)
        return behavior(request, context)

    return call


__all__ = ["MessageWatch", "receiving"]
