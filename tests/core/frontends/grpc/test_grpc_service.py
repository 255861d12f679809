"""start_grpc_server itself: binding, limits and clean failures (in-process, no models)."""

from __future__ import annotations

import socket
from types import SimpleNamespace

import grpc
import pytest
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from naiad.frontends.grpc import start_grpc_server
from naiad.frontends.grpc.listener import bind_address, method_handlers
from naiad.server import ServerOptions
from naiad.shm import SharedMemoryRegistry


def fake_server(max_input_size: int = 1024) -> SimpleNamespace:
    return SimpleNamespace(options=ServerOptions(max_input_size=max_input_size),
                           shared_memory=SharedMemoryRegistry(), live=True, ready=False)


def testbind_address():
    assert bind_address("0.0.0.0", 8001) == "0.0.0.0:8001"
    assert bind_address("::", 8001) == "[::]:8001"
    assert bind_address("[::1]", 8001) == "[::1]:8001"


def test_every_rpc_of_the_service_has_a_handler():
    service = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    handlers = method_handlers(SimpleNamespace(**{
        m.name: object() for m in service.methods}))  # type: ignore[arg-type]
    assert set(handlers) == {m.name for m in service.methods}
    assert handlers["ModelInfer"].response_serializer is None
    assert handlers["ModelStreamInfer"].stream_stream is not None
    assert handlers["ServerLive"].response_serializer is not None


async def test_serves_and_stops():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = await start_grpc_server(fake_server(), "127.0.0.1", port)  # type: ignore[arg-type]
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            assert (await stub.ServerLive(pb.ServerLiveRequest())).live
            assert not (await stub.ServerReady(pb.ServerReadyRequest())).ready
            with pytest.raises(grpc.aio.AioRpcError) as info:  # over the 1 KiB limit
                await stub.ModelInfer(pb.ModelInferRequest(raw_input_contents=[b"\0" * 2048]))
            assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    finally:
        await server.stop(0)


async def test_a_taken_port_is_an_os_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(OSError, match=f"127.0.0.1:{port}"):
            await start_grpc_server(fake_server(), "127.0.0.1", port)  # type: ignore[arg-type]
