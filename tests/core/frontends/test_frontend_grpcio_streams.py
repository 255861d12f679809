"""grpc's thread-pool server in a frontend process (``--frontend-processes 1
--grpc-server=grpcio``), end to end with the official ``tritonclient.grpc``: its
``ModelStreamInfer`` and ``ModelInfer`` go to the engine's event loop on the frontend's HTTP
link (``naiad.frontends.bridge.grpc_loop_calls``), as naiad's gRPC server sends them there.

Before, grpc's server in a frontend sent every call as a CALL exchange on the gRPC link and
the engine ran each on a thread of its own: an open stream held an engine thread for as long
as it was open, and so did a unary inference while it waited for its model. The engine's
thread count is read from /proc/PID/status while 20 streams, and then 20 inferences, are
open. The answers (errors included) are compared with a single-process grpcio server's.
Cancellation and deadlines through this path: test_frontend_cancellation; a client that
does not read: tests/hardening/test_stream_limits.py."""

from __future__ import annotations

import os
import queue
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import h2.events
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from streaming_models import write_streaming_repository
from test_frontend_processes import frontend_pids, is_zombie, thread_count
from test_grpc_decoupled import Stream, repeat_inputs
from test_grpc_limits import RawConnection
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from naiad.testing import ServerProcess, naiad_server

TIMEOUT_S = 30
MAX_INPUT = 64 * 1024  # --http-max-input-size: the largest gRPC message grpc takes too
MESSAGE_TIMEOUT_MS = 2000  # --grpc-message-timeout
OPEN = 20  # streams (and unary calls) held open at once
# Engine threads that may come and go whatever runs (a model's or a pool's helpers): far
# fewer than a thread per open call.
THREAD_SLACK = 8
GRPCIO = ("--grpc-server=grpcio", f"--http-max-input-size={MAX_INPUT}",
          f"--grpc-message-timeout={MESSAGE_TIMEOUT_MS}",
          "--grpc-infer-response-compression-level=high")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_streaming_repository(tmp_path_factory.mktemp("grpcio-frontend"))


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    with naiad_server("--model-repository", str(repo), "--frontend-processes=1",
                      *GRPCIO) as process:
        yield process


@pytest.fixture(scope="module")
def single(repo: Path) -> Iterator[ServerProcess]:
    """The same grpcio server in one process: what the frontend's answers must match."""
    with naiad_server("--model-repository", str(repo), *GRPCIO) as process:
        yield process


def add_sub_inputs(value: float, first: str = "INPUT0", shape: tuple[int, ...] = (4,)
                   ) -> list[grpcclient.InferInput]:
    tensors = [grpcclient.InferInput(first, list(shape), "FP32"),
               grpcclient.InferInput("INPUT1", list(shape), "FP32")]
    for tensor in tensors:
        tensor.set_data_from_numpy(np.full(shape, value, np.float32))
    return tensors


def seconds(value: float) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("SECONDS", [1], "FP32")
    tensor.set_data_from_numpy(np.array([value], np.float32))
    return [tensor]


Outcome = tuple[str, object]


def answered(stream: Stream, count: int) -> list[Outcome]:
    """The next ``count`` results of ``stream``: ("error", message) or ("ok", (response
    id, {output: values})), comparable between servers."""
    got: list[Outcome] = []
    for _ in range(count):
        result, error = stream.get()
        if error is not None:
            got.append(("error", error.message()))
            continue
        response = result.get_response()
        got.append(("ok", (response.id, {output.name: result.as_numpy(output.name).tolist()
                                          for output in response.outputs})))
    return got


def engine_pid(server: ServerProcess) -> int:
    assert server.process is not None
    return server.process.pid


# --- streams answered in order -------------------------------------------------------------


