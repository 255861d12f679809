"""naiad's own gRPC server (``--grpc-server=naiad``): HTTP/2 on the server's event loop.

Why: grpc's Python server costs more CPU per call than tritonserver's whole gRPC path. On
one core of the project's 2-core machine a bare grpcio server answering a fixed message took
330-370 µs per call (thread pool) and 430-500 µs (grpc.aio), against 321 µs for
tritonserver answering an inference of its Python identity model. Here a ``ModelInfer`` goes
from the frames to the model's scheduler and back on the loop, with no thread hand-off
(figures in benchmarks/results and docs/design.md).

``ModelStreamInfer`` is answered on the loop too (:mod:`.loop_stream`: no thread per stream,
none per request). Every other RPC, and ``ModelInfer`` while the server traces or when
inference is a restricted API, run in the same method handlers grpc's server runs
(``listener.method_handlers``), on a thread of a pool as large as grpc's: the answers are
the same whichever server runs them. The ``--grpc-*`` settings mean what they mean there:
the message and metadata limits, TLS, compression of inference responses, keepalive pings
and the ping policy, idle and aged connections, the handshake and message timeouts, open
streams.

Frontend processes (``--frontend-processes``) serve gRPC with it too: there ``ModelInfer``
and ``ModelStreamInfer`` go to the engine's event loop on the frontend's HTTP link
(``naiad.frontends.bridge.frontend``), and every other call runs in handlers that forward it
to the engine (``naiad.frontends.bridge.grpc_forwarding``).
"""

from __future__ import annotations

import asyncio
import ssl
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import grpc

from naiad.frontends.grpc import http2
from naiad.frontends.grpc.call import Call
from naiad.frontends.grpc.connection import GRPCConnection
from naiad.frontends.grpc.listener import (
    make_servicer,
    pool_threads,
    server_credentials,
    servicer_handlers,
)
from naiad.frontends.grpc.loop_infer import OnAnswer, loop_infer
from naiad.frontends.grpc.loop_stream import LoopStreams
from naiad.frontends.grpc.options import GRPCOptions

if TYPE_CHECKING:
    from naiad.server import InferenceServer

# The RPCs whose responses --grpc-infer-response-compression-level compresses (Triton's).
_COMPRESSED = frozenset({"ModelInfer", "ModelStreamInfer"})
_ZLIB_LEVELS = {"low": 1, "medium": 6, "high": 9}


def tls_context(options: GRPCOptions) -> ssl.SSLContext:
    """The server's TLS context for ``--grpc-use-ssl`` (HTTP/2 by ALPN); OSError naming the
    flag when a file cannot be used (the checks grpc's server makes)."""
    server_credentials(options)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(options.server_cert, options.server_key, password=lambda: b"")
    if options.use_ssl_mutual:
        if not options.root_cert:
            raise OSError("gRPC: mutual TLS (--grpc-use-ssl-mutual) needs --grpc-root-cert")
        context.load_verify_locations(cafile=options.root_cert)
        context.verify_mode = ssl.CERT_REQUIRED
    context.set_alpn_protocols(["h2"])
    return context


class UnaryInfer(Protocol):
    """What answers a plain ``ModelInfer`` without a thread: the engine's
    :class:`~naiad.frontends.grpc.loop_infer.LoopInfer`, or in a frontend process the
    engine itself (``naiad.frontends.bridge.frontend.ForwardedGRPCInfer``)."""

    def takes(self) -> bool: ...

    def start(self, message: bytes, metadata: Any, on_answer: OnAnswer
              ) -> Callable[[], object] | None: ...


class StreamStarter(Protocol):
    """What runs ``ModelStreamInfer`` calls without a thread: the engine's
    :class:`~naiad.frontends.grpc.loop_stream.LoopStreams`, or in a frontend process the
    engine itself (``naiad.frontends.bridge.frontend.ForwardedStreams``)."""

    def start(self, connection: GRPCConnection, call: Call) -> bool: ...


