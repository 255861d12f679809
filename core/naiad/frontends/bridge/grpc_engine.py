"""The engine's end of the gRPC calls frontend processes forward: each runs in the same
method handlers a single-process server registers with grpc (``method_handlers``), with a
:class:`~naiad.frontends.grpc.calls.CallContext` in place of grpc's, so every RPC answers
exactly as it would.

Calls run on threads, as on grpc's thread-pool server. They are the RPCs other than
``ModelInfer`` and ``ModelStreamInfer``, which a frontend's gRPC server (naiad's or grpc's)
sends on its HTTP link to the engine's event loop instead (``GRPC_INFER``, ``GRPC_STREAM``:
:mod:`.engine`), and those two only from a frontend that serves no HTTP: then a unary
inference waits on its future here, and an open ``ModelStreamInfer`` holds its thread while
it is open.
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import socket
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc

from naiad.frontends.bridge import frames
from naiad.frontends.grpc.calls import CallContext, run_call

log = logging.getLogger("naiad.grpc")

# Calls served at once (each open stream that comes here holds one).
MAX_THREADS = 1024
_END = object()


def forwarded_context(metadata: list[list[Any]], seconds_left: float | None) -> CallContext:
    """The context of a forwarded call: ``metadata`` as a CALL frame carries it."""
    return CallContext(frames.metadata_from(metadata), seconds_left)


class _Call:
    """A forwarded call in progress: its context and, for a stream, its incoming messages."""

    def __init__(self, exchange: int, context: CallContext) -> None:
        self.exchange = exchange
        self.context = context
        self.requests: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def messages(self, deserialize: Callable[[bytes], Any] | None) -> Iterator[Any]:
        while True:
            item = self.requests.get()
            if item is _END:
                return
            yield item if deserialize is None else deserialize(item)


class _Connection:
    """One frontend process's gRPC connection."""

    def __init__(self, sock: socket.socket, handlers: dict[str, grpc.RpcMethodHandler],
                 pool: ThreadPoolExecutor, number: int) -> None:
        self.handlers = handlers
        self.pool = pool
        self.calls: dict[int, _Call] = {}
        self.link = frames.BlockingLink(sock, self._frame, self._lost,
                                        f"naiad-grpc-bridge-{number}")

    def _frame(self, kind: int, exchange: int, body: memoryview) -> None:
        if kind == frames.CALL:
            method, streaming, seconds_left, metadata, request = frames.read_call(body)
            call = self.calls[exchange] = _Call(exchange, forwarded_context(metadata,
                                                                            seconds_left))
            self.pool.submit(self._run, call, method, streaming, request)
            return
        call = self.calls.get(exchange)
        if call is None:
            return
        if kind == frames.MESSAGE:
            call.requests.put(bytes(body[1:]))
        elif kind == frames.HALF_CLOSE:
            call.requests.put(_END)
        elif kind == frames.DISCONNECT:
            call.requests.put(_END)
            call.context.end()

    def _run(self, call: _Call, method: str, streaming: bool, request: bytes) -> None:
        def send(data: bytes, uncompressed: bool) -> None:
            self.link.send(frames.message_frame(call.exchange, data, uncompressed))

        try:
            code, details = run_call(self.handlers, method, streaming, request,
                                     call.messages(None), call.context, send)
        finally:
            self.calls.pop(call.exchange, None)
        self.link.send(frames.status_frame(call.exchange, code.value[0], details))

    def _lost(self) -> None:
        for call in list(self.calls.values()):
            call.requests.put(_END)
            call.context.end()


class GRPCBridge:
    """The Unix socket frontend processes forward gRPC calls to (beside the HTTP one)."""

    def __init__(self, handlers: dict[str, grpc.RpcMethodHandler], path: str) -> None:
        self.handlers = handlers
        self.path = path
        self.pool = ThreadPoolExecutor(max_workers=MAX_THREADS,
                                       thread_name_prefix="naiad-grpc")
        self.connections: list[_Connection] = []
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._numbers = itertools.count()
        self._accepting = threading.Thread(target=self._accept, name="naiad-grpc-bridge",
                                           daemon=True)

    def start(self) -> None:
        self._listener.bind(self.path)
        self._listener.listen(64)
        self._accepting.start()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError:  # closed: stopping
                return
            connection = _Connection(sock, self.handlers, self.pool, next(self._numbers))
            self.connections.append(connection)
            connection.link.start()

    def stop(self) -> None:
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        for connection in self.connections:
            connection.link.close()
        self.pool.shutdown(wait=False)
        try:
            os.unlink(self.path)
        except OSError:
            pass