def test_a_stream_answers_a_decoupled_model_in_order(server: ServerProcess) -> None:
    stream = Stream(server.grpc_url)
    try:
        stream.client.async_stream_infer("repeat", repeat_inputs(*range(6)), request_id="a")
        stream.client.async_stream_infer("repeat", repeat_inputs(10, 11), request_id="b")
        results = answered(stream, 8)
    finally:
        stream.close()
    assert [kind for kind, _ in results] == ["ok"] * 8, results
    # each request's responses in order (two requests' may interleave)
    for request, values in (("a", range(6)), ("b", [10, 11])):
        assert [answer for _, (rid, answer) in results if rid == request] == [  # type: ignore[misc]
            {"OUT": [value], "IDX": [index]} for index, value in enumerate(values)]


def test_a_stream_answers_an_ordinary_model_in_order_with_compression(
        server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)),
                        compression_algorithm="gzip")
    try:
        for number in range(12):
            client.async_stream_infer("add_sub", add_sub_inputs(number),
                                      request_id=f"r{number}")
        got = [results.get(timeout=TIMEOUT_S) for _ in range(12)]
    finally:
        client.stop_stream()
        client.close()
    assert [error for _, error in got] == [None] * 12
    assert [result.get_response().id for result, _ in got] == [f"r{n}" for n in range(12)]
    for number, (result, _) in enumerate(got):
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full(4, 2 * number))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.zeros(4))


# --- errors, as a single-process server gives them -----------------------------------------


def stream_outcome(url: str) -> list[Outcome]:
    """What one stream of good and bad requests gets: an error response in the middle of
    a decoupled model's answers, an unknown model, an unknown tensor, a wrong shape, then
    a good request (the stream goes on)."""
    stream = Stream(url)
    try:
        client = stream.client
        client.async_stream_infer("repeat", repeat_inputs(1, -2, 3), request_id="neg")
        client.async_stream_infer("no_such_model", add_sub_inputs(1), request_id="nomodel")
        client.async_stream_infer("add_sub", add_sub_inputs(1, first="NOT_AN_INPUT"),
                                  request_id="noinput")
        client.async_stream_infer("add_sub", add_sub_inputs(1, shape=(5,)),
                                  request_id="shape")
        client.async_stream_infer("add_sub", add_sub_inputs(2), request_id="good")
        return answered(stream, 7)
    finally:
        stream.close()


def test_errors_in_a_stream_are_those_of_a_single_process_server(
        server: ServerProcess, single: ServerProcess) -> None:
    """The same answers (requests' answers may interleave: compared sorted), each request's
    in order."""
    got = stream_outcome(server.grpc_url)
    assert sorted(got, key=repr) == sorted(stream_outcome(single.grpc_url), key=repr)
    errors = [str(value) for kind, value in got if kind == "error"]
    assert len(errors) == 4, got
    for fragment in ("no_such_model", "repeat: negative value -2 at index 1",
                     "unexpected inference input 'NOT_AN_INPUT' for model 'add_sub'",
                     "unexpected shape for input 'INPUT0' for model 'add_sub'"):
        assert sum(fragment in error for error in errors) == 1, (fragment, errors)
    repeated = [value for kind, value in got
                if value in (("neg", {"OUT": [1], "IDX": [0]}), ("neg", {"OUT": [3], "IDX": [2]}))
                or "repeat:" in str(value)]
    assert repeated[0] == ("neg", {"OUT": [1], "IDX": [0]}), repeated
    assert "repeat: negative value -2 at index 1" in str(repeated[1]), repeated
    assert repeated[2:] == [("neg", {"OUT": [3], "IDX": [2]})], repeated
    assert ("ok", ("good", {"OUTPUT0": [4.0] * 4, "OUTPUT1": [0.0] * 4})) in got


def unary_outcome(url: str) -> list[tuple[str, str]]:
    """(status, message) of bad ModelInfer calls: unknown model, unknown tensor, wrong
    shape, a decoupled model (refused for a unary call)."""
    outcome = []
    with grpcclient.InferenceServerClient(url) as client:
        for model, inputs in (("no_such_model", add_sub_inputs(1)),
                              ("add_sub", add_sub_inputs(1, first="NOT_AN_INPUT")),
                              ("add_sub", add_sub_inputs(1, shape=(2, 2))),
                              ("repeat", repeat_inputs(1))):
            with pytest.raises(InferenceServerException) as refused:
                client.infer(model, inputs, client_timeout=TIMEOUT_S)
            outcome.append((str(refused.value.status()), refused.value.message()))
    return outcome


