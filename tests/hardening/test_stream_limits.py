"""Issue 32, items 1 and 2: streams cannot starve the server or pin its memory.

Item 1: each open gRPC ``ModelStreamInfer`` holds a thread of grpc's pool (and a reader
thread), and before the fix about 1,024 idle streams left no thread to anyone: ServerLive
and ModelInfer from another client timed out (tritonserver 2.51, whose streams cost no
thread, answered at once). Now open streams are capped (``--grpc-max-streams``, refused
RESOURCE_EXHAUSTED naming the flag) with threads kept for every other call beyond the cap,
and ``--grpc-stream-idle-timeout`` ends a stream that sends nothing.

Item 2: a streaming client that never reads made the server keep every response a
decoupled model sent, each with a shared-memory mapping (and, on gRPC, kept after the
client left, in a reference cycle until a full garbage collection). Now
``--stream-max-buffered-responses`` bounds them per stream (and a total bounds them for all
streams): beyond it the stream ends with an error naming the flag, its request is
cancelled and what it held is freed at once, over gRPC and HTTP ``generate_stream``.

Mappings are counted in the server's /proc/PID/maps (the regions are files named naiad-*,
unlinked once made); models/flood sends COUNT responses of SIZE bytes.
"""

from __future__ import annotations

import http.client
import json
import queue
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import h2.config
import h2.connection
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from hardening_support import (
    ANSWER_TIMEOUT_S,
    MODELS,
    request_bytes,
    request_counts,
    status_field,
    wait_until,
)
from tritonclient.grpc import service_pb2, service_pb2_grpc
from zoo import IDENTITY_PY, identity_config, write_model

from naiad.frontends.grpc.stream import Stream
from naiad.frontends.stream_buffer import ResponseBudget
from naiad.testing import ServerProcess, naiad_server

MAX_STREAMS = 24
MAX_BUFFERED = 48
#: responses of this size travel in a shared-memory region each (python backend's inline
#: maximum is 64 KiB)
REGION_SIZE = 64 * 1024
FLOOD = 1000  # responses asked for: far beyond MAX_BUFFERED


def _repository(repo: Path) -> Path:
    shutil.copytree(MODELS / "flood", repo / "flood")
    write_model(repo, "identity_fp32", identity_config("identity_fp32", "TYPE_FP32", 0),
                IDENTITY_PY)
    return repo


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = _repository(tmp_path_factory.mktemp("stream-limits"))
    with naiad_server("--model-repository", str(repo), f"--grpc-max-streams={MAX_STREAMS}",
                      f"--stream-max-buffered-responses={MAX_BUFFERED}") as process:
        yield process


@pytest.fixture(scope="module")
def bridged_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """``server`` with a frontend process: HTTP answers and gRPC streams cross the bridge
    (naiad.frontends.bridge), where the engine keeps at most frames.ANSWER_WINDOW_BYTES of
    an answer or a stream's responses in flight to the frontend. Before, the engine wrote
    every event at once: they waited in the frontend process as bytes, the stream's bound
    was never reached, and an unread generate_stream held its model's responses (and the
    frontend's memory) to the end."""
    repo = _repository(tmp_path_factory.mktemp("stream-limits-bridged"))
    with naiad_server("--model-repository", str(repo), "--frontend-processes=1",
                      f"--grpc-max-streams={MAX_STREAMS}",
                      f"--stream-max-buffered-responses={MAX_BUFFERED}") as process:
        yield process


@pytest.fixture(scope="module")
def grpcio_bridged_server(tmp_path_factory: pytest.TempPathFactory
                          ) -> Iterator[ServerProcess]:
    """``bridged_server`` with grpc's thread-pool server in the frontend
    (``--grpc-server=grpcio``): its streams go to the engine's loop alike
    (naiad.frontends.bridge.grpc_loop_calls), and its handler reports SENT only what grpc
    took for the client's connection."""
    repo = _repository(tmp_path_factory.mktemp("stream-limits-grpcio"))
    with naiad_server("--model-repository", str(repo), "--frontend-processes=1",
                      "--grpc-server=grpcio", f"--grpc-max-streams={MAX_STREAMS}",
                      f"--stream-max-buffered-responses={MAX_BUFFERED}") as process:
        yield process


