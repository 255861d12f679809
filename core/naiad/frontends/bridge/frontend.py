"""The ASGI application of a frontend process: every HTTP request goes to the engine as an
exchange (:mod:`.frames`) and its answer comes back to the client as the engine wrote it.

The frontend holds no model and no state of the server's: what it does per request is the
HTTP work (uvicorn and naiad's guard: parsing, header limits and timeouts, keep-alive,
writing), which is what it takes off the engine. A plain inference skips ASGI here as in a
single-process server (:mod:`naiad.frontends.http.protocol`): :class:`ForwardedInfer` sends
it as one ``INFER`` frame and writes the engine's ``ANSWER``.

naiad's gRPC server in a frontend process sends ``ModelInfer`` (:class:`ForwardedGRPCInfer`)
and ``ModelStreamInfer`` (:class:`ForwardedStreams`) on the same link, where the engine
answers them on its event loop, with no thread on either side: a stream's request messages
go to the engine as they come off the HTTP/2 connection, its responses from the engine
straight to it. grpc's server sends them the same way, from its handler threads
(:mod:`.grpc_loop_calls`); a stream's exchange on the link is a :class:`StreamExchange`
either way.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import grpc

from naiad.frontends.bridge import frames
from naiad.frontends.grpc.calls import CODES
from naiad.frontends.http.codec import HEADER_LENGTH, error_body
from naiad.frontends.http.infer import Answer, InferExchange, OnAnswer

if TYPE_CHECKING:
    from naiad.frontends.grpc.call import Call
    from naiad.frontends.grpc.connection import GRPCConnection

log = logging.getLogger("naiad.http")

_SHUTTING_DOWN = "the server is shutting down"
_UNAVAILABLE = b'{"error":"the server is shutting down"}'
_ABORTED = error_body("internal error: the server ended the answer before it was complete")


class _Answer:
    """The engine's frames of one exchange, as they come."""

    __slots__ = ("frames", "waiter")

    def __init__(self) -> None:
        self.frames: deque[tuple[int, memoryview | None]] = deque()
        self.waiter: asyncio.Future[None] | None = None

    def put(self, kind: int, body: memoryview | None) -> None:
        self.frames.append((kind, body))
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def next(self) -> tuple[int, memoryview | None]:
        while not self.frames:
            self.waiter = asyncio.get_running_loop().create_future()
            await self.waiter
            self.waiter = None
        return self.frames.popleft()