class GRPCService:
    """What every connection of a server shares: the method handlers, the thread pool, the
    settings, the connections themselves. ``infer`` (when set) answers ``ModelInfer`` calls
    without a thread while it :meth:`~UnaryInfer.takes` them."""

    def __init__(self, options: GRPCOptions, loop: asyncio.AbstractEventLoop,
                 handlers: dict[str, grpc.RpcMethodHandler], max_message: int,
                 infer: UnaryInfer | None = None, streams: StreamStarter | None = None
                 ) -> None:
        self.options = options
        self.loop = loop
        self.handlers = handlers
        self.infer = infer
        self.streams = streams
        level = options.infer_response_compression_level
        self.compression = _ZLIB_LEVELS.get(level)
        self.compressed_methods = _COMPRESSED
        self._ranking = ((b"gzip", b"deflate") if level == "low" else (b"deflate", b"gzip"))
        self.pool = ThreadPoolExecutor(max_workers=pool_threads(options),
                                       thread_name_prefix="naiad-grpc")
        self.connections: set[GRPCConnection] = set()
        self.max_message = max_message
        self.max_frame_received = http2.DEFAULT_FRAME_SIZE
        self.min_ping_interval_s = options.http2_min_recv_ping_interval_without_data_ms / 1000
        self._incomplete: dict[Call, GRPCConnection] = {}
        self._message_sweep: asyncio.TimerHandle | None = None

    # --- compression --------------------------------------------------------------------

    def pick_encoding(self, accept: bytes) -> bytes | None:
        """The algorithm for a compressed response among those the client accepts
        (grpc-accept-encoding), as grpc core picks it for the level (and Triton 2.51
        answers): gzip first at the low level, deflate first at medium and high; None when
        it accepts neither."""
        accepted = {part.strip() for part in accept.split(b",")}
        for name in self._ranking:
            if name in accepted:
                return name
        return None

    def compress(self, message: bytes, encoding: bytes) -> bytes:
        wbits = 31 if encoding == b"gzip" else 15
        packer = zlib.compressobj(self.compression, zlib.DEFLATED, wbits)
        return packer.compress(message) + packer.flush()

    # --- unary calls --------------------------------------------------------------------

    def run_unary(self, connection: GRPCConnection, call: Call, message: bytes) -> None:
        """Answer a unary call whose request ``message`` came in full."""
        infer = self.infer
        if call.method == "ModelInfer" and infer is not None and infer.takes():
            call.on_cancel = infer.start(message, call.metadata,
                                         partial(self._answered, connection, call))
        else:
            self.pool.submit(connection.run_in_thread, call, message)

    def start_stream(self, connection: GRPCConnection, call: Call) -> bool:
        """Take a ``ModelStreamInfer`` call on the loop (False: its handler runs it)."""
        return self.streams is not None and self.streams.start(connection, call)

    @staticmethod
    def _answered(connection: GRPCConnection, call: Call, code: grpc.StatusCode,
                  details: str, payload: bytes | None) -> None:
        if call.closed:
            return  # cancelled, or past its deadline: answered already
        call.on_cancel = None
        if payload is None:
            connection.finish(call, code, details)
        elif code is grpc.StatusCode.OK and not details:
            connection.answer_unary(call, payload)
        else:
            connection.send_message(call, payload)
            connection.finish(call, code, details)

    # --- timeouts -----------------------------------------------------------------------

    def expect_message(self, connection: GRPCConnection, call: Call, done: bool = False
                       ) -> None:
        """A unary call waits for its message (``--grpc-message-timeout``), or got it."""
        if done:
            self._incomplete.pop(call, None)
            return
        if not self.options.message_timeout_ms:
            return
        self._incomplete[call] = connection
        if self._message_sweep is None:
            self._message_sweep = self.loop.call_later(
                self.options.message_timeout_ms / 4000, self._sweep_messages)

    def _sweep_messages(self) -> None:
        self._message_sweep = None
        timeout = self.options.message_timeout_ms / 1000
        now = self.loop.time()
        for call, connection in list(self._incomplete.items()):
            if call.closed or call.ended:
                del self._incomplete[call]
            elif now - call.started >= timeout:
                del self._incomplete[call]
                connection.cancel_call(call)  # as grpc: CANCELLED, no status
        if self._incomplete:
            self._message_sweep = self.loop.call_later(timeout / 4, self._sweep_messages)

    def watch(self, connection: GRPCConnection) -> None:
        """Start the timers of a new connection: its handshake, idle time, keepalive pings
        and age, as the ``--grpc-*`` settings say."""
        options = self.options
        loop = self.loop
        later = connection.later
        if options.handshake_timeout_ms:
            def handshake() -> None:
                if not connection.preface:
                    connection.close(http2.PROTOCOL_ERROR, b"handshake timeout")
            later(options.handshake_timeout_ms / 1000, handshake)
        if options.idle_timeout_ms:
            idle_s = options.idle_timeout_ms / 1000

            def idle() -> None:
                left = connection.last_activity + idle_s - loop.time()
                if not connection.calls and left <= 0:
                    connection.go_away()
                else:
                    later(max(left, idle_s / 4), idle)
            later(idle_s, idle)
        if options.keepalive_time_ms:
            every_s = options.keepalive_time_ms / 1000
            timeout_s = options.keepalive_timeout_ms / 1000

            def ping() -> None:
                if connection.closing:
                    return
                if connection.calls or options.keepalive_permit_without_calls:
                    connection.awaiting_ack = True
                    connection.write(http2.frame(http2.PING, 0, 0, b"naiad-ka"))
                    later(timeout_s, acknowledged)
                later(every_s, ping)

            def acknowledged() -> None:
                if connection.awaiting_ack:
                    connection.close(http2.NO_ERROR, b"keepalive timeout")
            later(every_s, ping)
        if options.max_connection_age_ms:
            def aged() -> None:
                connection.go_away()
                grace = options.max_connection_age_grace_ms
                if grace:
                    later(grace / 1000, connection.close)
            later(options.max_connection_age_ms / 1000, aged)


