"""naiad's HTTP/1.1 protocol under uvicorn: uvicorn's httptools protocol with naiad's limits
(:class:`.limits.GuardedHttpToolsProtocol`) that answers a plain ``POST .../infer`` itself.

Why: uvicorn gives every request an ASGI cycle (a task, a scope, an Event, ``receive`` and
``send`` message dicts), and on the infer route that machinery cost as much as naiad's own
work. A bare ASGI app on uvicorn answering a fixed body took 61 µs of CPU per request at 8
connections on one core (270 µs at 1); a bare httptools protocol answering the same, 13 µs
(64 µs). Here a plain inference goes from the parser's callbacks to
:class:`.infer.InferRoute` and its answer is written from the future's completion on the
loop: no task, no coroutine, no message dicts (figures in docs/design.md).

A request takes this path when the server is not tracing, inference is not a restricted API,
and the request is HTTP/1.1 with a Content-Length within ``--http-max-input-size``, no
``Expect: 100-continue``, no upgrade, a path without a query string or percent-escapes, no
earlier request of its connection still unanswered, and a client reading its answers (the
transport's write buffer below its high-water mark). Anything else takes uvicorn's ASGI
path to :class:`.app.HTTPFrontend`, which answers it the same way through the same
:mod:`.infer` code: the two paths differ in cost, not in behaviour.

While naiad answers a request, ``self.cycle`` is an :class:`_Exchange`, which stands in for
uvicorn's ``RequestResponseCycle``, so uvicorn's own pipelining (a request arriving behind it
waits), shutdown (the connection closes after the answer) and the limits' refusals see a
request in flight.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from typing import Any, Protocol

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from naiad.frontends.http.infer import (
    HEADER_LENGTH_BYTES,
    Answer,
    InferExchange,
    InferHeaders,
    OnAnswer,
    infer_headers,
    split_infer_path,
)
from naiad.frontends.http.limits import GuardedHttpToolsProtocol, HTTPLimits

_JSON_TYPE = b"content-type: application/json\r\n"
_BINARY_TYPE = b"content-type: application/octet-stream\r\n" + HEADER_LENGTH_BYTES + b": %d\r\n"
_CLOSE = b"connection: close\r\n"


class _Exchange(InferExchange):
    """One request naiad answers itself, from its header block to its answer. The
    attributes uvicorn and the limits read on ``self.cycle`` keep their meaning."""

    __slots__ = ("chunks", "keep_alive", "response_complete", "response_started")

    def __init__(self, model_name: str, version: str, heads: InferHeaders,
                 headers: list[tuple[bytes, bytes]], keep_alive: bool) -> None:
        super().__init__(model_name, version, heads, headers)
        self.chunks: list[bytes] = []
        self.keep_alive = keep_alive
        self.response_started = self.response_complete = False

    @property
    def message_event(self) -> _Exchange:
        return self  # uvicorn sets it on a disconnect: connection_lost watches for that here

    def set(self) -> None:
        pass


class NaiadHttpProtocol(GuardedHttpToolsProtocol):
    """The guarded protocol, answering plain inferences through ``infer`` (None: every
    request takes the ASGI path)."""

    def __init__(self, *args: Any, limits: HTTPLimits, infer: PlainInfer | None,
                 **kwargs: Any) -> None:
        super().__init__(*args, limits=limits, **kwargs)
        self.infer = infer
        self._receiving: _Exchange | None = None  # its body is arriving
        self._running: _Exchange | None = None  # submitted, not answered yet

    # --- httptools callbacks (run per request) ---------------------------------------------

    def on_message_begin(self) -> None:
        # What uvicorn's does but the ASGI scope, which only the ASGI path reads: a plain
        # inference never needs it (a dict, and a copy of the application's state, per
        # request). on_headers_complete makes it for a request that takes that path.
        self.url = b""
        self.expect_100_continue = False
        self.headers = []

    def on_headers_complete(self) -> None:
        self._check_header_block()
        exchange = self._exchange_for_request()
        if exchange is None:
            self._begin_asgi_scope()
            HttpToolsProtocol.on_headers_complete(self)
            return
        self.cycle = exchange  # type: ignore[assignment]
        self._receiving = exchange

    def _begin_asgi_scope(self) -> None:
        """The scope uvicorn's ``on_message_begin`` makes, for the request under way: made
        by uvicorn's own code, then given back what the request has read so far."""
        url, headers, expect = self.url, self.headers, self.expect_100_continue
        HttpToolsProtocol.on_message_begin(self)
        self.url, self.expect_100_continue = url, expect
        self.headers = self.scope["headers"] = headers  # the limits compare it by identity

    def on_body(self, body: bytes) -> None:
        exchange = self._receiving
        if exchange is not None and self.cycle is exchange:
            exchange.chunks.append(body)  # within the Content-Length checked against the limit
        else:
            HttpToolsProtocol.on_body(self, body)

    def on_message_complete(self) -> None:
        self._message_received()
        exchange = self._receiving
        if exchange is None or self.cycle is not exchange:
            HttpToolsProtocol.on_message_complete(self)
            return
        self._receiving = None
        self._run(exchange)

    # --- asyncio.Protocol ----------------------------------------------------------------

    def connection_lost(self, exc: Exception | None) -> None:
        exchange = self._running
        if exchange is not None and not exchange.response_complete:
            self.infer.withdraw(exchange)  # type: ignore[union-attr]
        super().connection_lost(exc)

    # --- the exchange ---------------------------------------------------------------------

    def _exchange_for_request(self) -> _Exchange | None:
        """An exchange for the request whose header block just ended, or None when it must
        take the ASGI path (the conditions are in the module's docstring)."""
        route = self.infer
        if route is None or not route.takes_plain_requests():
            return None
        parser = self.parser
        cycle = self.cycle
        if (parser.get_method() != b"POST" or self.expect_100_continue
                or parser.get_http_version() != "1.1" or parser.should_upgrade()
                or (cycle is not None and not cycle.response_complete)
                or self.flow.write_paused or self.limit_concurrency is not None):
            return None
        url = self.url
        if not url.endswith(b"/infer") or b"%" in url or not url.isascii():
            return None
        names = split_infer_path(url.decode("ascii"))
        if names is None:
            return None
        heads = infer_headers(self.headers)
        if heads.content_length is None or heads.content_length > route.limit:
            return None  # chunked, or refused with 413 by the ASGI path
        return _Exchange(names[0], names[1], heads, self.headers, parser.should_keep_alive())

    def _run(self, exchange: _Exchange) -> None:
        chunks = exchange.chunks
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        exchange.chunks = []
        self._running = exchange
        self.infer.start(exchange, body, self.loop, self._answer)  # type: ignore[union-attr]

    def _answer(self, exchange: _Exchange, reply: Answer) -> None:
        if exchange.disconnected:
            return  # nobody to answer
        exchange.response_started = exchange.response_complete = True
        self._running = None
        transport = self.transport
        if transport.is_closing():
            return
        transport.write(response_bytes(reply, exchange.keep_alive,
                                       self.server_state.default_headers))
        if not exchange.keep_alive:
            transport.close()
        self._answered()

    def _answered(self) -> None:
        """uvicorn's ``on_response_complete`` (which it calls here), but with the cheaper
        keep-alive timeout of the limits when no pipelined request waits."""
        if self.pipeline or self.transport.is_closing():
            self.on_response_complete()  # the next pipelined request, or nothing
            return
        self.server_state.total_requests += 1
        self.flow.resume_reading()
        self._keep_alive()


