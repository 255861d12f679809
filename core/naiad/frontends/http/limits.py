"""Connection limits of the HTTP listeners: how large a request's header block may be, how
many header fields it may have, and how long a connection may stay idle, take to send its
headers, or stall in the middle of a body.

Neither ASGI server enforces all of these on its own (uvicorn with httptools has no header
limit at all and times out only idle connections that already answered a request), so:

- on uvicorn (the default), :class:`GuardedHttpToolsProtocol`, uvicorn's httptools protocol
  with a small state machine around the parser: one comparison per read and per parser
  event when a request's headers arrive in one read, as they nearly always do; timers only
  for requests whose headers or body span reads;
- on hypercorn, its own settings (``h11_max_incomplete_size``, ``h2_max_header_list_size``,
  ``keep_alive_timeout``) and :class:`HypercornGuard`, an ASGI wrapper for the header count
  and the body timeout. Hypercorn's idle timer runs from the end of one response (or the
  connection's start) to the end of the next request's headers, so there the header
  timeout is the keep-alive timeout; its 431 has an empty body.

A refused request is answered (431, or 408 when a timeout strikes before anything was
written) with ``Connection: close`` and a short JSON error naming the setting; the
connection then closes. A connection idle between requests, or a new one that never sends
a byte, is closed without an answer, as nginx does.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from naiad.frontends.http.codec import error_body

BYTES = 1
KIB = 1024 * BYTES
SECONDS = 1.0

# After a refusal the answer is written and the sending side shut; what the client still
# sends is read and dropped for at most this long, so that closing does not reset the
# connection (a TCP reset may destroy the answer before the client reads it).
LINGER_SECONDS = 2 * SECONDS


@dataclass(frozen=True)
class HTTPLimits:
    """The limits of one HTTP listener (``naiad serve`` flags in brackets)."""

    # [--http-max-header-size] bytes of the request line and header fields together.
    max_header_size: int = 64 * KIB
    # [--http-max-header-count] header fields in one request.
    max_header_count: int = 100
    # [--http-keepalive-timeout] seconds a connection may stay idle between requests.
    keepalive_timeout: float = 75 * SECONDS
    # [--http-header-timeout] seconds from a request's first byte (on a new connection: from
    # its accept) until its header block is complete.
    header_timeout: float = 10 * SECONDS
    # [--http-body-timeout] seconds a request body may stall: the longest wait for the next
    # bytes while it is incomplete (an inactivity timeout, not a bound on the whole body).
    body_timeout: float = 30 * SECONDS

    def header_size_refusal(self) -> str:
        return (f"the request line and header fields exceed --http-max-header-size "
                f"({self.max_header_size} bytes)")

    def header_count_refusal(self, count: int) -> str:
        return (f"the request has {count} header fields, more than --http-max-header-count "
                f"({self.max_header_count})")

    def header_timeout_refusal(self) -> str:
        return (f"the request's header fields did not arrive within --http-header-timeout "
                f"({self.header_timeout:g} s)")

    def body_timeout_refusal(self) -> str:
        return (f"the request body stalled: no bytes for --http-body-timeout "
                f"({self.body_timeout:g} s) before it was complete")


HEADER_FIELDS_TOO_LARGE = 431
REQUEST_TIMEOUT = 408
_REASONS = {HEADER_FIELDS_TOO_LARGE: b"Request Header Fields Too Large",
            REQUEST_TIMEOUT: b"Request Timeout"}


def refusal_bytes(status: int, message: str) -> bytes:
    """A whole HTTP/1.1 answer that closes the connection: status, JSON error body."""
    body = error_body(message)
    return b"".join([
        b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status]),
        b"content-type: application/json\r\ncontent-length: %d\r\n" % len(body),
        b"connection: close\r\n\r\n", body])


# Where a connection's parser stands. Inside a header block it is still _IDLE or _DONE:
# uvicorn starts a new header list per request, so "the current list is not the last one
# completed" tells it without a method call per request (GuardedHttpToolsProtocol._in_headers).
_IDLE = 0      # no request received yet
_BODY = 2      # headers complete, body not yet
_DONE = 3      # the whole request received (the application may still be answering it)
_CLOSING = 4   # refused: the answer is written, what arrives is dropped


class _Refused(Exception):
    """Raised in a parser callback to stop parsing a refused request."""


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with :class:`HTTPLimits` enforced.

    The header block is measured in reads: a read that ends inside it counts whole, so an
    endless header line is refused once the bytes received exceed the limit; when the block
    ends in a read that could take it over the limit, its exact size is computed from what
    the parser delivered. The keep-alive timeout after a response is uvicorn's own timer,
    except after an answer naiad's protocol wrote itself (:meth:`_keep_alive`).
    """

    def __init__(self, *args: Any, limits: HTTPLimits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        self._max_header_size = limits.max_header_size
        self._max_header_count = limits.max_header_count
        self._phase = _IDLE
        self._completed: list | None = None  # header list of the last complete header block
        self._header_bytes = 0  # of the current header block, in reads before this one
        self._read_size = 0
        self._timer: asyncio.TimerHandle | None = None
        self._body_seen = 0.0  # loop time when body bytes last arrived
        self._refusal: tuple[int, str] | None = None
        # The keep-alive timeout of :meth:`_keep_alive`: loop time of the last answer while
        # nothing arrived since (None: something did), and its one timer.
        self._idle_since: float | None = None
        self._idle_timer: asyncio.TimerHandle | None = None

    # --- asyncio.Protocol --------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # A new connection must send a whole request head within the header timeout.
        self._timer = self.loop.call_later(self.limits.header_timeout, self._header_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        start = self._phase
        if start == _CLOSING:
            return
        # As uvicorn's, with a refusal raised in a parser callback answered as such.
        keepalive = self.timeout_keep_alive_task
        if keepalive is not None:
            keepalive.cancel()
            self.timeout_keep_alive_task = None
        self._idle_since = None
        headers, completed = self.headers, self._completed
        self._read_size = len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:  # a callback's exception too: _Refused among them
            if self._refusal is not None:
                self._refuse(*self._refusal)
                return
            self.logger.warning("Invalid HTTP request received.")
            self.send_400_response("Invalid HTTP request received.")
            return
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
        now = self.headers
        if now is not None and now is not self._completed:  # it ended inside a header block
            if now is headers:
                self._header_bytes += len(data)
            elif self._completed is completed and start != _BODY:
                self._header_bytes = len(data)  # the request began with this read
            else:  # pipelined: it began after another request in this read
                self._header_bytes = self._parsed_header_size()
            if self._header_bytes > self._max_header_size:
                self._refuse(HEADER_FIELDS_TOO_LARGE, self.limits.header_size_refusal())
            elif self._timer is None:
                self._timer = self.loop.call_later(self.limits.header_timeout,
                                                   self._header_timeout)
        elif self._phase == _BODY:  # the read ended inside a body
            self._body_seen = self.loop.time()
            if self._timer is None:
                self._timer = self.loop.call_later(self.limits.body_timeout,
                                                   self._body_timeout)

    # --- httptools callbacks ---------------------------------------------------------------

    # (The parent's methods are called by name, not through super(): these run per request.)

    def on_headers_complete(self) -> None:
        self._check_header_block()
        HttpToolsProtocol.on_headers_complete(self)

    def on_message_complete(self) -> None:
        self._message_received()
        HttpToolsProtocol.on_message_complete(self)

    def _check_header_block(self) -> None:
        """The limits on a complete header block (raising :class:`_Refused`); then the
        request's body is read under the body timeout."""
        # Reads before this one, plus this one: more than the header block when the read
        # carries body bytes or another request, so the exact size is taken only then.
        if self._header_bytes + self._read_size > self._max_header_size and \
                self._parsed_header_size() > self._max_header_size:
            self._refusal = (HEADER_FIELDS_TOO_LARGE, self.limits.header_size_refusal())
            raise _Refused
        if len(self.headers) > self._max_header_count:
            self._refusal = (HEADER_FIELDS_TOO_LARGE,
                             self.limits.header_count_refusal(len(self.headers)))
            raise _Refused
        self._phase = _BODY
        self._completed = self.headers
        self._header_bytes = 0
        if self._timer is not None:
            self._cancel_timer()

    def _keep_alive(self) -> None:
        """Start the keep-alive timeout after an answer, as uvicorn's timer does, without a
        timer per answer: the one timer, when it fires, closes the connection if nothing
        arrived for ``timeout_keep_alive`` seconds since the last answer, or looks again
        when that could be the case. (A timer made and cancelled per request was about 1 %
        of the engine's instructions per plain inference, issue 26.)"""
        self._idle_since = self.loop.time()
        if self._idle_timer is None:
            self._idle_timer = self.loop.call_later(self.timeout_keep_alive,
                                                    self._idle_timeout)

    def _idle_timeout(self) -> None:
        self._idle_timer = None
        since = self._idle_since
        if since is None:
            return  # a request arrived: its answer starts the timeout again
        left = since + self.timeout_keep_alive - self.loop.time()
        if left > 0:
            self._idle_timer = self.loop.call_later(left, self._idle_timeout)
            return
        self.timeout_keep_alive_handler()

    def _message_received(self) -> None:
        self._phase = _DONE
        if self._timer is not None:
            self._cancel_timer()

    # --- limits ------------------------------------------------------------------------------

    def _in_headers(self) -> bool:
        """Whether a request's header block has begun and is not complete."""
        return self.headers is not None and self.headers is not self._completed

    def _parsed_header_size(self) -> int:
        """The bytes of the current request's line and complete header fields, as sent
        without optional white space."""
        size = len(self.url) + 16  # method, spaces, "HTTP/1.1\r\n", the blank line
        for name, value in self.headers:
            size += len(name) + len(value) + 4
        return size

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _header_timeout(self) -> None:
        self._timer = None
        if self._in_headers():
            self._refuse(REQUEST_TIMEOUT, self.limits.header_timeout_refusal())
        elif self._phase == _IDLE:
            # A new connection that never sent a byte: nothing to answer.
            self.transport.close()

    def _body_timeout(self) -> None:
        self._timer = None
        if self._phase != _BODY:
            return
        now = self.loop.time()
        if self.flow.read_paused:
            # The application is not reading the body: the client is not the one stalling.
            self._body_seen = now
        left = self._body_seen + self.limits.body_timeout - now
        if left > 0:  # bytes arrived meanwhile: look again when the timeout could expire
            self._timer = self.loop.call_later(left, self._body_timeout)
            return
        self._refuse(REQUEST_TIMEOUT, self.limits.body_timeout_refusal())

    def _refuse(self, status: int, message: str) -> None:
        """Answer ``status`` if nothing of an answer was written yet, then close; from
        now on what arrives is dropped."""
        in_body = self._phase == _BODY  # else the request has no cycle of its own yet
        self._phase = _CLOSING
        self._cancel_timer()
        self._unset_keepalive_if_required()
        transport = self.transport
        if transport.is_closing():
            return
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            if not in_body:
                # The application still answers the previous request (pipelined): that
                # answer goes out, then the connection closes.
                cycle.keep_alive = False
                return
            if cycle.response_started:
                transport.close()  # answered early; the client owes a body it never sends
                return
            # The application waits for this body: it sees a disconnect, and whatever it
            # would answer is dropped.
            cycle.disconnected = True
            cycle.message_event.set()
        transport.write(refusal_bytes(status, message))
        if transport.can_write_eof():
            transport.write_eof()  # the answer, then FIN; a client's EOF closes at once
            self.loop.call_later(LINGER_SECONDS, transport.close)
        else:
            transport.close()


def hypercorn_settings(limits: HTTPLimits) -> dict[str, Any]:
    """The hypercorn ``Config`` attributes that carry :class:`HTTPLimits`."""
    return {
        "h11_max_incomplete_size": limits.max_header_size,  # 431 past it (empty body)
        "h2_max_header_list_size": limits.max_header_size,
        # idle between requests, and from a response to the next request's headers
        "keep_alive_timeout": limits.keepalive_timeout,
    }


class HypercornGuard:
    """The ASGI application as hypercorn serves it: the header count checked, the body read
    under the body timeout. (uvicorn's protocol does both without this wrapper.)"""

    def __init__(self, app: Any, limits: HTTPLimits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limits = self.limits
        count = len(scope["headers"])
        if count > limits.max_header_count:
            await _answer_and_close(send, HEADER_FIELDS_TOO_LARGE,
                                    limits.header_count_refusal(count))
            return
        body = _TimedBody(receive, send, limits)
        await self.app(scope, body.receive, body.send)


class _TimedBody:
    """``receive`` with the body timeout while the body is incomplete; after a timeout the
    application sees a disconnect and what it sends is dropped."""

    def __init__(self, receive: Any, send: Any, limits: HTTPLimits) -> None:
        self._receive, self._send, self.limits = receive, send, limits
        self.more_body = True
        self.started = False
        self.timed_out = False

    async def receive(self) -> dict:
        if self.timed_out:
            return {"type": "http.disconnect"}
        if not self.more_body:
            return await self._receive()  # type: ignore[no-any-return]
        try:
            message = await asyncio.wait_for(self._receive(), self.limits.body_timeout)
        except asyncio.TimeoutError:
            self.timed_out = True
            if not self.started:
                self.started = True
                await _answer_and_close(self._send, REQUEST_TIMEOUT,
                                        self.limits.body_timeout_refusal())
            return {"type": "http.disconnect"}
        if message["type"] == "http.request" and not message.get("more_body", False):
            self.more_body = False
        return message  # type: ignore[no-any-return]

    async def send(self, message: dict) -> None:
        if self.timed_out:
            return
        if message["type"] == "http.response.start":
            self.started = True
        await self._send(message)


async def _answer_and_close(send: Any, status: int, message: str) -> None:
    body = error_body(message)
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", b"%d" % len(body)),
        (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