def test_a_bad_unary_request_gets_a_clear_error_naming_the_model_and_tensor(
        server: ServerProcess, single: ServerProcess) -> None:
    got = unary_outcome(server.grpc_url)
    assert got == unary_outcome(single.grpc_url)
    (missing, missing_text), (unknown, unknown_text), (shape, shape_text), _ = got
    assert missing == "StatusCode.NOT_FOUND" and "no_such_model" in missing_text
    assert unknown == "StatusCode.INVALID_ARGUMENT"
    assert "NOT_AN_INPUT" in unknown_text and "add_sub" in unknown_text
    assert shape == "StatusCode.INVALID_ARGUMENT"
    assert "INPUT0" in shape_text and "add_sub" in shape_text


def raw_stream(url: str, *messages: bytes) -> list[service_pb2.ModelStreamInferResponse]:
    with grpc.insecure_channel(url) as channel:
        call = channel.stream_stream(
            "/inference.GRPCInferenceService/ModelStreamInfer",
            response_deserializer=service_pb2.ModelStreamInferResponse.FromString)
        return list(call(iter(messages), timeout=TIMEOUT_S))


def test_an_undecodable_stream_message_is_refused_in_the_stream(
        server: ServerProcess, single: ServerProcess) -> None:
    good = service_pb2.ModelInferRequest(model_name="add_sub", id="after")
    for name in ("INPUT0", "INPUT1"):
        good.inputs.add(name=name, datatype="FP32", shape=[4])
        good.raw_input_contents.append(np.ones(4, np.float32).tobytes())
    messages = (b"\xff\xff\xff", good.SerializeToString())
    got = raw_stream(server.grpc_url, *messages)
    assert got == raw_stream(single.grpc_url, *messages)
    assert "ModelStreamInfer: the request is not a valid inference.ModelInferRequest" in \
        got[0].error_message
    assert got[1].error_message == "" and got[1].infer_response.id == "after"


def test_a_stream_message_over_the_limit_ends_the_stream(server: ServerProcess) -> None:
    """grpc refuses it in the frontend (RESOURCE_EXHAUSTED); the engine withdraws the
    stream, and the next stream is served."""
    big = service_pb2.ModelInferRequest(model_name="add_sub")
    big.raw_input_contents.append(bytes(MAX_INPUT + 1))
    with pytest.raises(grpc.RpcError) as refused:
        raw_stream(server.grpc_url, big.SerializeToString())
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert_serves(server)


def assert_serves(server: ServerProcess) -> None:
    """A stream and a unary call are answered."""
    stream = Stream(server.grpc_url)
    try:
        stream.client.async_stream_infer("add_sub", add_sub_inputs(3), request_id="live")
        assert answered(stream, 1) == [
            ("ok", ("live", {"OUTPUT0": [6.0] * 4, "OUTPUT1": [0.0] * 4}))]
    finally:
        stream.close()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        answer = client.infer("add_sub", add_sub_inputs(5), client_timeout=TIMEOUT_S)
    np.testing.assert_array_equal(answer.as_numpy("OUTPUT1"), np.zeros(4))


def test_a_unary_message_that_stalls_is_cancelled_after_the_message_timeout(
        server: ServerProcess) -> None:
    connection = RawConnection(server.grpc_port)
    try:
        stream = connection.start_call("ModelInfer")
        connection.h2.send_data(stream, b"\x00" + (1000).to_bytes(4, "big") + b"abc")
        connection.flush()
        started = time.monotonic()
        reset = None
        for event in connection.events(started + TIMEOUT_S):
            if isinstance(event, h2.events.StreamReset) and event.stream_id == stream:
                reset = time.monotonic() - started
                break
    finally:
        connection.close()
    assert reset is not None and reset >= MESSAGE_TIMEOUT_MS / 1000 * 0.9, reset
    assert_serves(server)


