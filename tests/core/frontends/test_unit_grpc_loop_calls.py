"""grpc's thread-pool server in a frontend process sends ``ModelInfer`` and
``ModelStreamInfer`` to the engine's loop (``naiad.frontends.bridge.grpc_loop_calls``):
here against a scripted engine, a Unix socket that records the frames it gets and sends
the frames a test gives it, so the paths a real engine rarely takes are tested alike: an
error status, a stream ended at once for a client that does not read (``STREAM_END``
``now``), what is reported ``SENT``, the client giving up (``DISCONNECT``) and the engine's
connection lost (UNAVAILABLE). End to end against naiad: test_frontend_grpcio_streams."""

from __future__ import annotations

import asyncio
import queue
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc
import h2.events
import pytest
from loop_thread import loop_in_thread
from test_grpc_limits import RawConnection

from naiad.frontends.bridge import frames
from naiad.frontends.bridge.frontend import EngineLink
from naiad.frontends.bridge.grpc_forwarding import GRPCEngineLink, forwarding_handlers
from naiad.frontends.bridge.grpc_loop_calls import REPORT_BYTES, LoopCalls

TIMEOUT_S = 10.0
SERVICE = "inference.GRPCInferenceService"
CHUNK = 64 * 1024  # one response message of the scripted engine


@dataclass
class Frame:
    kind: int
    exchange: int
    body: bytes


class ScriptedEngine:
    """The engine's end of the frontend's HTTP link: every frame it gets goes to
    :attr:`got`; :meth:`send` writes one to the frontend."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.got: queue.Queue[Frame] = queue.Queue()
        self.protocol = frames.FrameProtocol(self._frame, lambda: None)

    def _frame(self, kind: int, exchange: int, body: memoryview) -> None:
        self.got.put(Frame(kind, exchange, bytes(body)))

    def next(self, *kinds: int) -> Frame:
        """The next frame of one of ``kinds`` (others, SENT reports, are skipped)."""
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            got = self.got.get(timeout=max(deadline - time.monotonic(), 0.001))
            if got.kind in kinds:
                return got

    def sent_reports(self, exchange: int) -> int:
        """The bytes reported SENT for ``exchange`` among the frames got so far."""
        total = 0
        while not self.got.empty():
            got = self.got.get_nowait()
            if got.kind == frames.SENT and got.exchange == exchange:
                total += frames.read_sent(memoryview(got.body))
        return total

    def send(self, data: bytes) -> None:
        self.loop.call_soon_threadsafe(self.protocol.write, data)

    def hang_up(self) -> None:
        assert self.protocol.transport is not None
        self.loop.call_soon_threadsafe(self.protocol.transport.close)


@dataclass
class Frontend:
    engine: ScriptedEngine
    channel: grpc.Channel
    port: int

    def stream(self, requests: Iterator[bytes], timeout: float = TIMEOUT_S) -> grpc.Future:
        return self.channel.stream_stream(f"/{SERVICE}/ModelStreamInfer")(
            requests, timeout=timeout)

    def infer(self, request: bytes, timeout: float = TIMEOUT_S) -> grpc.Future:
        return self.channel.unary_unary(f"/{SERVICE}/ModelInfer").future(
            request, timeout=timeout)


@pytest.fixture
def frontend(tmp_path: Path) -> Iterator[Frontend]:
    """grpc's server with a frontend's handlers (as ``frontend_main`` starts them), its
    HTTP link connected to a :class:`ScriptedEngine`."""
    with loop_in_thread() as loop:
        engine = ScriptedEngine(loop)
        path = str(tmp_path / "engine.sock")

        async def connect() -> tuple[asyncio.AbstractServer, EngineLink]:
            listening = await loop.create_unix_server(lambda: engine.protocol, path)
            link = EngineLink(path)
            await link.connect()
            return listening, link

        listening, link = asyncio.run_coroutine_threadsafe(connect(), loop).result(TIMEOUT_S)
        grpc_side, engine_side = socket.socketpair()  # the gRPC link: unused here
        grpc_link = GRPCEngineLink(grpc_side)
        handlers = forwarding_handlers(grpc_link, None, LoopCalls(link, loop))
        server = grpc.server(ThreadPoolExecutor(max_workers=16))
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, handlers),))
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        try:
            yield Frontend(engine, channel, port)
        finally:
            channel.close()
            server.stop(0).wait(TIMEOUT_S)

            async def close() -> None:
                for protocol in (link.protocol, engine.protocol):
                    if protocol.transport is not None:
                        protocol.transport.close()
                listening.close()
                await listening.wait_closed()
                await asyncio.sleep(0.01)  # the transports' connection_lost

            asyncio.run_coroutine_threadsafe(close(), loop).result(TIMEOUT_S)
            grpc_link.link.close()
            engine_side.close()


def held_open(*messages: bytes) -> tuple[Iterator[bytes], threading.Event]:
    """Requests that send ``messages`` and keep the client's side open until released."""
    release = threading.Event()

    def requests() -> Iterator[bytes]:
        yield from messages
        release.wait(TIMEOUT_S)  # bounded: each test releases it

    return requests(), release


