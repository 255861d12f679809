"""The gRPC listener: grpc's thread-pool server bound to an address, serving the servicer.

Why not grpc.aio: on this project's 2-core test machine, grpc's synchronous server answers
a fixed ModelInfer response for about 110-150 µs of CPU per call against about 200 µs for
grpc.aio, and a handler running on a thread of its own submits an inference and waits on
its future (``InferenceServer.infer``) without going through the event loop twice.
benchmarks/README.md has the figures.

Each call in progress holds a thread of the pool, and each open ``ModelStreamInfer`` holds
one for as long as it is open (and a reader thread of its own, outside the pool). So open
streams are bounded (``--grpc-max-streams``, refused RESOURCE_EXHAUSTED beyond it) and the
pool has :data:`CALL_THREADS` threads more than that bound: however many streams are open,
idle or not, health checks, ``ModelInfer`` and every other call still get a thread.
Threads are made only when every existing one is busy. An idle stream can also be ended
after ``--grpc-stream-idle-timeout`` (:mod:`.stream`).

The ``--grpc-*`` flags (:class:`GRPCOptions`) become grpc channel arguments, TLS server
credentials and, for ``--grpc-infer-response-compression-level``, a compression level.

What grpc core enforces before a handler runs, each a named setting: the largest message
received (``--http-max-input-size``: RESOURCE_EXHAUSTED as soon as a message announces
more, before it is read) and sent (``--max-response-size``, which the encoder checks first
with a better message), the metadata size (``--grpc-max-header-size``), the handshake time
of a new connection (``--grpc-handshake-timeout``) and the idle time of a connection
without calls (``--grpc-idle-timeout``). What it does not bound, the time a unary call
takes to send its request message, naiad does (``--grpc-message-timeout``,
:mod:`.read_timeout`). A message that does not parse is answered INVALID_ARGUMENT naming
the RPC (:func:`method_handlers`), not grpc's INTERNAL.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2

from naiad.frontends.grpc.codec import UndecodableRequest
from naiad.frontends.grpc.options import GRPCOptions
from naiad.frontends.grpc.read_timeout import MessageWatch, receiving
from naiad.frontends.grpc.service import InferenceServicer
from naiad.frontends.grpc.stream import StreamSettings

if TYPE_CHECKING:
    from naiad.server import InferenceServer

# Calls other than streams (unary ones in progress) served at once beyond the open streams
# (with --grpc-max-streams=0, streams too); later ones wait for a thread.
CALL_THREADS = 1024

_SERVICE = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
# The inference RPCs return serialized responses (ResponseEncoder): no serializer.
_PRESERIALIZED = frozenset({"ModelInfer", "ModelStreamInfer"})
# The RPCs whose responses --grpc-infer-response-compression-level compresses (Triton's).
_COMPRESSED = _PRESERIALIZED
# grpc_compression_level: GRPC_COMPRESS_LEVEL_NONE, _LOW, _MED, _HIGH.
_LEVELS = {"none": 0, "low": 1, "medium": 2, "high": 3}
# What grpc may send beyond --max-response-size: a ModelStreamInferResponse wraps the
# ModelInferResponse (the encoder's limit) in a few bytes, plus the final-response flag.
_SEND_MARGIN = 64 * 1024


def _deserializer(method: str, request_type: Any) -> Callable[[bytes], Any]:
    parse = request_type.FromString
    full_name = request_type.DESCRIPTOR.full_name

    def deserialize(data: bytes) -> Any:
        try:
            return parse(data)
        except DecodeError as exc:
            return UndecodableRequest(f"{method}: the request is not a valid {full_name} "
                                      f"message ({len(data)} bytes): {exc}")

    return deserialize


def _decoded(behavior: Callable[[Any, grpc.ServicerContext], Any]
             ) -> Callable[[Any, grpc.ServicerContext], Any]:
    """``behavior`` (a unary RPC), answering INVALID_ARGUMENT to an undecodable request."""

    def call(request: Any, context: grpc.ServicerContext) -> Any:
        if type(request) is UndecodableRequest:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)
        return behavior(request, context)

    return call


def _uncompressed(behavior: Callable[[Any, grpc.ServicerContext], Any]
                  ) -> Callable[[Any, grpc.ServicerContext], Any]:
    """``behavior``, sending its (unary) response uncompressed whatever the server's
    default compression level."""

    def call(request: Any, context: grpc.ServicerContext) -> Any:
        context.disable_next_message_compression()
        return behavior(request, context)

    return call


def method_handlers(servicer: InferenceServicer, compression: bool = False,
                    watch: MessageWatch | None = None) -> dict[str, grpc.RpcMethodHandler]:
    """One handler per RPC of the service, as ``service_pb2_grpc`` registers them, except
    that the inference RPCs send the bytes the servicer already encoded.

    With ``compression`` (the server has a default compression level), the responses of
    every RPC but the inference ones are sent uncompressed, as Triton compresses only those.

    A request that does not parse reaches the handler as an :class:`UndecodableRequest`:
    unary RPCs answer it INVALID_ARGUMENT, ``ModelStreamInfer`` refuses it in the stream.
    With a ``watch`` (``--grpc-message-timeout``), the unary RPCs are served as stream-unary
    ones that receive their message under it (:mod:`.read_timeout`).
    """
    handlers = {}
    for method in _SERVICE.methods:
        request_type = getattr(service_pb2, method.input_type.name)
        response_type = getattr(service_pb2, method.output_type.name)
        serializer = None if method.name in _PRESERIALIZED else response_type.SerializeToString
        behavior = getattr(servicer, method.name)
        if method.client_streaming and method.server_streaming:
            make = grpc.stream_stream_rpc_method_handler
        elif method.client_streaming or method.server_streaming:  # pragma: no cover
            raise TypeError(f"unexpected streaming kind of RPC {method.name}")
        else:
            if compression and method.name not in _COMPRESSED:
                behavior = _uncompressed(behavior)
            if watch is None:
                make = grpc.unary_unary_rpc_method_handler
                behavior = _decoded(behavior)
            else:
                make = grpc.stream_unary_rpc_method_handler
                behavior = receiving(watch, method.name, behavior)
        handlers[method.name] = make(
            behavior, request_deserializer=_deserializer(method.name, request_type),
            response_serializer=serializer)
    return handlers


def bind_address(address: str, port: int) -> str:
    if ":" in address and not address.startswith("["):
        return f"[{address}]:{port}"  # IPv6 literal
    return f"{address}:{port}"


def channel_arguments(options: GRPCOptions, max_message_size: int,
                      max_response_size: int | None = None) -> list[tuple[str, int]]:
    """The grpc server's channel arguments for ``options`` (the names are grpc core's
    ``GRPC_ARG_*``, include/grpc/impl/channel_arg_names.h): messages received of at most
    ``max_message_size`` bytes, sent of at most ``max_response_size`` (and a margin for a
    stream's envelope; None: ``max_message_size``)."""
    send = max_message_size if max_response_size is None else max_response_size + _SEND_MARGIN
    arguments = [
        # grpc core's limits are C ints: a larger value would wrap.
        ("grpc.max_receive_message_length", min(max_message_size, 2**31 - 1)),
        ("grpc.max_send_message_length", min(send, 2**31 - 1)),
        # Soft and hard limit alike: below the soft one grpc refuses a random sample.
        ("grpc.max_metadata_size", options.max_header_size),
        ("grpc.absolute_max_metadata_size", options.max_header_size),
        ("grpc.server_handshake_timeout_ms", options.handshake_timeout_ms),
        # Without --reuse-grpc-port, fail loudly when the port is taken instead of sharing
        # it with another process.
        ("grpc.so_reuseport", int(options.reuse_port)),
        # Channelz traces every call for a debugging service naiad does not serve.
        # (grpc.minimal_stack would save more, but it drops the message size limit.)
        ("grpc.enable_channelz", 0),
        ("grpc.keepalive_time_ms", options.keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", options.keepalive_timeout_ms),
        # grpc 1.85's server waits for a keepalive ping's acknowledgement as long as for any
        # ping's (grpc.http2.ping_timeout_ms, 1 minute), not keepalive_timeout_ms: without
        # this, a silent peer is dropped after a minute whatever the flag says (Triton 2.51,
        # on an older grpc, drops it after the keepalive timeout). A peer that acknowledges
        # no ping for that long is as dead for grpc's other pings.
        ("grpc.http2.ping_timeout_ms", options.keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", int(options.keepalive_permit_without_calls)),
        ("grpc.http2.max_pings_without_data", options.http2_max_pings_without_data),
        # GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS: the server-side minimum
        # (the similar grpc.http2.min_time_between_pings_ms is what a client sends at).
        ("grpc.http2.min_ping_interval_without_data_ms",
         options.http2_min_recv_ping_interval_without_data_ms),
        ("grpc.http2.max_ping_strikes", options.http2_max_ping_strikes),
    ]
    # 0 is "never" for naiad's flag; grpc would take it as "close at once".
    if options.idle_timeout_ms:
        arguments.append(("grpc.max_connection_idle_ms", options.idle_timeout_ms))
    # Like Triton, an unset or 0 age is not passed: grpc would take 0 as "close at once".
    if options.max_connection_age_ms:
        arguments.append(("grpc.max_connection_age_ms", options.max_connection_age_ms))
    if options.max_connection_age_grace_ms:
        arguments.append(("grpc.max_connection_age_grace_ms",
                          options.max_connection_age_grace_ms))
    level = _LEVELS[options.infer_response_compression_level]
    if level:
        # grpc core turns the level into an algorithm per call, among those the client
        # says it accepts (grpc-accept-encoding), as Triton's per-call level does; the
        # Python API has no per-call level, so it is the server's default and the other
        # RPCs opt out (method_handlers).
        arguments.append(("grpc.default_compression_level", level))
    return arguments


def _read_pem(flag: str, path: str) -> bytes:
    if not path:
        raise OSError(f"gRPC: TLS (--grpc-use-ssl) needs {flag}")
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise OSError(f"gRPC: cannot read {flag}={path}: {exc.strerror or exc}") from None
    if b"-----BEGIN " not in data:
        raise OSError(f"gRPC: {flag}={path} is not a PEM file")
    return data


def _check_pem(options: GRPCOptions) -> None:
    """Fail with the flag at fault when a certificate or key cannot be used, rather than
    with grpc's port binding error (or, worse, a failing handshake) that names neither."""
    cert, key = options.server_cert, options.server_key
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_verify_locations(cafile=cert)
    except (ssl.SSLError, ValueError) as exc:
        raise OSError(f"gRPC: --grpc-server-cert={cert} holds no valid PEM certificate: "
                      f"{exc}") from None
    try:
        # A password-protected key fails here instead of prompting on the terminal.
        context.load_cert_chain(cert, key, password=lambda: b"")
    except (ssl.SSLError, ValueError) as exc:
        raise OSError(f"gRPC: --grpc-server-key={key} is not a usable private key for "
                      f"--grpc-server-cert={cert} (an unencrypted PEM key matching the "
                      f"certificate): {exc}") from None
    if options.use_ssl_mutual:
        try:
            context.load_verify_locations(cafile=options.root_cert)
        except (ssl.SSLError, ValueError) as exc:
            raise OSError(f"gRPC: --grpc-root-cert={options.root_cert} holds no valid PEM "
                          f"certificate: {exc}") from None


def server_credentials(options: GRPCOptions) -> grpc.ServerCredentials:
    """TLS credentials from ``--grpc-server-cert``/``--grpc-server-key``; with
    ``--grpc-use-ssl-mutual``, clients must present a certificate that ``--grpc-root-cert``
    signed. Raises OSError naming the flag when a file is missing, unreadable or invalid."""
    cert = _read_pem("--grpc-server-cert", options.server_cert)
    key = _read_pem("--grpc-server-key", options.server_key)
    root = None
    if options.use_ssl_mutual:
        if not options.root_cert:
            raise OSError("gRPC: mutual TLS (--grpc-use-ssl-mutual) needs --grpc-root-cert")
        root = _read_pem("--grpc-root-cert", options.root_cert)
    _check_pem(options)
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=root,
                                       require_client_auth=options.use_ssl_mutual)


class GRPCListener:
    """A started gRPC server and its thread pool; ``await stop(grace)`` ends both."""

    def __init__(self, server: grpc.Server, pool: ThreadPoolExecutor,
                 watch: MessageWatch | None = None) -> None:
        self.server = server
        self.pool = pool
        self.watch = watch

    async def stop(self, grace: float | None) -> None:
        """Refuse new calls, give those in progress ``grace`` seconds, then cancel them."""
        stopped = self.server.stop(grace)
        await asyncio.get_running_loop().run_in_executor(None, stopped.wait)
        self.pool.shutdown(wait=False)
        if self.watch is not None:
            self.watch.stop()


def make_servicer(server: InferenceServer, options: GRPCOptions) -> InferenceServicer:
    """``server``'s servicer as ``options`` (the ``--grpc-*`` flags) configure it. Call it
    on the server's event loop."""
    return InferenceServicer(server, asyncio.get_running_loop(),
                             restricted=options.restricted,
                             header_forward_pattern=options.header_forward_pattern,
                             streams=stream_settings(options))


def servicer_handlers(server: InferenceServer, options: GRPCOptions,
                      watch: MessageWatch | None = None,
                      servicer: InferenceServicer | None = None
                      ) -> dict[str, grpc.RpcMethodHandler]:
    """The method handlers of ``server``'s servicer (:func:`method_handlers`; a new one
    unless given), for a gRPC listener or for the calls frontend processes forward
    (``naiad.frontends.bridge``, where the gRPC server and the message watch run in the
    frontends). Call it on the server's event loop."""
    servicer = servicer or make_servicer(server, options)
    compression = options.infer_response_compression_level != "none"
    return method_handlers(servicer, compression, watch)


def stream_settings(options: GRPCOptions) -> StreamSettings:
    """The bounds of ``ModelStreamInfer`` calls that ``options`` set."""
    return StreamSettings(max_streams=options.max_streams,
                          idle_timeout_s=options.stream_idle_timeout_ms / 1000)


def pool_threads(options: GRPCOptions) -> int:
    """The pool's size: a thread per stream ``--grpc-max-streams`` allows, and
    :data:`CALL_THREADS` more for every other call."""
    return options.max_streams + CALL_THREADS


async def start_grpcio_server(server: InferenceServer, address: str, port: int,
                              options: GRPCOptions | None = None) -> GRPCListener:
    """Serve ``server`` over gRPC on ``address:port`` with grpc's thread-pool server
    (``--grpc-server=grpcio``), as ``options`` (the ``--grpc-*`` flags) say; started on
    return. Call it on the event loop the server runs on.

    Requests may be as large as ``--http-max-input-size`` and responses as
    ``--max-response-size``; a larger request gets RESOURCE_EXHAUSTED from grpc. Raises
    OSError when the port cannot be bound or a TLS file cannot be used.
    """
    options = options or GRPCOptions()
    credentials = server_credentials(options) if options.use_ssl else None
    pool = ThreadPoolExecutor(max_workers=pool_threads(options),
                              thread_name_prefix="naiad-grpc")
    grpc_server = grpc.server(
        pool, options=channel_arguments(options, server.options.max_input_size,
                                        server.options.max_response_size))
    watch = (MessageWatch(options.message_timeout_ms / 1000) if options.message_timeout_ms
             else None)
    handlers = servicer_handlers(server, options, watch)
    grpc_server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(_SERVICE.full_name, handlers),))
    grpc_server.add_registered_method_handlers(_SERVICE.full_name, handlers)
    target = bind_address(address, port)
    tls = " with TLS" if credentials is not None else ""
    try:
        if credentials is None:
            bound = grpc_server.add_insecure_port(target)
        else:
            bound = grpc_server.add_secure_port(target, credentials)
    except RuntimeError as exc:
        pool.shutdown(wait=False)
        raise OSError(f"gRPC: cannot listen on {target}{tls}: {exc}") from None
    if not bound:
        pool.shutdown(wait=False)
        raise OSError(f"gRPC: cannot listen on {target}{tls}")
    grpc_server.start()
    return GRPCListener(grpc_server, pool, watch)


__all__ = ["GRPCListener", "channel_arguments", "server_credentials", "start_grpcio_server"]