# --- no engine thread per open call ----------------------------------------------------------


def test_open_streams_and_waiting_inferences_hold_no_engine_thread(
        server: ServerProcess) -> None:
    """OPEN streams held open, then, while they are, OPEN inferences waiting for slow_watch
    (one instance, 0.2 s a request). Both are measured with the other's calls still open:
    threads an engine pool made for earlier calls and kept idle cannot hide new ones."""
    engine = engine_pid(server)
    [frontend] = frontend_pids(server)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    assert_serves(server)  # the engine's lazily made threads exist already
    client.infer("slow_watch", seconds(0), client_timeout=TIMEOUT_S)
    engine_before, frontend_before = thread_count(engine), thread_count(frontend)
    streams = [Stream(server.grpc_url) for _ in range(OPEN)]
    answers: queue.Queue = queue.Queue()
    try:
        for number, stream in enumerate(streams):
            stream.client.async_stream_infer("add_sub", add_sub_inputs(number),
                                             request_id=str(number))
        for number, stream in enumerate(streams):  # each is open, its request answered
            assert answered(stream, 1) == [
                ("ok", (str(number), {"OUTPUT0": [2.0 * number] * 4, "OUTPUT1": [0.0] * 4}))]
        engine_streams, frontend_streams = thread_count(engine), thread_count(frontend)
        for _ in range(OPEN):
            client.async_infer("slow_watch", seconds(0.2),
                               callback=lambda result, error: answers.put((result, error)),
                               client_timeout=TIMEOUT_S * 2)
        time.sleep(0.5)  # in the engine, most of them waiting for the instance
        engine_calls = thread_count(engine)
        got = [answers.get(timeout=TIMEOUT_S * 2) for _ in range(OPEN)]
    finally:
        client.close()
        for stream in streams:
            stream.close()
    assert engine_streams < engine_before + THREAD_SLACK, (engine_before, engine_streams)
    assert engine_calls < engine_before + THREAD_SLACK, (engine_before, engine_calls)
    # grpc's server in the frontend holds a thread per stream (and one reading it), as in a
    # single-process grpcio server: the streams were open
    assert frontend_streams >= frontend_before + OPEN, (frontend_before, frontend_streams)
    assert [error for _, error in got] == [None] * OPEN
    assert_serves(server)


# --- shutdown --------------------------------------------------------------------------------


def test_sigterm_answers_the_calls_in_flight_then_ends(repo: Path) -> None:
    """SIGTERM drains the engine: a unary inference and a stream's request in flight are
    answered through the frontend, which then ends unkilled."""
    with naiad_server("--model-repository", str(repo), "--frontend-processes=1",
                      *GRPCIO) as server:
        [frontend] = frontend_pids(server)
        unary: queue.Queue = queue.Queue()
        with grpc.insecure_channel(server.grpc_url) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            request = service_pb2.ModelInferRequest(model_name="slow_watch", id="drained")
            request.inputs.add(name="SECONDS", datatype="FP32", shape=[1])
            request.raw_input_contents.append(np.array([1.0], np.float32).tobytes())
            stream = stub.ModelStreamInfer(iter([request]), timeout=TIMEOUT_S)
            future = stub.ModelInfer.future(request, timeout=TIMEOUT_S)
            future.add_done_callback(lambda done: unary.put(done))
            time.sleep(0.3)  # both are in the engine (the model takes 1 s each)
            server.signal(signal.SIGTERM)
            streamed = [answer.infer_response.id for answer in stream]
            answer = unary.get(timeout=TIMEOUT_S).result()
        assert streamed == ["drained"] and answer.id == "drained"
        assert server.process is not None and server.process.wait(TIMEOUT_S) == 0
        assert "did not stop" not in server.log()
        assert not os.path.exists(f"/proc/{frontend}") or is_zombie(frontend)