class EngineLink:
    """This process's one connection to the engine, shared by all its requests."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.answers: dict[int, _Answer] = {}
        self.protocol = frames.FrameProtocol(self._frame, self._lost)
        self.lost = asyncio.Event()
        self._next = 0
        # Plain inferences waiting for their answer: ticket -> (exchange, what answers it).
        self.plain: dict[int, tuple[InferExchange, OnAnswer]] = {}
        # gRPC ModelInfer calls waiting for their answer (GRPC_INFER): ticket -> callback.
        self.grpc: dict[int, Callable[[grpc.StatusCode, str, bytes | None], object]] = {}
        # ModelStreamInfer calls open on the engine's loop (GRPC_STREAM), by ticket.
        self.streams: dict[int, StreamExchange] = {}

    async def connect(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.create_unix_connection(lambda: self.protocol, self.path)

    def open(self) -> tuple[int, _Answer]:
        self._next += 1
        answer = self.answers[self._next] = _Answer()
        return self._next, answer

    def open_plain(self, exchange: InferExchange, on_answer: OnAnswer) -> int:
        self._next += 1
        self.plain[self._next] = (exchange, on_answer)
        return self._next

    def open_grpc(self, on_answer: Callable[[grpc.StatusCode, str, bytes | None], object]
                  ) -> int:
        self._next += 1
        self.grpc[self._next] = on_answer
        return self._next

    def open_stream(self, stream: StreamExchange) -> int:
        self._next += 1
        self.streams[self._next] = stream
        return self._next

    def _frame(self, kind: int, exchange: int, body: memoryview) -> None:
        stream = self.streams.get(exchange)
        if stream is not None:
            stream.on_frame(kind, body)
            return
        if kind == frames.GRPC_ANSWER:
            on_grpc_answer = self.grpc.pop(exchange, None)
            if on_grpc_answer is not None:
                code, details, message, _uncompressed = frames.read_grpc_answer(body)
                on_grpc_answer(CODES.get(code, grpc.StatusCode.UNKNOWN), details, message)
            return
        waiting = self.plain.pop(exchange, None)
        if waiting is not None:
            plain, on_answer = waiting
            on_answer(plain, _answer_of(kind, body))
            return
        answer = self.answers.get(exchange)
        if answer is None:
            return
        if kind in (frames.RESPONSE, frames.BODY):
            answer.put(kind, memoryview(bytes(body)))  # a copy: the receive buffer moves on
        else:
            answer.put(kind, None)

    def _lost(self) -> None:
        self.lost.set()
        for answer in self.answers.values():
            answer.put(frames.ABORT, None)
        plain, self.plain = self.plain, {}
        for exchange, on_answer in plain.values():
            on_answer(exchange, Answer(503, _UNAVAILABLE))
        calls, self.grpc = self.grpc, {}
        for on_grpc_answer in calls.values():
            on_grpc_answer(grpc.StatusCode.UNAVAILABLE, _SHUTTING_DOWN, None)
        streams, self.streams = self.streams, {}
        for stream in streams.values():
            stream.lost()


def _answer_of(kind: int, body: memoryview) -> Answer:
    """The answer an engine's frame gives a plain inference: an ANSWER; a RESPONSE when the
    engine ran it in the application (whose infer answers come whole, in one frame)."""
    if kind == frames.ANSWER:
        return Answer(*frames.read_answer(body))
    if kind == frames.RESPONSE:
        (status, headers), more, data = frames.read_json(body)
        if not more:
            named = dict(headers)
            json_length = named.get(HEADER_LENGTH)
            return Answer(status, data, None if json_length is None else int(json_length),
                          named.get("content-encoding"))
    return Answer(500, _ABORTED)


class ForwardedInfer:
    """Plain inferences of this frontend's HTTP protocol, forwarded to the engine as
    ``INFER`` frames (:class:`naiad.frontends.http.protocol.PlainInfer`); ``limit`` is the
    engine's ``--http-max-input-size``."""

    def __init__(self, link: EngineLink, limit: int) -> None:
        self.link = link
        self.limit = limit

    def takes_plain_requests(self) -> bool:
        return not self.link.lost.is_set()

    def start(self, exchange: InferExchange, body: bytes, loop: asyncio.AbstractEventLoop,
              on_answer: OnAnswer) -> None:
        link = self.link
        ticket = exchange.ticket = link.open_plain(exchange, on_answer)
        link.protocol.write(frames.infer_frame(ticket, exchange.model_name, exchange.version,
                                               exchange.heads, exchange.headers, body))

    def withdraw(self, exchange: InferExchange) -> None:
        exchange.disconnected = True
        ticket = exchange.ticket
        if self.link.plain.pop(ticket, None) is not None:
            self.link.protocol.write(frames.frame(frames.DISCONNECT, ticket))


class ForwardedGRPCInfer:
    """The gRPC ``ModelInfer`` calls of this frontend's gRPC server (naiad's), sent to the
    engine on the HTTP link as ``GRPC_INFER`` frames and answered from its event loop
    (``naiad.frontends.grpc.naiad_server.UnaryInfer``)."""

    def __init__(self, link: EngineLink) -> None:
        self.link = link

    def takes(self) -> bool:
        return not self.link.lost.is_set()

    def start(self, message: bytes, metadata: Any,
              on_answer: Callable[[grpc.StatusCode, str, bytes | None], object]
              ) -> Callable[[], object]:
        link = self.link
        ticket = link.open_grpc(on_answer)
        link.protocol.write(frames.call_frame(ticket, "ModelInfer", False, None,
                                              frames.metadata_of(metadata), message,
                                              kind=frames.GRPC_INFER))
        return partial(self._withdraw, ticket)

    def _withdraw(self, ticket: int) -> None:
        """The call ended on the client's side (cancelled, past its deadline)."""
        if self.link.grpc.pop(ticket, None) is not None:
            self.link.protocol.write(frames.frame(frames.DISCONNECT, ticket))