# --- the frames of a stream ----------------------------------------------------------------


def test_a_stream_crosses_as_frames_and_its_answers_come_back_in_order(frontend) -> None:
    engine = frontend.engine
    call = frontend.stream(iter([b"one", b"two"]))
    opened = engine.next(frames.GRPC_STREAM)
    method, streaming, _seconds, _metadata, request = frames.read_call(memoryview(opened.body))
    assert (method, streaming, request) == ("ModelStreamInfer", True, b"")
    exchange = opened.exchange
    for expected in (b"one", b"two"):
        got = engine.next(frames.MESSAGE)
        assert (got.exchange, got.body) == (exchange, b"\x00" + expected)
    assert engine.next(frames.HALF_CLOSE).exchange == exchange
    for answer in (b"first", b"second", b"third"):
        engine.send(frames.message_frame(exchange, answer))
    engine.send(frames.stream_end_frame(exchange, 0, ""))
    assert list(call) == [b"first", b"second", b"third"]
    assert call.code() == grpc.StatusCode.OK


def test_the_engines_error_status_ends_the_stream_with_it(frontend) -> None:
    engine = frontend.engine
    requests, release = held_open(b"x")
    call = frontend.stream(requests)
    exchange = engine.next(frames.GRPC_STREAM).exchange
    engine.send(frames.message_frame(exchange, b"before"))
    engine.send(frames.stream_end_frame(
        exchange, grpc.StatusCode.INVALID_ARGUMENT.value[0], "model 'm': input 'X' is wrong"))
    try:
        assert next(call) == b"before"
        with pytest.raises(grpc.RpcError) as ended:
            next(call)
    finally:
        release.set()
    assert ended.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert ended.value.details() == "model 'm': input 'X' is wrong"
    # the engine ended it: nothing is withdrawn
    time.sleep(0.2)
    assert all(got.kind != frames.DISCONNECT for got in drain(engine))


def drain(engine: ScriptedEngine) -> list[Frame]:
    got = []
    while not engine.got.empty():
        got.append(engine.got.get_nowait())
    return got


@pytest.mark.parametrize("how", ["cancel", "deadline"])
def test_a_stream_the_client_gives_up_is_withdrawn_in_the_engine(frontend, how) -> None:
    engine = frontend.engine
    requests, release = held_open(b"x")
    call = frontend.stream(requests, timeout=0.5 if how == "deadline" else TIMEOUT_S)
    exchange = engine.next(frames.GRPC_STREAM).exchange
    engine.next(frames.MESSAGE)
    try:
        if how == "cancel":
            call.cancel()
        assert engine.next(frames.DISCONNECT).exchange == exchange
    finally:
        release.set()
    with pytest.raises(grpc.RpcError) as ended:
        list(call)
    assert ended.value.code() == (grpc.StatusCode.CANCELLED if how == "cancel"
                                  else grpc.StatusCode.DEADLINE_EXCEEDED)
    # a late answer of the engine's changes nothing
    engine.send(frames.message_frame(exchange, b"late"))
    engine.send(frames.stream_end_frame(exchange, 0, ""))


# --- flow control ------------------------------------------------------------------------------


def test_responses_are_reported_sent_as_the_client_takes_them(frontend) -> None:
    """The engine sends more than a client that grants no flow-control window beyond
    HTTP/2's first 64 KiB can take: only what grpc took is reported SENT, a quarter window
    at a time; all of it once the client reads."""
    engine = frontend.engine
    count = 64  # 4 MiB
    whole = count * (CHUNK + 5)  # with gRPC's message prefixes
    connection = RawConnection(frontend.port)
    try:
        stream = connection.start_call("ModelStreamInfer")
        connection.h2.send_data(stream, b"\x00" + (1).to_bytes(4, "big") + b"x")
        connection.flush()
        exchange = engine.next(frames.GRPC_STREAM).exchange
        for _ in range(count):
            engine.send(frames.message_frame(exchange, bytes(CHUNK)))
        received = 0
        for event in connection.events(time.monotonic() + 1.0):  # reading, granting none
            if isinstance(event, h2.events.DataReceived):
                received += event.flow_controlled_length
        unread = engine.sent_reports(exchange)
        assert received <= 65535, received
        assert unread % REPORT_BYTES == 0 and unread <= 4 * REPORT_BYTES, unread
        connection.h2.acknowledge_received_data(received, stream)  # now it reads
        connection.flush()
        for event in connection.events(time.monotonic() + TIMEOUT_S):
            if isinstance(event, h2.events.DataReceived):
                received += event.flow_controlled_length
                connection.h2.acknowledge_received_data(event.flow_controlled_length, stream)
            if received == whole:
                break
        time.sleep(0.2)
        total = unread + engine.sent_reports(exchange)
        engine.send(frames.stream_end_frame(exchange, 0, ""))
        ended = any(isinstance(event, h2.events.StreamEnded)
                    for event in connection.events(time.monotonic() + TIMEOUT_S))
    finally:
        connection.close()
    assert received == whole, received
    # the last response need not be reported: grpc takes it as the engine ends the stream
    assert count * CHUNK - REPORT_BYTES <= total <= count * CHUNK, total
    assert total % REPORT_BYTES == 0
    assert ended