def response_bytes(reply: Answer, keep_alive: bool,
                   default_headers: Sequence[tuple[bytes, bytes]]) -> bytes:
    """The whole HTTP/1.1 response, with the headers uvicorn's ASGI path would send."""
    parts = [STATUS_LINE[reply.status]]
    for name, value in default_headers:  # the Date header, kept current by uvicorn
        parts += (name, b": ", value, b"\r\n")
    parts.append(b"content-length: %d\r\n" % len(reply.body))
    if reply.json_length is None:
        parts.append(_JSON_TYPE)
    else:
        parts.append(_BINARY_TYPE % reply.json_length)
    if reply.encoding is not None:
        parts.append(b"content-encoding: %s\r\n" % reply.encoding.encode())
    if not keep_alive:
        parts.append(_CLOSE)
    parts += (b"\r\n", reply.body)
    return b"".join(parts)


class PlainInfer(Protocol):
    """What answers plain inferences for the protocol: the server's :class:`InferRoute`, or,
    in a frontend process, what forwards them to the engine
    (:class:`naiad.frontends.bridge.frontend.ForwardedInfer`)."""

    limit: int  # --http-max-input-size

    def takes_plain_requests(self) -> bool: ...

    def start(self, exchange: InferExchange, body: bytes, loop: asyncio.AbstractEventLoop,
              on_answer: OnAnswer) -> None: ...

    def withdraw(self, exchange: InferExchange) -> None: ...


def naiad_protocol(limits: HTTPLimits, infer: PlainInfer | None) -> Any:
    """The protocol factory to give uvicorn's ``Config(http=...)``."""
    return functools.partial(NaiadHttpProtocol, limits=limits, infer=infer)