class ForwardedStreams:
    """Starts the ``ModelStreamInfer`` calls of this frontend's gRPC server on the engine's
    loop, which checks them as a single-process server does (a restricted API's header,
    ``--grpc-max-streams``)."""

    def __init__(self, link: EngineLink) -> None:
        self.link = link

    def start(self, connection: GRPCConnection, call: Call) -> bool:
        """Take ``call`` (False: the engine's link is gone, its handler answers it)."""
        if self.link.lost.is_set():
            return False
        stream = ForwardedStream(self.link, connection, call)
        call.stream = stream
        call.on_cancel = stream.withdraw
        return True


class StreamExchange:
    """A ``ModelStreamInfer`` call forwarded on the link to the engine's loop
    (``GRPC_STREAM``), on the frontend's loop: what the client sends goes to the engine as
    it comes, and the engine's frames to :meth:`on_response` and :meth:`on_end`, which
    subclasses give to the client's call (naiad's HTTP/2 connection, or a handler thread of
    grpc's server: :mod:`.grpc_loop_calls`)."""

    def __init__(self, link: EngineLink) -> None:
        self.link = link
        self.exchange = 0  # the link's number for it, once open

    def open(self, metadata: Any) -> None:
        """Send the call to the engine (``metadata`` as grpc's ``invocation_metadata()``)."""
        link = self.link
        if link.lost.is_set():  # the link does not answer it: nobody else would
            self.on_end(grpc.StatusCode.UNAVAILABLE, _SHUTTING_DOWN, False)
            return
        self.exchange = link.open_stream(self)
        link.protocol.write(frames.call_frame(self.exchange, "ModelStreamInfer", True, None,
                                              frames.metadata_of(metadata),
                                              kind=frames.GRPC_STREAM))

    # --- the client's side ---------------------------------------------------------------

    def on_message(self, message: bytes) -> None:
        if self.exchange in self.link.streams:  # else the engine ended the stream already
            self.link.protocol.write(frames.message_frame(self.exchange, message))

    def on_client_end(self) -> None:
        if self.exchange in self.link.streams:
            self.link.protocol.write(frames.frame(frames.HALF_CLOSE, self.exchange))

    def report_sent(self, count: int) -> None:
        """``count`` more response bytes reached the client's connection (frames.SENT)."""
        if self.exchange in self.link.streams:
            self.link.protocol.write(frames.sent_frame(self.exchange, count))

    def withdraw(self) -> None:
        """The call ended on the client's side (cancelled, past its deadline): the engine
        cancels what runs, unless it ended the call itself."""
        if self.link.streams.pop(self.exchange, None) is not None:
            self.link.protocol.write(frames.frame(frames.DISCONNECT, self.exchange))

    # --- the engine's side ---------------------------------------------------------------

    def on_frame(self, kind: int, body: memoryview) -> None:
        if kind == frames.MESSAGE:
            self.on_response(bytes(body[1:]), bool(body[0]))
        elif kind == frames.STREAM_END:
            self.link.streams.pop(self.exchange, None)
            code, now, details = frames.read_stream_end(body)
            self.on_end(CODES.get(code, grpc.StatusCode.UNKNOWN), details, now)

    def lost(self) -> None:
        """The engine's connection ended."""
        self.on_end(grpc.StatusCode.UNAVAILABLE, _SHUTTING_DOWN, False)

    def on_response(self, message: bytes, uncompressed: bool) -> None:
        raise NotImplementedError

    def on_end(self, code: grpc.StatusCode, details: str, now: bool) -> None:
        """The call's status; ``now``: drop what waits for the client (it does not read)."""
        raise NotImplementedError


class ForwardedStream(StreamExchange):
    """A forwarded stream of naiad's gRPC server: the connection's hooks of a stream run on
    the loop (``on_message``, ``on_client_end``, ``resume``, ``call_over``)."""

    def __init__(self, link: EngineLink, connection: GRPCConnection, call: Call) -> None:
        super().__init__(link)
        self.connection = connection
        self.call = call
        self.received = 0  # response bytes the engine sent
        self.reported = 0  # of which reported SENT (taken by the client's connection)
        self.open(call.metadata)

    def resume(self) -> None:
        """The client read: report what its connection took, once it took all it was given
        and a quarter of the window or more (most responses cost no frame of their own)."""
        taken = self.received - self.reported
        if (taken >= frames.ANSWER_WINDOW_BYTES // 4 and not self.call.pending
                and not self.connection.sender.paused):
            self.reported = self.received
            self.report_sent(taken)

    def call_over(self) -> None:
        self.withdraw()

    def on_response(self, message: bytes, uncompressed: bool) -> None:
        self.received += len(message)
        self.connection.send_message(self.call, message, uncompressed)
        self.resume()

    def on_end(self, code: grpc.StatusCode, details: str, now: bool) -> None:
        if now:
            self.connection.end_now(self.call, code, details)
        else:
            self.connection.finish(self.call, code, details)


