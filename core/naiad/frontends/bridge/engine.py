"""The engine's end of the frontend processes: each forwarded request runs in the ASGI
application a single-process server runs, so every endpoint answers exactly as it would;
a plain inference (an ``INFER`` frame) goes through the application's
:class:`~naiad.frontends.http.infer.InferRoute` without an ASGI cycle, as naiad's HTTP
protocol takes it in a single-process server.

A frontend process connects once to the engine's Unix socket and sends all its requests
over that connection; each is an exchange (:mod:`.frames`) with a task of its own here. The
application's ``receive`` gets the body as the frontend forwarded it, then
``http.disconnect`` when the client went away (or, once the answer is sent, when the
exchange is over); its ``send`` goes back as RESPONSE and BODY frames.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
from collections import deque
from functools import partial
from typing import Any

import orjson

from naiad.frontends.bridge import frames
from naiad.frontends.bridge.stream_engine import ForwardedStreamCall
from naiad.frontends.http.infer import Answer, Headers, InferExchange, InferHeaders, InferRoute

# grpc.StatusCode.UNIMPLEMENTED's number, for the calls not served on this link.
_UNIMPLEMENTED = 12
log = logging.getLogger("naiad.http")

_DISCONNECT = {"type": "http.disconnect"}


class _Exchange:
    """One forwarded request: the messages its ``receive`` has to give, its answer so far."""

    __slots__ = ("connection", "done", "id", "in_flight", "messages", "start", "waiter",
                 "window")

    def __init__(self, connection: _EngineConnection, exchange: int) -> None:
        self.connection = connection
        self.id = exchange
        self.messages: deque[dict[str, Any]] = deque()
        self.waiter: asyncio.Future[None] | None = None
        self.start: dict[str, Any] | None = None  # http.response.start, until the first body
        self.done = False  # the answer is complete, or the client went away
        # body bytes written to the frontend and not yet reported SENT to the client
        self.in_flight = 0
        self.window: asyncio.Future[None] | None = None  # send waits here for SENT

    def put(self, message: dict[str, Any]) -> None:
        self.messages.append(message)
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def receive(self) -> dict[str, Any]:
        while not self.messages:
            if self.done:
                return _DISCONNECT
            self.waiter = asyncio.get_running_loop().create_future()
            await self.waiter
            self.waiter = None
        return self.messages.popleft()

    async def send(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self.start = message
            return
        if kind != "http.response.body" or self.done:
            return
        more = bool(message.get("more_body", False))
        body = message.get("body", b"")
        start = self.start
        if start is not None:
            self.start = None
            headers = [[key.decode("latin-1"), value.decode("latin-1")]
                       for key, value in start.get("headers", ())]
            data = frames.with_json(frames.RESPONSE, self.id, [start["status"], headers],
                                    more, body)
        else:
            data = frames.body_frame(self.id, more, body)
        if not more:
            self.finish()
        self.connection.protocol.write(data)
        if more:
            # Flow control: wait while the client has not taken ANSWER_WINDOW_BYTES of
            # what was sent (frames.SENT), as a single-process server's send waits on a
            # client's full socket; a streaming answer backs up into its stream bound.
            self.in_flight += len(body)
            while self.in_flight > frames.ANSWER_WINDOW_BYTES and not self.done:
                self.window = asyncio.get_running_loop().create_future()
                await self.window
                self.window = None

    def sent(self, count: int) -> None:
        """The frontend handed ``count`` more body bytes to the client's connection."""
        self.in_flight = max(0, self.in_flight - count)
        self._open_window()

    def _open_window(self) -> None:
        window = self.window
        if window is not None and not window.done():
            window.set_result(None)

    def finish(self) -> None:
        """The exchange is over: ``receive`` answers ``http.disconnect`` from now on."""
        self.done = True
        self.connection.exchanges.pop(self.id, None)
        self.put(_DISCONNECT)
        self._open_window()


class _Direct(InferExchange):
    """A plain inference a frontend forwarded (``INFER``), answered without the application."""

    __slots__ = ()

    def __init__(self, exchange: int, model_name: str, version: str, heads: InferHeaders,
                 headers: Headers) -> None:
        super().__init__(model_name, version, heads, headers)
        self.ticket = exchange


