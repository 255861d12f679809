"""The engine's end of the gRPC calls frontend processes forward: each runs in the same
method handlers a single-process server registers with grpc (``method_handlers``), with a
:class:`ForwardedContext` in place of grpc's, so every RPC answers exactly as it would.

Calls run on threads, as on grpc's thread-pool server: a unary inference waits on its future
there, an open ``ModelStreamInfer`` holds its thread while it is open.
"""

from __future__ import annotations

import base64
import itertools
import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc

from naiad.frontends.bridge import frames

log = logging.getLogger("naiad.grpc")

# Calls served at once (each open stream holds one); as the gRPC listener's pool.
MAX_THREADS = 1024
CODES = {code.value[0]: code for code in grpc.StatusCode}
_END = object()


class _Aborted(Exception):
    """What :meth:`ForwardedContext.abort` raises, as grpc's ``abort`` raises."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


class ForwardedContext(grpc.ServicerContext):
    """The context of a forwarded call: the client's metadata and deadline, the call's
    state, callbacks run when it ends; ``abort`` ends it with a status."""

    def __init__(self, metadata: list[list[Any]], seconds_left: float | None) -> None:
        self._metadata = tuple(
            (key, base64.b64decode(value) if binary else value)
            for key, value, binary in metadata)
        self._deadline = None if seconds_left is None else time.monotonic() + seconds_left
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], object]] = []
        self._active = True
        self.code: grpc.StatusCode | None = None
        self.details = ""
        self.uncompressed = False

    # --- what naiad's handlers use ------------------------------------------------------

    def invocation_metadata(self) -> Any:
        return self._metadata

    def abort(self, code: grpc.StatusCode, details: str) -> Any:
        raise _Aborted(code, details)

    def abort_with_status(self, status: Any) -> Any:
        raise _Aborted(status.code, status.details)

    def add_callback(self, callback: Callable[[], object]) -> bool:
        with self._lock:
            if not self._active:
                return False
            self._callbacks.append(callback)
            return True

    def is_active(self) -> bool:
        return self._active

    def time_remaining(self) -> float | None:
        return None if self._deadline is None else max(self._deadline - time.monotonic(), 0.0)

    def cancel(self) -> None:
        self.end()

    def disable_next_message_compression(self) -> None:
        self.uncompressed = True

    def set_code(self, code: grpc.StatusCode) -> None:
        self.code = code

    def set_details(self, details: str) -> None:
        self.details = details

    # --- the rest of grpc.ServicerContext: not used by naiad's handlers -------------------

    def peer(self) -> str:
        return "frontend-process"

    def peer_identities(self) -> Any:
        return None

    def peer_identity_key(self) -> Any:
        return None

    def auth_context(self) -> Any:
        return {}

    def send_initial_metadata(self, initial_metadata: Any) -> None:
        pass

    def set_trailing_metadata(self, trailing_metadata: Any) -> None:
        pass

    def set_compression(self, compression: Any) -> None:
        pass

    def end(self) -> None:
        """The call is over (answered, cancelled or past its deadline): run the callbacks."""
        with self._lock:
            if not self._active:
                return
            self._active = False
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.exception("a gRPC call's end callback failed")


class _Call:
    """A forwarded call in progress: its context and, for a stream, its incoming messages."""

    def __init__(self, exchange: int, context: ForwardedContext) -> None:
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
            call = self.calls[exchange] = _Call(exchange, ForwardedContext(metadata,
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
        context = call.context
        code, details = grpc.StatusCode.OK, ""
        try:
            handler = self.handlers.get(method.rsplit("/", 1)[-1])
            if handler is None:
                raise _Aborted(grpc.StatusCode.UNIMPLEMENTED, f"Method not found: {method}")
            serialize = handler.response_serializer
            if streaming and handler.stream_stream is not None:
                for response in handler.stream_stream(
                        call.messages(handler.request_deserializer), context):
                    data = response if serialize is None else serialize(response)
                    self.link.send(frames.message_frame(call.exchange, data))
            elif not streaming and handler.unary_unary is not None:
                deserialize = handler.request_deserializer
                response = handler.unary_unary(
                    request if deserialize is None else deserialize(request), context)
                if response is not None:
                    data = response if serialize is None else serialize(response)
                    self.link.send(frames.message_frame(call.exchange, data,
                                                        context.uncompressed))
            else:
                raise _Aborted(grpc.StatusCode.UNIMPLEMENTED,
                               f"{method} is not a {'stream' if streaming else 'unary'} RPC")
            if context.code is not None:
                code, details = context.code, context.details
        except _Aborted as exc:
            code, details = exc.code, exc.details
        except Exception as exc:  # as grpc answers a handler that raised
            log.exception("gRPC %s failed", method)
            code, details = grpc.StatusCode.UNKNOWN, f"Exception calling application: {exc}"
        finally:
            self.calls.pop(call.exchange, None)
            context.end()
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