#: the gRPC stream cases run against a single process and through a frontend process (with
#: either gRPC server), where the engine runs the stream on its loop and counts it against
#: --grpc-max-streams
GRPC_SERVERS = pytest.mark.parametrize("grpc_server", ["server", "bridged_server",
                                                       "grpcio_bridged_server"])


def frontend_pids(server: ServerProcess) -> list[int]:
    """The server's frontend processes (children running the frontend program)."""
    assert server.process is not None
    found = []
    with open(f"/proc/{server.process.pid}/task/{server.process.pid}/children") as f:
        children = [int(pid) for pid in f.read().split()]
    for pid in children:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"naiad.frontends.bridge.frontend_main" in f.read():
                found.append(pid)
    return found


def region_mappings(pid: int) -> int:
    """Shared-memory regions (naiad-* files) mapped into process ``pid``."""
    with open(f"/proc/{pid}/maps") as maps:
        return sum(1 for line in maps if "/naiad-" in line)


def flood_request(count: int, size: int = REGION_SIZE) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="flood", id="flood")
    for name, value in (("COUNT", count), ("SIZE", size)):
        tensor = request.inputs.add(name=name, datatype="INT32", shape=[1])
        del tensor  # the value goes in raw_input_contents
        request.raw_input_contents.append(np.array([value], np.int32).tobytes())
    return request


class HeldStream:
    """A ModelStreamInfer call that sends ``messages`` and keeps its side open (sends
    nothing more, reads nothing) until :meth:`close`."""

    def __init__(self, stub: service_pb2_grpc.GRPCInferenceServiceStub,
                 *messages: service_pb2.ModelInferRequest) -> None:
        self.release = threading.Event()

        def requests() -> Iterator[service_pb2.ModelInferRequest]:
            yield from messages
            self.release.wait(ANSWER_TIMEOUT_S * 3)  # bounded: the test ends it before

        self.call = stub.ModelStreamInfer(requests(), timeout=ANSWER_TIMEOUT_S * 3)

    def outcome(self) -> tuple[int, grpc.StatusCode | None, str]:
        """Read what came: (responses, the status code when the call failed, its details)."""
        read = 0
        try:
            for _ in self.call:
                read += 1
        except grpc.RpcError as exc:
            return read, exc.code(), exc.details() or ""
        return read, None, ""

    def close(self) -> None:
        self.release.set()
        self.call.cancel()


