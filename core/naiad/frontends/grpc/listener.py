"""The gRPC listener: grpc's thread-pool server bound to an address, serving the servicer.

Why not grpc.aio: on this project's 2-core test machine, grpc's synchronous server answers
a fixed ModelInfer response for about 110-150 µs of CPU per call against about 200 µs for
grpc.aio, and a handler running on a thread of its own can hand an inference straight to
the model instance's thread (``InferenceServer.infer_blocking``) instead of going through
the event loop twice. benchmarks/README.md has the figures.

Each call in progress holds a thread of the pool, and each open ``ModelStreamInfer`` holds
one for as long as it is open, so the pool is large: threads are made only when every
existing one is busy.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import grpc
from tritonclient.grpc import service_pb2

from naiad.frontends.grpc.service import InferenceServicer

if TYPE_CHECKING:
    from naiad.server import InferenceServer

# Calls (unary ones in progress, streams open) served at once; later ones wait for a thread.
MAX_THREADS = 1024

_SERVICE = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
# The inference RPCs return serialized responses (ResponseEncoder): no serializer.
_PRESERIALIZED = frozenset({"ModelInfer", "ModelStreamInfer"})


def method_handlers(servicer: InferenceServicer) -> dict[str, grpc.RpcMethodHandler]:
    """One handler per RPC of the service, as ``service_pb2_grpc`` registers them, except
    that the inference RPCs send the bytes the servicer already encoded."""
    handlers = {}
    for method in _SERVICE.methods:
        request_type = getattr(service_pb2, method.input_type.name)
        response_type = getattr(service_pb2, method.output_type.name)
        serializer = None if method.name in _PRESERIALIZED else response_type.SerializeToString
        if method.client_streaming and method.server_streaming:
            make = grpc.stream_stream_rpc_method_handler
        elif method.client_streaming or method.server_streaming:  # pragma: no cover
            raise TypeError(f"unexpected streaming kind of RPC {method.name}")
        else:
            make = grpc.unary_unary_rpc_method_handler
        handlers[method.name] = make(getattr(servicer, method.name),
                                     request_deserializer=request_type.FromString,
                                     response_serializer=serializer)
    return handlers


def bind_address(address: str, port: int) -> str:
    if ":" in address and not address.startswith("["):
        return f"[{address}]:{port}"  # IPv6 literal
    return f"{address}:{port}"


class GRPCListener:
    """A started gRPC server and its thread pool; ``await stop(grace)`` ends both."""

    def __init__(self, server: grpc.Server, pool: ThreadPoolExecutor) -> None:
        self.server = server
        self.pool = pool

    async def stop(self, grace: float | None) -> None:
        """Refuse new calls, give those in progress ``grace`` seconds, then cancel them."""
        stopped = self.server.stop(grace)
        await asyncio.get_running_loop().run_in_executor(None, stopped.wait)
        self.pool.shutdown(wait=False)


async def start_grpc_server(server: InferenceServer, address: str, port: int) -> GRPCListener:
    """Serve ``server`` over gRPC on ``address:port`` (insecure); started on return. Call it
    on the event loop the server runs on.

    Messages (both ways) may be as large as ``--http-max-input-size``; a larger request
    gets RESOURCE_EXHAUSTED from grpc.
    """
    limit = server.options.max_input_size
    pool = ThreadPoolExecutor(max_workers=MAX_THREADS, thread_name_prefix="naiad-grpc")
    grpc_server = grpc.server(pool, options=[
        ("grpc.max_receive_message_length", limit),
        ("grpc.max_send_message_length", limit),
        # Fail loudly when the port is taken instead of sharing it with another process.
        ("grpc.so_reuseport", 0),
        # Channelz traces every call for a debugging service naiad does not serve.
        # (grpc.minimal_stack would save more, but it drops the message size limit.)
        ("grpc.enable_channelz", 0),
    ])
    handlers = method_handlers(InferenceServicer(server, asyncio.get_running_loop()))
    grpc_server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(_SERVICE.full_name, handlers),))
    grpc_server.add_registered_method_handlers(_SERVICE.full_name, handlers)
    target = bind_address(address, port)
    try:
        bound = grpc_server.add_insecure_port(target)
    except RuntimeError as exc:
        pool.shutdown(wait=False)
        raise OSError(f"gRPC: cannot listen on {target}: {exc}") from None
    if not bound:
        pool.shutdown(wait=False)
        raise OSError(f"gRPC: cannot listen on {target}")
    grpc_server.start()
    return GRPCListener(grpc_server, pool)


__all__ = ["GRPCListener", "start_grpc_server"]