class _EngineConnection:
    """One frontend process's connection. ``route``: the application's infer route, for
    plain inferences (None: they run in the application too); ``grpc``: what answers the
    gRPC ``ModelInfer`` and ``ModelStreamInfer`` calls the frontend's gRPC server sends
    here (``GRPC_INFER``, ``GRPC_STREAM``)."""

    def __init__(self, app: Any, route: InferRoute | None, grpc: Any = None) -> None:
        self.app = app
        self.route = route
        self.grpc = grpc
        # GRPC_INFER calls in progress: ticket -> what cancels it (None: nothing yet).
        self.grpc_calls: dict[int, Any] = {}
        # ModelStreamInfer calls open on the loop (GRPC_STREAM), by exchange.
        self.grpc_streams: dict[int, ForwardedStreamCall] = {}
        self.loop = asyncio.get_running_loop()
        self.exchanges: dict[int, _Exchange] = {}
        self.direct: dict[int, _Direct] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.protocol = frames.FrameProtocol(self._frame, self._lost)

    def _frame(self, kind: int, exchange_id: int, body: memoryview) -> None:
        if kind == frames.INFER:
            self._infer(exchange_id, body)
            return
        if kind == frames.GRPC_INFER:
            self._grpc_infer(exchange_id, body)
            return
        stream = self.grpc_streams.get(exchange_id)
        if stream is not None:
            stream.on_frame(kind, body)
            return
        if kind == frames.GRPC_STREAM:
            self._grpc_stream(exchange_id, body)
            return
        if exchange_id in self.grpc_calls:
            if kind == frames.DISCONNECT:  # the call ended on the client's side
                cancel = self.grpc_calls.pop(exchange_id)
                if cancel is not None:
                    cancel()
            return
        if kind == frames.REQUEST:
            scope, more, data = frames.read_json(body)
            self._run_in_app(_scope(scope), exchange_id, data, more)
            return
        direct = self.direct.pop(exchange_id, None)
        if direct is not None:
            if kind == frames.DISCONNECT:
                self.route.withdraw(direct)  # type: ignore[union-attr]
            return
        exchange = self.exchanges.get(exchange_id)
        if exchange is None:
            return  # answered already: a late body or disconnect changes nothing
        if kind == frames.SENT:
            exchange.sent(frames.read_sent(body))
        elif kind == frames.BODY:
            more, data = frames.read_body(body)
            exchange.put({"type": "http.request", "body": data, "more_body": more})
        elif kind == frames.DISCONNECT:
            exchange.finish()

    def _run_in_app(self, scope: dict[str, Any], exchange_id: int, data: bytes,
                    more: bool) -> None:
        exchange = _Exchange(self, exchange_id)
        self.exchanges[exchange_id] = exchange
        exchange.messages.append({"type": "http.request", "body": data, "more_body": more})
        task = asyncio.ensure_future(self._run(scope, exchange))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _infer(self, exchange_id: int, body: memoryview) -> None:
        model_name, version, heads, headers, data = frames.read_infer(body)
        route = self.route
        if route is None or not route.takes_plain_requests():
            self._run_in_app(_infer_scope(model_name, version, list(headers)), exchange_id,
                             data, False)
            return
        exchange = self.direct[exchange_id] = _Direct(exchange_id, model_name, version,
                                                      heads, headers)
        route.start(exchange, data, self.loop, self._answered)

    def _grpc_infer(self, exchange_id: int, body: memoryview) -> None:
        _method, _streaming, seconds_left, metadata, request = frames.read_call(body)
        if self.grpc is None:  # not served here: the frontend sends CALLs instead
            self.protocol.write(frames.grpc_answer_frame(
                exchange_id, _UNIMPLEMENTED, "ModelInfer is not served on this link", None))
            return
        self.grpc_calls[exchange_id] = None
        cancel = self.grpc.start(request, frames.metadata_from(metadata), seconds_left,
                                 partial(self._grpc_answered, exchange_id))
        if exchange_id in self.grpc_calls:  # not answered at once
            self.grpc_calls[exchange_id] = cancel

    def _grpc_stream(self, exchange_id: int, body: memoryview) -> None:
        _method, _streaming, _seconds_left, metadata, _request = frames.read_call(body)
        streams = None if self.grpc is None else self.grpc.streams
        if streams is None:  # not served here: the frontend sends CALLs instead
            self.protocol.write(frames.stream_end_frame(
                exchange_id, _UNIMPLEMENTED, "ModelStreamInfer is not served on this link"))
            return
        call = ForwardedStreamCall(exchange_id, frames.metadata_from(metadata),
                                   self.protocol.write, self.grpc_streams, self.loop)
        streams.start(call, call)

    def _grpc_answered(self, exchange_id: int, code: Any, details: str,
                       payload: bytes | None) -> None:
        if exchange_id not in self.grpc_calls:
            return  # the client went away meanwhile
        del self.grpc_calls[exchange_id]
        self.protocol.write(frames.grpc_answer_frame(exchange_id, code.value[0], details,
                                                     payload))

    def _answered(self, exchange: _Direct, reply: Answer) -> None:
        if self.direct.pop(exchange.ticket, None) is not None:  # else withdrawn
            self.protocol.write(frames.answer_frame(exchange.ticket, *reply))

    async def _run(self, scope: dict[str, Any], exchange: _Exchange) -> None:
        try:
            await self.app(scope, exchange.receive, exchange.send)
        except Exception as exc:  # the application's bug must not end the connection
            log.exception("%s %s failed", scope.get("method"), scope.get("path"))
            if exchange.start is None and not exchange.done:
                body = orjson.dumps({"error": f"internal error: {type(exc).__name__}: {exc}"})
                await exchange.send({"type": "http.response.start", "status": 500,
                                     "headers": [(b"content-type", b"application/json"),
                                                 (b"content-length", str(len(body)).encode())]})
                await exchange.send({"type": "http.response.body", "body": body})
        if not exchange.done:  # no (complete) answer: the frontend closes the connection
            exchange.finish()
            self.protocol.write(frames.frame(frames.ABORT, exchange.id))

    def _lost(self) -> None:
        for exchange in list(self.exchanges.values()):
            exchange.finish()
        direct, self.direct = self.direct, {}
        for waiting in direct.values():
            self.route.withdraw(waiting)  # type: ignore[union-attr]
        calls, self.grpc_calls = self.grpc_calls, {}
        for cancel in calls.values():
            if cancel is not None:
                cancel()
        for stream in list(self.grpc_streams.values()):
            stream.lost()