class NaiadGRPCListener:
    """A started naiad gRPC server; ``await stop(grace)`` ends it."""

    def __init__(self, service: GRPCService, server: asyncio.base_events.Server) -> None:
        self.service = service
        self.server = server

    async def stop(self, grace: float | None) -> None:
        """Refuse new calls, give those in progress ``grace`` seconds, then cancel them."""
        self.server.close()
        service = self.service
        for connection in list(service.connections):
            connection.go_away()
        deadline = service.loop.time() + (grace or 0)
        while service.connections and service.loop.time() < deadline:
            await asyncio.sleep(0.02)
        for connection in list(service.connections):
            connection.close()
            if connection.transport is not None:
                connection.transport.abort()
        service.pool.shutdown(wait=False)


async def serve_grpc(service: GRPCService, address: str, port: int) -> NaiadGRPCListener:
    """Listen on ``address:port`` for ``service``'s connections (TLS as its options say)."""
    options = service.options
    loop = service.loop
    context = tls_context(options) if options.use_ssl else None
    host = address.strip("[]") or None
    try:
        listening = await loop.create_server(
            lambda: GRPCConnection(service), host, port, ssl=context,
            reuse_port=options.reuse_port or None, backlog=1024,
            ssl_handshake_timeout=(options.handshake_timeout_ms / 1000
                                   if context is not None and options.handshake_timeout_ms
                                   else None))
    except OSError as exc:
        service.pool.shutdown(wait=False)
        tls = " with TLS" if context is not None else ""
        raise OSError(f"gRPC: cannot listen on {address}:{port}{tls}: "
                      f"{exc.strerror or exc}") from None
    return NaiadGRPCListener(service, listening)


async def start_naiad_grpc_server(server: InferenceServer, address: str, port: int,
                                  options: GRPCOptions) -> NaiadGRPCListener:
    """Serve ``server`` over gRPC on ``address:port`` with naiad's own HTTP/2 server."""
    loop = asyncio.get_running_loop()
    servicer = make_servicer(server, options)
    handlers = servicer_handlers(server, options, servicer=servicer)
    service = GRPCService(options, loop, handlers, server.options.max_input_size,
                          loop_infer(servicer, options), LoopStreams(servicer, options, handlers))
    return await serve_grpc(service, address, port)


__all__ = ["GRPCService", "NaiadGRPCListener", "StreamStarter", "serve_grpc",
           "start_naiad_grpc_server"]
