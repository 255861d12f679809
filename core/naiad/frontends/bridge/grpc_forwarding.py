"""The gRPC service of a frontend process: every RPC of ``GRPCInferenceService`` forwarded
to the engine as bytes (:mod:`.frames`), answered with the engine's bytes and status.

grpc does the protocol work here (HTTP/2, TLS, compression, the message size, metadata,
keepalive and handshake limits, ``--grpc-message-timeout``); the engine decodes, runs and
encodes. ``ModelInfer`` and ``ModelStreamInfer`` go on the frontend's HTTP link to the
engine's event loop (:mod:`.grpc_loop_calls`), where no engine thread waits for them; every
other RPC (and those two when the frontend serves no HTTP) goes as a ``CALL`` on the gRPC
link through :class:`GRPCEngineLink` and runs on an engine thread (:mod:`.grpc_engine`).
naiad's gRPC server in a frontend runs the same handlers for the RPCs it does not take on
the loop itself. A call the client cancels, or whose deadline passes, is withdrawn in the
engine as it is in a single-process server.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import grpc
from tritonclient.grpc import service_pb2

from naiad.frontends.bridge import frames
from naiad.frontends.bridge.grpc_loop_calls import LoopCalls
from naiad.frontends.grpc.calls import CODES
from naiad.frontends.grpc.listener import (
    bind_address,
    channel_arguments,
    pool_threads,
    server_credentials,
)
from naiad.frontends.grpc.options import GRPCOptions
from naiad.frontends.grpc.read_timeout import MessageWatch, receiving

_SERVICE = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
_GONE = (frames.STATUS, memoryview(bytes([grpc.StatusCode.UNAVAILABLE.value[0]])
                                   + b"the server is shutting down"))


class GRPCEngineLink:
    """This process's gRPC connection to the engine; its frames go to each call's queue."""

    def __init__(self, sock: Any) -> None:
        self.calls: dict[int, queue.SimpleQueue[tuple[int, memoryview]]] = {}
        self._numbers = itertools.count(1)
        self.link = frames.BlockingLink(sock, self._frame, self._lost, "naiad-grpc-link")
        self.lost = threading.Event()
        # Called (on the reader thread) when the engine's connection ends.
        self.on_lost: Callable[[], object] | None = None
        self.link.start()

    def open(self) -> tuple[int, queue.SimpleQueue[tuple[int, memoryview]]]:
        exchange = next(self._numbers)
        answers: queue.SimpleQueue[tuple[int, memoryview]] = queue.SimpleQueue()
        self.calls[exchange] = answers
        if self.lost.is_set():
            answers.put(_GONE)
        return exchange, answers

    def _frame(self, kind: int, exchange: int, body: memoryview) -> None:
        answers = self.calls.get(exchange)
        if answers is not None:
            answers.put((kind, body))

    def _lost(self) -> None:
        self.lost.set()
        for answers in list(self.calls.values()):
            answers.put(_GONE)
        if self.on_lost is not None:
            self.on_lost()

    def ended_on_client_side(self, exchange: int) -> None:
        """A done-callback of the call: tell the engine unless its answer came already."""
        if exchange in self.calls:
            self.link.send(frames.frame(frames.DISCONNECT, exchange))


def _metadata(context: grpc.ServicerContext) -> list[list[Any]]:
    return frames.metadata_of(context.invocation_metadata())


def _status(body: memoryview) -> tuple[grpc.StatusCode, str]:
    return CODES.get(body[0], grpc.StatusCode.UNKNOWN), bytes(body[1:]).decode("utf-8")


def _forward_unary(link: GRPCEngineLink, method: str, request: bytes,
                   context: grpc.ServicerContext) -> bytes | None:
    exchange, answers = link.open()
    try:
        link.link.send(frames.call_frame(exchange, method, False, context.time_remaining(),
                                         _metadata(context), request))
        context.add_callback(partial(link.ended_on_client_side, exchange))
        message, uncompressed = None, False
        while True:
            kind, body = answers.get()
            if kind == frames.MESSAGE:
                uncompressed, message = bool(body[0]), bytes(body[1:])
            elif kind == frames.STATUS:
                code, details = _status(body)
                break
    finally:
        link.calls.pop(exchange, None)
    if code is not grpc.StatusCode.OK:
        context.abort(code, details)
    if uncompressed:
        context.disable_next_message_compression()
    return message


def _forward_stream(link: GRPCEngineLink, method: str, requests: Any,
                    context: grpc.ServicerContext) -> Any:
    exchange, answers = link.open()
    try:
        link.link.send(frames.call_frame(exchange, method, True, context.time_remaining(),
                                         _metadata(context)))
        context.add_callback(partial(link.ended_on_client_side, exchange))

        def pump() -> None:
            try:
                for message in requests:
                    link.link.send(frames.message_frame(exchange, message))
            except Exception:  # the call ended (cancelled): the callback told the engine
                return
            link.link.send(frames.frame(frames.HALF_CLOSE, exchange))

        threading.Thread(target=pump, name="naiad-grpc-pump", daemon=True).start()
        while True:
            kind, body = answers.get()
            if kind == frames.MESSAGE:
                yield bytes(body[1:])
            elif kind == frames.STATUS:
                code, details = _status(body)
                break
    finally:
        link.calls.pop(exchange, None)
    if code is not grpc.StatusCode.OK:
        context.abort(code, details)


def forwarding_handlers(link: GRPCEngineLink, watch: MessageWatch | None,
                        loop_calls: LoopCalls | None = None
                        ) -> dict[str, grpc.RpcMethodHandler]:
    """A handler per RPC of the service, taking and giving bytes (no (de)serializers).
    ``loop_calls``: ``ModelInfer`` and ``ModelStreamInfer`` go to the engine's loop through
    it instead of ``link``."""
    handlers = {}
    for method in _SERVICE.methods:
        name = f"/{_SERVICE.full_name}/{method.name}"
        if method.client_streaming:
            stream = (partial(_forward_stream, link, name)
                      if loop_calls is None or method.name != "ModelStreamInfer"
                      else loop_calls.stream)
            handlers[method.name] = grpc.stream_stream_rpc_method_handler(stream)
            continue
        unary = (partial(_forward_unary, link, name)
                 if loop_calls is None or method.name != "ModelInfer" else loop_calls.infer)
        if watch is None:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(unary)
        else:
            handlers[method.name] = grpc.stream_unary_rpc_method_handler(
                receiving(watch, method.name, unary))
    return handlers


def start_forwarding_server(link: GRPCEngineLink, options: GRPCOptions, address: str,
                            port: int, max_input_size: int, max_response_size: int,
                            loop_calls: LoopCalls | None = None
                            ) -> tuple[grpc.Server, MessageWatch | None]:
    """grpc's thread-pool server on ``address:port``, shared with the other frontend
    processes (SO_REUSEPORT), forwarding every call through ``link``, or ``ModelInfer`` and
    ``ModelStreamInfer`` through ``loop_calls`` when given. Its pool is as large as a
    single-process grpcio server's: a thread per stream ``--grpc-max-streams`` allows, and
    more for every other call."""
    arguments = [(key, value) for key, value in
                 channel_arguments(options, max_input_size, max_response_size)
                 if key != "grpc.so_reuseport"] + [("grpc.so_reuseport", 1)]
    server = grpc.server(ThreadPoolExecutor(max_workers=pool_threads(options),
                                            thread_name_prefix="naiad-grpc"),
                         options=arguments)
    watch = (MessageWatch(options.message_timeout_ms / 1000) if options.message_timeout_ms
             else None)
    handlers = forwarding_handlers(link, watch, loop_calls)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(_SERVICE.full_name, handlers),))
    target = bind_address(address, port)
    if options.use_ssl:
        bound = server.add_secure_port(target, server_credentials(options))
    else:
        bound = server.add_insecure_port(target)
    if not bound:
        raise OSError(f"gRPC: cannot listen on {target}")
    server.start()
    return server, watch