def served(server: ServerProcess) -> None:
    """ServerLive and an inference from another client answer at once."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        assert client.is_server_live(client_timeout=5)
        tensor = grpcclient.InferInput("INPUT0", [3], "FP32")
        tensor.set_data_from_numpy(np.arange(3, dtype=np.float32))
        answer = client.infer("identity_fp32", [tensor], client_timeout=5)
        assert answer.as_numpy("OUTPUT0").tolist() == [0, 1, 2]
    finally:
        client.close()


def flood_completes(server: ServerProcess, count: int = 5) -> None:
    """A stream that reads gets every response of the flood model."""
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        answers = list(stub.ModelStreamInfer(iter([flood_request(count, 16)]),
                                             timeout=ANSWER_TIMEOUT_S))
    assert [a.error_message for a in answers] == [""] * count


# --- item 1: open streams --------------------------------------------------------------


@GRPC_SERVERS
def test_idle_streams_are_capped_and_leave_threads_to_other_calls(
        grpc_server: str, request: pytest.FixtureRequest):
    server: ServerProcess = request.getfixturevalue(grpc_server)
    assert server.process is not None
    pid = server.process.pid
    threads_before = status_field(pid, "Threads")
    frontends = frontend_pids(server)
    frontend_threads = [status_field(frontend, "Threads") for frontend in frontends]
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        # Each sends one request and reads its answer: then every one is open in the server.
        held = [HeldStream(stub, flood_request(1, 16)) for _ in range(MAX_STREAMS)]
        try:
            for stream in held:
                assert next(stream.call).error_message == ""
            extra = HeldStream(stub)
            read, code, details = extra.outcome()
            assert (read, code) == (0, grpc.StatusCode.RESOURCE_EXHAUSTED), details
            assert f"--grpc-max-streams={MAX_STREAMS}" in details
            served(server)
            # naiad's gRPC server runs streams on its event loop: an open one holds no
            # thread (grpc's server, --grpc-server=grpcio, gives each a thread and a reader),
            # nor, through a frontend process, in the engine, whichever server the frontend
            # runs, nor in a frontend running naiad's
            assert status_field(pid, "Threads") <= threads_before + 16
            if grpc_server == "bridged_server":
                for frontend, before in zip(frontends, frontend_threads, strict=True):
                    assert status_field(frontend, "Threads") <= before + 16
        finally:
            for stream in held:
                stream.close()
    wait_until(lambda: status_field(pid, "Threads") <= threads_before + 16,
               "the server's threads stay as they were")
    flood_completes(server)


@pytest.fixture(scope="module")
def idle_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = _repository(tmp_path_factory.mktemp("stream-idle"))
    with naiad_server("--model-repository", str(repo),
                      "--grpc-stream-idle-timeout=1000") as process:
        yield process


def test_an_idle_stream_ends_itself_after_the_timeout():
    """The stream's own clock (the end-to-end case below runs with -m long): nothing sent
    and nothing in flight for idle_timeout_s ends it UNAVAILABLE naming the flag."""
    stream = Stream(None, None, None, idle_timeout_s=0.2)  # type: ignore[arg-type]
    started = time.monotonic()
    assert list(stream.responses()) == []
    assert 0.2 <= time.monotonic() - started < 2
    assert stream.failure is not None
    code, message = stream.failure
    assert code == grpc.StatusCode.UNAVAILABLE and "--grpc-stream-idle-timeout" in message


@pytest.mark.long
def test_an_idle_stream_is_ended_and_a_busy_one_is_not(idle_server: ServerProcess):
    with grpc.insecure_channel(idle_server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        idle = HeldStream(stub)
        started = time.monotonic()
        answers: queue.SimpleQueue[object] = queue.SimpleQueue()

        def every_300_ms() -> Iterator[service_pb2.ModelInferRequest]:
            for _ in range(8):  # 2.4 s: longer than the idle timeout
                yield flood_request(1, 16)
                time.sleep(0.3)

        busy = stub.ModelStreamInfer(every_300_ms(), timeout=ANSWER_TIMEOUT_S)
        read, code, details = idle.outcome()
        waited = time.monotonic() - started
        assert (read, code) == (0, grpc.StatusCode.UNAVAILABLE), details
        assert "--grpc-stream-idle-timeout" in details
        assert 0.9 < waited < 5, waited
        for message in busy:
            answers.put(message.error_message)
    assert [answers.get_nowait() for _ in range(8)] == [""] * 8
    served(idle_server)


# --- item 2: clients that do not read ----------------------------------------------------


def _flood_done(server: ServerProcess, before: int) -> None:
    wait_until(lambda: request_counts(server.http_port, "flood")["executions"] > before,
               "the flood model's execute returns")


@GRPC_SERVERS
def test_grpc_stream_that_is_not_read_is_ended_at_its_bound(
        grpc_server: str, request: pytest.FixtureRequest):
    server: ServerProcess = request.getfixturevalue(grpc_server)
    assert server.process is not None
    pid = server.process.pid
    before = request_counts(server.http_port, "flood")["executions"]
    with grpc.insecure_channel(server.grpc_url) as channel:
        stream = HeldStream(service_pb2_grpc.GRPCInferenceServiceStub(channel),
                            flood_request(FLOOD))
        try:
            _flood_done(server, before)
            # cancelled once over the bound: the model stopped early, nothing is held
            assert region_mappings(pid) <= MAX_BUFFERED
            read, code, details = stream.outcome()
        finally:
            stream.close()
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, (read, details)
    assert f"--stream-max-buffered-responses={MAX_BUFFERED}" in details
    assert read < FLOOD
    wait_until(lambda: region_mappings(pid) == 0, "the stream's regions are unmapped")
    flood_completes(server)
    served(server)


@GRPC_SERVERS
def test_grpc_stream_left_unread_frees_its_responses_at_once(
        grpc_server: str, request: pytest.FixtureRequest):
    server: ServerProcess = request.getfixturevalue(grpc_server)
    assert server.process is not None
    pid = server.process.pid
    count = MAX_BUFFERED // 2  # within the bound: held until the client goes
    before = request_counts(server.http_port, "flood")["executions"]
    with grpc.insecure_channel(server.grpc_url) as channel:
        stream = HeldStream(service_pb2_grpc.GRPCInferenceServiceStub(channel),
                            flood_request(count))
        _flood_done(server, before)
        stream.close()
    # freed by the stream's end, not by a garbage collection that may come much later
    wait_until(lambda: region_mappings(pid) == 0, "the left stream's regions are unmapped")
    flood_completes(server)


@GRPC_SERVERS
def test_grpc_stream_responses_wait_in_the_engine_while_the_client_does_not_read(
        grpc_server: str, request: pytest.FixtureRequest):
    """A client that grants no flow-control window beyond HTTP/2's first 64 KiB: the
    responses its stream cannot take wait in the engine, unencoded (each still maps its
    region), instead of piling up as bytes: in the connection's send buffer, at most
    sending.STREAM_SEND_BUFFER; through a frontend process, at most
    frames.ANSWER_WINDOW_BYTES in flight to the frontend, which holds them for the client."""
    server: ServerProcess = request.getfixturevalue(grpc_server)
    assert server.process is not None
    pid = server.process.pid
    count = 44  # within the stream's bound (MAX_BUFFERED); 2.75 MiB of responses
    before = request_counts(server.http_port, "flood")["executions"]
    sock = socket.create_connection(("127.0.0.1", server.grpc_port), timeout=ANSWER_TIMEOUT_S)
    try:
        client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        client.initiate_connection()
        stream = client.get_next_available_stream_id()
        client.send_headers(stream, [
            (":method", "POST"), (":scheme", "http"),
            (":path", "/inference.GRPCInferenceService/ModelStreamInfer"),
            (":authority", "localhost"), ("content-type", "application/grpc"),
            ("te", "trailers")])
        message = flood_request(count).SerializeToString()
        client.send_data(stream, b"\0" + len(message).to_bytes(4, "big") + message)
        sock.sendall(client.data_to_send())  # and nothing more: it reads nothing
        _flood_done(server, before)
        wait_until(lambda: region_mappings(pid) >= count // 2,
                   "the responses the client cannot take wait in the engine")
        time.sleep(1.0)  # and they stay there
        assert region_mappings(pid) >= count // 2
    finally:
        sock.close()
    wait_until(lambda: region_mappings(pid) == 0, "the left stream's regions are unmapped")
    flood_completes(server)
    served(server)


def read_events(sock: socket.socket, pace_s: float = 0.0) -> tuple[list[dict], bool]:
    """The server-sent events of the generate_stream answer on ``sock`` (read ``pace_s``
    apart, 64 KiB at a time), and whether the answer was complete (else the server closed
    the connection in the middle)."""
    response = http.client.HTTPResponse(sock, method="POST")
    response.begin()
    assert response.status == 200
    data, complete = b"", True
    try:
        while chunk := response.read1(64 * 1024):
            data += chunk
            time.sleep(pace_s)
    except http.client.IncompleteRead as exc:
        data, complete = data + exc.partial, False
    events = [json.loads(line[len(b"data: "):]) for line in data.split(b"\n")
              if line.startswith(b"data: ") and line.endswith(b"}")]
    return events, complete


#: the generate_stream cases run against a single process and through a frontend process
HTTP_SERVERS = pytest.mark.parametrize("http_server", ["server", "bridged_server"])


@pytest.mark.parametrize("http_server", [
    "server",
    # ~6 s (it waits OVERFLOW_GRACE_S for the error event nobody reads): -m long; the
    # slow reader below checks the bridge's window in the default run (it got every event
    # before the window)
    pytest.param("bridged_server", marks=pytest.mark.long)])
def test_generate_stream_that_is_not_read_is_ended_at_its_bound(
        http_server: str, request: pytest.FixtureRequest):
    server: ServerProcess = request.getfixturevalue(http_server)
    assert server.process is not None
    pid = server.process.pid
    before = request_counts(server.http_port, "flood")["executions"]
    body = json.dumps({"COUNT": [FLOOD], "SIZE": [REGION_SIZE]}).encode()
    with socket.create_connection(("127.0.0.1", server.http_port),
                                  timeout=ANSWER_TIMEOUT_S) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sock.sendall(request_bytes("POST", "/v2/models/flood/generate_stream", body,
                                   {"Content-Type": "application/json"}))
        _flood_done(server, before)
        assert region_mappings(pid) <= MAX_BUFFERED
        events, complete = read_events(sock)
    assert 0 < len(events) < FLOOD
    if complete:  # read within OVERFLOW_GRACE_S: the error event ends it
        assert f"--stream-max-buffered-responses={MAX_BUFFERED}" in events[-1]["error"]
    wait_until(lambda: region_mappings(pid) == 0, "the request's regions are unmapped")
    wait_until(lambda: f"--stream-max-buffered-responses={MAX_BUFFERED}" in server.log(),
               "the server logs the bound")
    flood_completes(server)


@HTTP_SERVERS
def test_a_slow_generate_stream_reader_gets_an_error_event(http_server: str,
                                                           request: pytest.FixtureRequest):
    """A client that reads, more slowly than the model sends: the events it could take,
    then an error event naming the bound, and the end of the stream."""
    server: ServerProcess = request.getfixturevalue(http_server)
    body = json.dumps({"COUNT": [FLOOD], "SIZE": [16 * 1024]}).encode()  # ~60 KB events
    with socket.create_connection(("127.0.0.1", server.http_port),
                                  timeout=ANSWER_TIMEOUT_S) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sock.sendall(request_bytes("POST", "/v2/models/flood/generate_stream", body,
                                   {"Content-Type": "application/json"}))
        events, complete = read_events(sock, pace_s=0.002)
    assert complete and 0 < len(events) < FLOOD
    assert f"--stream-max-buffered-responses={MAX_BUFFERED}" in events[-1]["error"]
    assert all("error" not in event for event in events[:-1])


# --- the budget itself ---------------------------------------------------------------------


def test_the_total_bound_ends_the_stream_holding_the_most():
    ended: list[str] = []
    budget = ResponseBudget(per_stream=100, total=10)
    small = budget.open("small", ended.append)
    large = budget.open("large", ended.append)
    assert all(large.add() for _ in range(7))
    assert all(small.add() for _ in range(3))
    assert small.add()  # the 11th: the largest stream goes, not the one that added
    assert len(ended) == 1 and ended[0].startswith("large:")
    assert "--stream-max-buffered-responses-total=10" in ended[0]
    assert not large.add()  # ended: its responses are dropped
    assert budget.buffered == 4
    small.taken(4)
    small.close()
    large.close()
    assert budget.buffered == 0


def test_the_per_stream_bound_ends_that_stream():
    ended: list[str] = []
    budget = ResponseBudget(per_stream=2, total=0)
    stream = budget.open("s", ended.append)
    assert stream.add() and stream.add()
    stream.taken()
    assert stream.add()
    assert not stream.add()
    assert "--stream-max-buffered-responses=2" in ended[0]
    assert budget.buffered == 0


# --- the figures, with the default settings (slow: run with -m long) ---------------


@pytest.mark.long
def test_1030_idle_streams_with_the_defaults(tmp_path: Path):
    repo = _repository(tmp_path)
    with naiad_server("--model-repository", str(repo)) as process, \
            grpc.insecure_channel(process.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        held = [HeldStream(stub) for _ in range(1030)]
        try:
            time.sleep(5)
            served(process)
            refused = [stream.outcome() for stream in held if stream.call.done()]
            assert [code for _, code, _ in refused] == [grpc.StatusCode.RESOURCE_EXHAUSTED] * 6
        finally:
            for stream in held:
                stream.close()