def test_a_stream_ended_now_reaches_a_client_that_does_not_read(frontend) -> None:
    """STREAM_END ``now`` (the engine's buffered-response bound): the status goes out at
    once, past the responses the client did not take."""
    engine = frontend.engine
    count = 64
    requests, release = held_open(b"x")
    call = frontend.stream(requests)
    exchange = engine.next(frames.GRPC_STREAM).exchange
    for _ in range(count):
        engine.send(frames.message_frame(exchange, bytes(CHUNK)))
    engine.send(frames.stream_end_frame(
        exchange, grpc.StatusCode.RESOURCE_EXHAUSTED.value[0],
        "too many responses wait (--stream-max-buffered-responses=4)", now=True))
    try:
        time.sleep(1.0)  # the client reads nothing meanwhile
        read = 0
        with pytest.raises(grpc.RpcError) as ended:
            for _ in call:
                read += 1
    finally:
        release.set()
    assert ended.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "--stream-max-buffered-responses=4" in (ended.value.details() or "")
    assert read < count


# --- ModelInfer ----------------------------------------------------------------------------


def test_a_unary_infer_crosses_as_grpc_infer_and_its_answer_comes_back(frontend) -> None:
    engine = frontend.engine
    answer = frontend.infer(b"request bytes")
    sent = engine.next(frames.GRPC_INFER)
    method, streaming, _seconds, _metadata, request = frames.read_call(memoryview(sent.body))
    assert (method, streaming, request) == ("ModelInfer", False, b"request bytes")
    engine.send(frames.grpc_answer_frame(sent.exchange, 0, "", b"response bytes"))
    assert answer.result(TIMEOUT_S) == b"response bytes"
    refused = frontend.infer(b"bad")
    sent = engine.next(frames.GRPC_INFER)
    engine.send(frames.grpc_answer_frame(sent.exchange, grpc.StatusCode.NOT_FOUND.value[0],
                                         "model 'nope' is not found", None))
    with pytest.raises(grpc.RpcError) as error:
        refused.result(TIMEOUT_S)
    assert error.value.code() == grpc.StatusCode.NOT_FOUND
    assert error.value.details() == "model 'nope' is not found"


def test_a_unary_infer_past_its_deadline_is_withdrawn_in_the_engine(frontend) -> None:
    engine = frontend.engine
    answer = frontend.infer(b"slow", timeout=0.5)
    exchange = engine.next(frames.GRPC_INFER).exchange
    assert engine.next(frames.DISCONNECT).exchange == exchange
    with pytest.raises(grpc.RpcError) as error:
        answer.result(TIMEOUT_S)
    assert error.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    engine.send(frames.grpc_answer_frame(exchange, 0, "", b"late"))  # changes nothing


# --- the engine's connection lost ------------------------------------------------------------


def test_calls_open_when_the_engine_goes_and_calls_after_are_unavailable(frontend) -> None:
    engine = frontend.engine
    requests, release = held_open(b"x")
    stream = frontend.stream(requests)
    engine.next(frames.GRPC_STREAM)
    answer = frontend.infer(b"waiting")
    engine.next(frames.GRPC_INFER)
    engine.hang_up()
    try:
        with pytest.raises(grpc.RpcError) as stream_ended:
            list(stream)
    finally:
        release.set()
    with pytest.raises(grpc.RpcError) as infer_ended:
        answer.result(TIMEOUT_S)
    with pytest.raises(grpc.RpcError) as later_stream:
        list(frontend.stream(iter([b"y"])))
    with pytest.raises(grpc.RpcError) as later_infer:
        frontend.infer(b"later").result(TIMEOUT_S)
    for ended in (stream_ended, infer_ended, later_stream, later_infer):
        assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
        assert ended.value.details() == "the server is shutting down"