def _scope(forwarded: dict[str, Any]) -> dict[str, Any]:
    """The ASGI scope of a forwarded request (bytes where ASGI wants bytes)."""
    scope = dict(forwarded)
    scope["headers"] = [(key.encode("latin-1"), value.encode("latin-1"))
                        for key, value in forwarded["headers"]]
    scope["query_string"] = forwarded["query_string"].encode("latin-1")
    raw_path = forwarded.get("raw_path")
    scope["raw_path"] = None if raw_path is None else raw_path.encode("latin-1")
    client, server = forwarded.get("client"), forwarded.get("server")
    scope["client"] = None if client is None else tuple(client)
    scope["server"] = None if server is None else tuple(server)
    return scope


def _infer_scope(model_name: str, version: str,
                 headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    """The ASGI scope of a forwarded plain inference, for the application."""
    path = f"/v2/models/{model_name}" + (f"/versions/{version}" if version else "") + "/infer"
    return {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1", "method": "POST", "scheme": "http", "path": path,
            "raw_path": path.encode("utf-8"), "query_string": b"", "root_path": "",
            "headers": headers, "client": None, "server": None}


class BridgeServer:
    """The Unix socket frontend processes connect to, in a private folder of its own."""

    def __init__(self, app: Any, grpc: Any = None) -> None:
        self.app = app
        self.grpc = grpc  # answers GRPC_INFER (loop_infer.BridgedInfer), or None
        self.folder = tempfile.mkdtemp(prefix="naiad-frontends-")  # mode 0700
        self.path = os.path.join(self.folder, "engine.sock")
        self.connections: list[_EngineConnection] = []
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        route = getattr(self.app, "fast_infer", None)  # None: a restricted inference API

        def accepted() -> frames.FrameProtocol:
            connection = _EngineConnection(self.app, route, self.grpc)
            self.connections.append(connection)
            return connection.protocol

        loop = asyncio.get_running_loop()
        self._server = await loop.create_unix_server(accepted, self.path)

    async def stop(self) -> None:
        """Stop accepting and end the connections (the frontends have stopped)."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for connection in self.connections:
            if connection.protocol.transport is not None:
                connection.protocol.transport.close()
            for task in list(connection.tasks):
                task.cancel()
        shutil.rmtree(self.folder, ignore_errors=True)
