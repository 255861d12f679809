"""One HTTP/2 connection of naiad's gRPC server (:mod:`.naiad_server`): frames in, calls
out, flow control both ways.

The protocol runs on the server's event loop. A unary ``ModelInfer`` is answered there
(:class:`.loop_infer.LoopInfer`: decoded, submitted, encoded when its future completes,
with no thread), and so is each request of a ``ModelStreamInfer``
(:class:`.loop_stream.LoopStream`); every other call runs in the servicer's method handlers
on a thread of the pool (:mod:`.handler_calls`), as on grpc's thread-pool server, and sends
its answer back through the loop. What goes out in one round of the loop goes in one write.

Flow control (RFC 9113 section 5.2): the client may send :data:`STREAM_WINDOW` bytes per
call and :data:`CONNECTION_WINDOW` (or one message of the largest size, if more) on the
connection before naiad gives more. The connection's window comes back only as data is
handed on (a unary call's message to its model, a stream's to its handler), so what one
connection can make naiad hold is bounded by it; a unary call's own window comes back as
its data arrives (its message limit, ``--http-max-input-size``, bounds it), a stream's as
its handler takes each message: a client streaming faster than its requests are served is
slowed down, not buffered (a stream on the loop hands each message on as it comes, and its
window goes back as a unary call's). What naiad sends waits for the client's windows
(:mod:`.sending`).
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import grpc

from naiad.frontends.grpc import http2
from naiad.frontends.grpc.call import Call
from naiad.frontends.grpc.handler_calls import END, HandlerCalls
from naiad.frontends.grpc.options import GRPCOptions
from naiad.frontends.grpc.sending import STREAM_SEND_BUFFER, Sender
from naiad.frontends.grpc.status import bounded_message

log = logging.getLogger("naiad.grpc")

#: What a client may send on one call, and on the connection (at least), before naiad
#: gives more.
STREAM_WINDOW = 4 * 1024 * 1024
CONNECTION_WINDOW = 16 * 1024 * 1024
# Header lists whose call headers a connection remembers (a client repeats a handful).
CALL_HEADS_REMEMBERED = 64
_SERVICE_PREFIX = "/inference.GRPCInferenceService/"
_STREAMING = frozenset({"ModelStreamInfer"})
# Frame types whose payload has one size (RFC 9113 section 6).
_FIXED_SIZES = {http2.RST_STREAM: 4, http2.PING: 8, http2.WINDOW_UPDATE: 4, http2.PRIORITY: 5}
# The usual answer's header blocks (answer_unary): the uncompressed response's, the OK status.
_RESPONSE_HEADERS = http2.response_headers()
_RESPONSE_HEADERS_SIZE = len(_RESPONSE_HEADERS)
_OK_TRAILERS_SIZE = len(http2.OK_TRAILERS)


class Service(Protocol):
    """What a connection needs of the server it belongs to (``naiad_server.GRPCService``)."""

    options: GRPCOptions
    loop: asyncio.AbstractEventLoop
    handlers: dict[str, grpc.RpcMethodHandler]  # by RPC name
    pool: ThreadPoolExecutor  # runs every call but a plain ModelInfer
    connections: set[GRPCConnection]
    max_message: int  # bytes, --http-max-input-size
    max_frame_received: int
    min_ping_interval_s: float
    compression: int | None  # zlib's level for inference responses; None: uncompressed
    compressed_methods: frozenset[str]

    def pick_encoding(self, accept: bytes) -> bytes | None: ...

    def compress(self, message: bytes, encoding: bytes) -> bytes: ...

    def run_unary(self, connection: GRPCConnection, call: Call, message: bytes) -> None: ...

    def expect_message(self, connection: GRPCConnection, call: Call,
                       done: bool = False) -> None: ...

    def watch(self, connection: GRPCConnection) -> None: ...

    def start_stream(self, connection: GRPCConnection, call: Call) -> bool: ...


class GRPCConnection(HandlerCalls, asyncio.Protocol):
    """The HTTP/2 server side of one client connection."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.loop = service.loop
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.preface = False  # the client's connection preface came
        self.calls: dict[int, Call] = {}
        # The open streams (ModelStreamInfer): a window update may let them send more.
        self.streams: set[Call] = set()
        self.last_stream = 0
        self.decoder = http2.HeaderDecoder(service.options.max_header_size)
        # What call_headers read of a header list, by the list's id (the entry keeps the
        # list alive, so the id names no other): the decoder hands back the very same list
        # for a client's repeated header block, whose call headers are then read once.
        self.call_heads: dict[int, tuple[list, http2.CallHeaders]] = {}
        self.headers_block: tuple[int, int, bytearray] | None = None  # stream, flags, block
        self.sender = Sender(self.loop)
        self.received = 0  # connection window handed on, not yet given back
        # The connection's receive window: at least one message of the largest size.
        self.window = min(max(CONNECTION_WINDOW, service.max_message + 64 * 1024),
                          http2.MAX_WINDOW)
        self.allowed = self.window  # what the client may still send on the connection
        self.going_away = False
        self.closing = False
        self.timers: list[asyncio.TimerHandle] = []
        self.last_activity = self.loop.time()
        self.ping_strikes = 0
        self.last_ping = 0.0
        self.awaiting_ack = False

    # --- the transport ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = self.sender.transport = transport  # type: ignore[assignment]
        self.service.connections.add(self)
        settings = {http2.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
                    http2.MAX_HEADER_LIST_SIZE: self.service.options.max_header_size,
                    http2.ENABLE_PUSH: 0}
        self.write(http2.settings_frame(settings)
                   + http2.window_update(0, self.window - http2.DEFAULT_WINDOW))
        self.service.watch(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = self.sender.closing = True
        self.service.connections.discard(self)
        for timer in self.timers:
            timer.cancel()
        for call in list(self.calls.values()):
            self.cancel(call)
        self.calls.clear()

    def pause_writing(self) -> None:
        self.sender.paused = True
        for call in self.calls.values():
            if call.writable is not None:
                call.writable.clear()

    def resume_writing(self) -> None:
        self.sender.paused = False
        for call in self.calls.values():
            if call.writable is not None and not call.pending:
                call.writable.set()
            elif call.stream is not None:
                call.stream.resume()

    def write(self, data: bytes) -> None:
        self.sender.write(data)

    def close(self, code: int = http2.NO_ERROR, debug: bytes = b"") -> None:
        """End the connection: a GOAWAY, then close once it is written."""
        if self.closing or self.transport is None:
            return
        self.write(http2.goaway(self.last_stream, code, debug))
        self.sender.flush()
        self.closing = self.sender.closing = True
        self.transport.close()

    def go_away(self) -> None:
        """Take no new call; the connection closes when its calls are over."""
        if not self.going_away and not self.closing:
            self.going_away = True
            self.write(http2.goaway(self.last_stream, http2.NO_ERROR))
            if not self.calls:
                self.close()

    def later(self, delay_s: float, callback: Any) -> None:
        """Run ``callback`` in ``delay_s`` unless the connection is gone by then."""
        timers = self.timers
        if len(timers) > 16:  # a long-lived connection re-arms its timers
            now = self.loop.time()
            timers[:] = [timer for timer in timers
                         if not timer.cancelled() and timer.when() > now]
        timers.append(self.loop.call_later(delay_s, callback))

    # --- frames in ----------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data if self.buffer else data
        position = 0
        if not self.preface:
            if len(buffer) < len(http2.PREFACE):
                if not http2.PREFACE.startswith(buffer):
                    self.close(http2.PROTOCOL_ERROR)
                self.buffer = buffer
                return
            if not buffer.startswith(http2.PREFACE):
                self.close(http2.PROTOCOL_ERROR, b"not an HTTP/2 connection preface")
                return
            self.preface = True
            position = len(http2.PREFACE)
        unpack = http2.FRAME_HEADER.unpack_from
        size = len(buffer)
        try:
            while size - position >= 9 and not self.closing:
                high, low, kind, flags, stream = unpack(buffer, position)
                length = (high << 8) | low
                if length > self.service.max_frame_received:
                    raise _ConnectionError(http2.FRAME_SIZE_ERROR,
                                           f"a frame of {length} bytes")
                end = position + 9 + length
                if end > size:
                    break
                payload = buffer[position + 9:end]
                position = end
                self.on_frame(kind, flags, stream & 0x7FFFFFFF, payload)
        except _ConnectionError as exc:
            self.close(exc.code, str(exc).encode())
            return
        except Exception as exc:  # naiad's bug: this connection ends, the server serves on
            log.exception("gRPC connection: a frame failed")
            self.close(http2.INTERNAL_ERROR, f"{type(exc).__name__}".encode())
            return
        self.buffer = buffer[position:] if position < size else b""

    def on_frame(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        if self.headers_block is not None and kind != http2.CONTINUATION:
            raise _ConnectionError(http2.PROTOCOL_ERROR, "a header block was interrupted")
        expected = _FIXED_SIZES.get(kind)
        if expected is not None and len(payload) != expected:
            raise _ConnectionError(http2.FRAME_SIZE_ERROR,
                                   f"a frame of type {kind} takes {expected} bytes")
        if kind == http2.DATA:
            self.ping_strikes, self.last_ping = 0, 0.0  # pings next to data are not abuse
            self.on_data(flags, stream, payload)
        elif kind == http2.HEADERS:
            self.ping_strikes, self.last_ping = 0, 0.0
            try:
                block = http2.unpadded(flags, payload, bool(flags & http2.PRIORITY_FLAG))
            except ValueError as exc:
                raise _ConnectionError(http2.PROTOCOL_ERROR, str(exc)) from None
            if flags & http2.END_HEADERS:
                self.on_headers(stream, flags, block)
            else:
                self.headers_block = (stream, flags, bytearray(block))
        elif kind == http2.CONTINUATION:
            if self.headers_block is None or self.headers_block[0] != stream:
                raise _ConnectionError(http2.PROTOCOL_ERROR, "an unexpected CONTINUATION")
            block = self.headers_block[2]
            block += payload
            if len(block) > 4 * self.service.options.max_header_size + 4096:
                raise _ConnectionError(http2.ENHANCE_YOUR_CALM, "header block too large")
            if flags & http2.END_HEADERS:
                opened_with = self.headers_block[1]
                self.headers_block = None
                self.on_headers(stream, opened_with, bytes(block))
        elif kind == http2.SETTINGS:
            if not flags & http2.ACK:
                self.on_settings(payload)
        elif kind == http2.WINDOW_UPDATE:
            self.on_window_update(stream, payload)
        elif kind == http2.PING:
            self.on_ping(flags, payload)
        elif kind == http2.RST_STREAM:
            call = self.calls.pop(stream, None)
            if call is not None:
                self.cancel(call)
        elif kind == http2.GOAWAY:
            self.going_away = True
            if not self.calls:
                self.close()
        elif kind == http2.PUSH_PROMISE:
            raise _ConnectionError(http2.PROTOCOL_ERROR, "a client may not push")
        # PRIORITY and unknown frame types are ignored (RFC 9113 section 5.5).

    def on_settings(self, payload: bytes) -> None:
        if len(payload) % 6:
            raise _ConnectionError(http2.FRAME_SIZE_ERROR, "a SETTINGS frame of odd size")
        try:
            self.sender.apply_settings(http2.parse_settings(payload), self.calls.values())
        except ValueError as exc:
            raise _ConnectionError(http2.FLOW_CONTROL_ERROR, str(exc)) from None
        self.write(http2.frame(http2.SETTINGS, http2.ACK, 0))
        self.send_pending()

    def on_window_update(self, stream: int, payload: bytes) -> None:
        increment = http2.read_u32(payload)
        if stream == 0:
            self.sender.window += increment
            self.send_pending()
        else:
            call = self.calls.get(stream)
            if call is not None:
                call.send_window += increment
                self.send_pending(call)

    def on_ping(self, flags: int, payload: bytes) -> None:
        if flags & http2.ACK:
            self.awaiting_ack = False
            return
        # grpc core's ping policy: pings closer together than the interval are strikes,
        # and without calls (unless permitted) the interval is two hours; beyond the most
        # strikes allowed (0: no limit) the connection ends with "too_many_pings".
        now = self.loop.time()
        options = self.service.options
        interval = (self.service.min_ping_interval_s
                    if self.calls or options.keepalive_permit_without_calls else 7200.0)
        last, self.last_ping = self.last_ping, now
        if now - last < interval:
            self.ping_strikes += 1
            if options.http2_max_ping_strikes and \
                    self.ping_strikes > options.http2_max_ping_strikes:
                raise _ConnectionError(http2.ENHANCE_YOUR_CALM, "too_many_pings")
        self.write(http2.frame(http2.PING, http2.ACK, 0, payload))

    def on_headers(self, stream: int, flags: int, block: bytes) -> None:
        try:
            headers = self.decoder.decode(block)
        except http2.BadHeaderBlock as exc:
            raise _ConnectionError(http2.COMPRESSION_ERROR, str(exc)) from None
        except http2.HeaderListTooLarge:
            # hpack stopped mid-block: the table may no longer match the client's.
            self.open_refused(stream, grpc.StatusCode.RESOURCE_EXHAUSTED, (
                f"the call's metadata is larger than --grpc-max-header-size="
                f"{self.service.options.max_header_size} bytes"))
            self.go_away()
            return
        call = self.calls.get(stream)
        if call is not None:  # trailers: only END_STREAM matters
            if flags & http2.END_STREAM:
                self.on_end(call)
            return
        if stream % 2 == 0:
            raise _ConnectionError(http2.PROTOCOL_ERROR, f"stream {stream} cannot open")
        if stream <= self.last_stream:
            return  # a late header block on a call naiad ended: nothing to do
        self.last_stream = stream
        if self.going_away:
            self.write(http2.rst_stream(stream, http2.REFUSED_STREAM))
            return
        self.open_call(stream, headers, bool(flags & http2.END_STREAM))

    def refuse_call(self, stream: int, ended: bool, code: grpc.StatusCode, message: str
                    ) -> None:
        """Answer a call that cannot open with ``code``; the client need not send on."""
        self.open_refused(stream, code, message)
        if not ended:
            self.write(http2.rst_stream(stream, http2.NO_ERROR))

    def open_refused(self, stream: int, code: grpc.StatusCode, message: str) -> None:
        self.last_stream = max(self.last_stream, stream)
        self.write(http2.frame(http2.HEADERS, http2.END_HEADERS | http2.END_STREAM, stream,
                               self.sender.table_update() + http2.status_trailers(
                                   code.value[0], bounded_message(message), False)))

    def open_call(self, stream: int, headers: list[tuple[bytes, bytes]], ended: bool) -> None:
        read = self.call_heads.get(id(headers))
        if read is not None and read[0] is headers:
            heads = read[1]
        else:
            try:
                heads = http2.call_headers(headers)
            except ValueError as exc:
                self.refuse_call(stream, ended, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
                return
            if len(self.call_heads) >= CALL_HEADS_REMEMBERED:
                self.call_heads.clear()
            self.call_heads[id(headers)] = (headers, heads)
        method, encoding = heads.path, heads.encoding
        name = method[len(_SERVICE_PREFIX):] if method.startswith(_SERVICE_PREFIX) else ""
        if name not in self.service.handlers:
            self.refuse_call(stream, ended, grpc.StatusCode.UNIMPLEMENTED,
                             f"Method not found: {method}")
            return
        if encoding not in (b"", b"identity") and encoding not in http2.WBITS:
            self.refuse_call(stream, ended, grpc.StatusCode.UNIMPLEMENTED, (
                f"Compression algorithm '{encoding.decode('latin-1')}' is not supported "
                f"(gzip, deflate and identity are)"))
            return
        timeout = heads.timeout_s
        call = Call(stream, name, heads.metadata, self.sender.initial_window)
        call.compressed = encoding if encoding in http2.WBITS else None
        call.accept = heads.accept
        call.started = self.loop.time()
        self.calls[stream] = call
        if timeout is not None:
            call.deadline = self.loop.call_later(timeout, self.deadline_passed, call)
        if name in _STREAMING:
            self.streams.add(call)
            self.start_stream(call, timeout)
        else:
            self.service.expect_message(self, call)
        if ended:
            self.on_end(call)

    def give_back(self, size: int) -> None:
        """``size`` bytes of the connection's window were handed on (or dropped): the
        client gets them back once half the window is."""
        self.received += size
        if self.received > self.window // 2:
            self.write(http2.window_update(0, self.received))
            self.allowed += self.received
            self.received = 0

    def on_data(self, flags: int, stream: int, payload: bytes) -> None:
        length = len(payload)
        self.allowed -= length
        if self.allowed < 0:  # a client that ignores flow control: nothing bounds it
            raise _ConnectionError(http2.FLOW_CONTROL_ERROR,
                                   "DATA beyond the connection's window")
        call = self.calls.get(stream)
        if call is None or call.ended:
            if stream > self.last_stream:
                raise _ConnectionError(http2.PROTOCOL_ERROR, f"DATA on idle stream {stream}")
            self.give_back(length)
            return  # a call naiad ended (or refused) already: dropped
        if flags & http2.PADDED:
            try:
                payload = http2.unpadded(flags, payload)
            except ValueError as exc:
                raise _ConnectionError(http2.PROTOCOL_ERROR, str(exc)) from None
            self.give_back(length - len(payload))
        call.held += len(payload)
        call.data += payload
        if call.messages is not None or call.stream is not None:
            self.take_messages(call)
        else:
            if len(call.data) > 5:  # refuse an oversized message as soon as it says so
                size = http2.GRPC_PREFIX.unpack_from(call.data)[1]
                if size > self.service.max_message:
                    self.refuse_large(call, size)
                    return
            # The window given back once half of it is used: a message under half the
            # window (almost every one) costs no WINDOW_UPDATE, so no write of its own.
            call.unread += length
            if call.unread > STREAM_WINDOW // 2:
                self.write(http2.window_update(stream, call.unread))
                call.unread = 0
        if flags & http2.END_STREAM:
            self.on_end(call)

    def refuse_large(self, call: Call, size: int) -> None:
        self.finish(call, grpc.StatusCode.RESOURCE_EXHAUSTED, (
            f"{call.method}: Received message larger than max ({size} vs. "
            f"{self.service.max_message}): --http-max-input-size"))

    def on_end(self, call: Call) -> None:
        """The client sent its last message on ``call``."""
        call.ended = True
        if call.stream is not None:
            call.stream.on_client_end()
            return
        if call.messages is not None:
            call.messages.put(END)
            return
        data = call.data
        if len(data) < 5:
            self.finish(call, grpc.StatusCode.INVALID_ARGUMENT, (
                f"{call.method}: the call ended without a request message" if not data else
                f"{call.method}: the request message is cut short"))
            return
        compressed, size = http2.GRPC_PREFIX.unpack_from(data)
        if len(data) != 5 + size:
            self.finish(call, grpc.StatusCode.INVALID_ARGUMENT, (
                f"{call.method}: a unary call takes exactly one message ({len(data)} bytes "
                f"received, the first message announces {size})"))
            return
        message = self.unpack(call, compressed, bytes(data[5:]))
        call.data = bytearray()
        self.give_back(call.held)  # handed on: the request holds it now, not the connection
        call.held = 0
        if message is not None:
            self.service.expect_message(self, call, done=True)
            self.service.run_unary(self, call, message)

    def unpack(self, call: Call, compressed: int, message: bytes) -> bytes | None:
        """A message's bytes, decompressed; None (and the call ended) if they cannot be."""
        if not compressed:
            return message
        if call.compressed is None:
            self.finish(call, grpc.StatusCode.INTERNAL, (
                f"{call.method}: a compressed message without grpc-encoding"))
            return None
        limit = self.service.max_message
        try:
            plain = http2.inflate(message, call.compressed, limit)
        except zlib.error as exc:
            self.finish(call, grpc.StatusCode.INTERNAL, (
                f"{call.method}: the message does not decompress "
                f"({call.compressed.decode()}): {exc}"))
            return None
        if len(plain) > limit:
            self.refuse_large(call, len(plain))
            return None
        return plain

    # --- streams ------------------------------------------------------------------------

    def start_stream(self, call: Call, timeout: float | None) -> None:
        if self.service.start_stream(self, call):
            return  # on the loop (.loop_stream), or refused
        self.start_stream_in_thread(call, timeout)

    def take_messages(self, call: Call) -> None:
        data = call.data
        limit = self.service.max_message
        while len(data) >= 5:
            compressed, size = http2.GRPC_PREFIX.unpack_from(data)
            if size > limit:
                self.refuse_large(call, size)
                return
            if len(data) < 5 + size:
                break
            message = self.unpack(call, compressed, bytes(data[5:5 + size]))
            del data[:5 + size]
            if message is None:
                return
            if call.stream is not None:  # handed on at once
                call.stream.on_message(message)
                self.stream_message_taken(call, 5 + size)
                continue
            call.unread += 5 + size
            call.messages.put((message, 5 + size))  # type: ignore[union-attr]

    def stream_message_taken(self, call: Call, size: int) -> None:
        """A message of a stream run on the loop was handed on as it came: its window
        goes back as a unary call's does, once half the call's window is used (most
        messages then cost no WINDOW_UPDATE, no write and no wake-up of the client)."""
        if call.held < size:
            return  # the message ended the call, which gave its window back
        call.held -= size
        self.give_back(size)
        call.unread += size
        if call.unread > STREAM_WINDOW // 2 and not call.closed and not call.ended:
            self.write(http2.window_update(call.id, call.unread))
            call.unread = 0

    # --- ending calls ---------------------------------------------------------------------

    def may_send(self, call: Call) -> bool:
        """Whether a stream run on the loop may send another answer: the client reads
        (what flow control holds of the call's answers is under the bound) and the
        transport takes more."""
        if self.sender.paused:
            return False
        pending = call.pending
        return not pending or sum(len(data) for data, _ in pending) < STREAM_SEND_BUFFER

    def end_now(self, call: Call, code: grpc.StatusCode, message: str) -> None:
        """End ``call`` with a status at once: what flow control still holds of its
        messages is dropped (trailers are not flow-controlled, so a client that does not
        read still gets the status)."""
        call.pending.clear()
        self.finish(call, code, bounded_message(message))

    def cancel_call(self, call: Call) -> None:
        """A handler cancelled its call (grpc's ``context.cancel()``)."""
        if not call.closed:
            self.write(http2.rst_stream(call.id, http2.CANCEL))
            self.calls.pop(call.id, None)
            self.cancel(call)

    # --- frames out ---------------------------------------------------------------------

    def send_message(self, call: Call, message: bytes, uncompressed: bool = False) -> None:
        """Send one response message (with the response headers before the first)."""
        if call.closed or self.closing:
            return
        # As grpc core: a ping after naiad sent headers or data is no abuse.
        self.ping_strikes, self.last_ping = 0, 0.0
        encoding = None
        if not uncompressed and self.service.compression is not None \
                and call.method in self.service.compressed_methods:
            encoding = self.service.pick_encoding(call.accept)
        if not call.headers_sent:
            call.headers_sent = True
            self.sender.headers(call, http2.response_headers(encoding))
        if encoding is not None:
            body = self.service.compress(message, encoding)
            data = http2.GRPC_PREFIX.pack(1, len(body)) + body
        else:
            data = http2.GRPC_PREFIX.pack(0, len(message)) + message
        self.sender.data(call, data, 0)

    def answer_unary(self, call: Call, message: bytes) -> None:
        """:meth:`send_message` then :meth:`finish` with OK, the usual answer in one pass:
        the response headers, the message and the OK trailers in one write, when the
        message goes uncompressed, fits the windows and a frame, the call has sent nothing
        yet and no header table update is due. Any other answer takes those two steps.
        The same frames either way (``tests/core/frontends/grpc/test_unit_grpc_sending.py``);
        a unary call's answer takes this on nearly every call (issue 26)."""
        sender = self.sender
        size = len(message) + 5
        if (call.closed or self.closing or call.headers_sent or call.pending
                or sender.table_size is not None or size > sender.window
                or size > call.send_window or size > sender.max_frame
                or (self.service.compression is not None
                    and call.method in self.service.compressed_methods)):
            self.send_message(call, message)
            self.finish(call, grpc.StatusCode.OK, "")
            return
        call.headers_sent = call.closed = True
        self.ping_strikes, self.last_ping = 0, 0.0
        if call.deadline is not None:
            call.deadline.cancel()
        sender.window -= size
        call.send_window -= size
        stream = call.id
        pack = http2.FRAME_HEADER.pack
        sender.write(b"".join((
            pack(_RESPONSE_HEADERS_SIZE >> 8, _RESPONSE_HEADERS_SIZE & 0xFF, http2.HEADERS,
                 http2.END_HEADERS, stream),
            _RESPONSE_HEADERS,
            pack(size >> 8, size & 0xFF, http2.DATA, 0, stream),
            http2.GRPC_PREFIX.pack(0, len(message)), message,
            pack(_OK_TRAILERS_SIZE >> 8, _OK_TRAILERS_SIZE & 0xFF, http2.HEADERS,
                 http2.END_HEADERS | http2.END_STREAM, stream),
            http2.OK_TRAILERS)))
        if not call.ended:  # the client need not send the rest of its messages
            self.write(http2.rst_stream(stream, http2.NO_ERROR))
        self.calls.pop(stream, None)
        self.call_over(call)

    def send_pending(self, only: Call | None = None) -> None:
        """Send what flow control held back (of ``only``, or of every call that may wait
        for window: those with data held back, and the streams). Not every open call: a
        client sends window updates for the connection with every few answers, and with
        many calls open on it that walk cost more than the calls themselves."""
        if only is not None:
            calls = [only]
        elif self.sender.held_back or self.streams:
            live = self.calls
            calls = sorted((call for call in self.sender.held_back | self.streams
                            if live.get(call.id) is call), key=_call_id)  # in stream order
        else:
            return
        for call in self.sender.pending(calls):
            self.calls.pop(call.id, None)
            self.call_over(call)

    def finish(self, call: Call, code: grpc.StatusCode, message: str) -> None:
        """End ``call`` with its status (after whatever it still has to send)."""
        if call.closed:
            return
        call.closed = True
        self.ping_strikes, self.last_ping = 0, 0.0
        if call.deadline is not None:
            call.deadline.cancel()
        trailers = http2.status_trailers(code.value[0], message, call.headers_sent)
        if not call.headers_sent:
            trailers = self.sender.table_update() + trailers
        self.sender.data(call, trailers, http2.END_HEADERS | http2.END_STREAM)
        if not call.pending:
            if not call.ended:  # the client need not send the rest of its messages
                self.write(http2.rst_stream(call.id, http2.NO_ERROR))
            self.calls.pop(call.id, None)
            self.call_over(call)

    def call_over(self, call: Call) -> None:
        self.streams.discard(call)
        self.sender.held_back.discard(call)
        if call.held and not self.closing:
            self.give_back(call.held)
            call.held = 0
        if call.stream is not None:
            call.stream.call_over()
        if call.context is not None:
            call.context.end()
        if call.writable is not None:
            call.writable.set()
        if call.messages is not None and not call.ended:
            call.messages.put(END)
        if not self.calls:
            self.last_activity = self.loop.time()
            if self.going_away:
                self.close()

    def cancel(self, call: Call) -> None:
        """The client (or the connection) ended ``call`` before naiad answered it."""
        call.closed = True
        call.pending.clear()
        if call.deadline is not None:
            call.deadline.cancel()
        if call.on_cancel is not None:
            call.on_cancel()
        self.call_over(call)

    def deadline_passed(self, call: Call) -> None:
        call.deadline = None
        if not call.closed:
            self.finish(call, grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
            if call.on_cancel is not None:
                call.on_cancel()


def _call_id(call: Call) -> int:
    return call.id


class _ConnectionError(Exception):
    """A connection error (RFC 9113 section 5.4.1): the connection ends with ``code``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