def _forwarded_scope(scope: dict[str, Any]) -> dict[str, Any]:
    raw_path = scope.get("raw_path")
    return {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": scope.get("http_version", "1.1"), "method": scope["method"],
        "scheme": scope.get("scheme", "http"), "path": scope["path"],
        "raw_path": None if raw_path is None else raw_path.decode("latin-1"),
        "query_string": scope.get("query_string", b"").decode("latin-1"),
        "root_path": scope.get("root_path", ""),
        "headers": [[key.decode("latin-1"), value.decode("latin-1")]
                    for key, value in scope["headers"]],
        "client": scope.get("client"), "server": scope.get("server"),
    }


class ForwardingApp:
    """Forwards every HTTP request to the engine through ``link``."""

    def __init__(self, link: EngineLink) -> None:
        self.link = link

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        link = self.link
        protocol = link.protocol
        if link.lost.is_set():
            await _send_unavailable(send)
            return
        exchange, answer = link.open()
        try:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            more = message.get("more_body", False)
            protocol.write(frames.with_json(frames.REQUEST, exchange, _forwarded_scope(scope),
                                            more, message.get("body", b"")))
            while more and not answer.frames:  # the engine may answer early (413)
                message = await receive()
                if message["type"] == "http.disconnect":
                    protocol.write(frames.frame(frames.DISCONNECT, exchange))
                    return
                more = message.get("more_body", False)
                protocol.write(frames.body_frame(exchange, more, message.get("body", b"")))
            watcher = asyncio.ensure_future(_watch_disconnect(receive, protocol, exchange))
            try:
                answered = await _relay(answer, send, partial(_report_sent, protocol,
                                                              exchange))
            finally:
                watcher.cancel()
            if not answered and link.lost.is_set():
                await _send_unavailable(send)
        finally:
            link.answers.pop(exchange, None)


async def _watch_disconnect(receive: Any, protocol: frames.FrameProtocol,
                            exchange: int) -> None:
    """Tell the engine when the client goes away before its answer is complete (the engine
    withdraws a request still queued, as a single-process server does)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    protocol.write(frames.frame(frames.DISCONNECT, exchange))


def _report_sent(protocol: frames.FrameProtocol, exchange: int, count: int) -> None:
    protocol.write(frames.sent_frame(exchange, count))


async def _relay(answer: _Answer, send: Any, report_sent: Callable[[int], object]) -> bool:
    """Write the engine's answer to the client as it comes; False when there was none (the
    client went away, or the engine did). Raises (uvicorn then closes the connection) when
    the engine ended an answer it had begun. ``report_sent(bytes)`` tells the engine what
    the client's connection took of an answer still going on (frames.SENT): once caught up
    with the engine, or every quarter window."""
    kind, body = await answer.next()
    if kind != frames.RESPONSE or body is None:
        return False
    (status, headers), more, data = frames.read_json(body)
    await send({"type": "http.response.start", "status": status,
                "headers": [(key.encode("latin-1"), value.encode("latin-1"))
                            for key, value in headers]})
    await send({"type": "http.response.body", "body": data, "more_body": more})
    taken = len(data)
    while more:
        if taken and (not answer.frames or taken >= frames.ANSWER_WINDOW_BYTES // 4):
            report_sent(taken)
            taken = 0
        kind, body = await answer.next()
        if kind != frames.BODY or body is None:
            raise ConnectionAbortedError("the engine ended the answer before its end")
        more, data = frames.read_body(body)
        await send({"type": "http.response.body", "body": data, "more_body": more})
        taken += len(data)
    return True


async def _send_unavailable(send: Any) -> None:
    await send({"type": "http.response.start", "status": 503,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(_UNAVAILABLE)).encode())]})
    await send({"type": "http.response.body", "body": _UNAVAILABLE})
