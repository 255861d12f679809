"""The threaded gRPC frontend (grpc's thread-pool server, ``frontends/grpc/listener.py``)
under concurrency, end to end: real ``naiad serve`` processes and the official sync
``tritonclient.grpc`` client, one per calling thread.

Each test can only pass if calls on different pool threads stay apart: answers that cross
between threads, a slow model that holds up other RPCs, an unload that strands a caller or
a shutdown that drops a call in flight all fail here. The protocol itself is covered by
test_grpc_e2e.py and its neighbours.
"""

from __future__ import annotations

import queue
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from test_dynamic_batching import REPORTING_PY, reporting_config
from tritonclient.utils import InferenceServerException
from zoo import ADD_SUB_CONFIG, ADD_SUB_PY, identity_config, write_model

from naiad.testing import ServerProcess, naiad_server

# Client-side limit on every call: a call the server never answers fails the test instead
# of hanging it.
CALL_TIMEOUT_S = 10
# How long a test waits for something the server is expected to do soon (bounded waits).
WAIT_S = 30

# Holds each request inside execute until the test lets it go: the request's first input
# value is its token; execute creates GATE_DIR/started-TOKEN, then waits (at most 30 s) for
# GATE_DIR/release-TOKEN. The test thereby knows, without sleeping, that a call is in
# progress in the model, and decides when it ends.
GATED_PY = """
import json
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads(args["model_config"])["parameters"]
        self.gates = params["GATE_DIR"]["string_value"]

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            token = int(x[0])
            open(os.path.join(self.gates, f"started-{token}"), "w").close()
            release = os.path.join(self.gates, f"release-{token}")
            deadline = time.monotonic() + 30
            while not os.path.exists(release) and time.monotonic() < deadline:
                time.sleep(0.01)
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("OUTPUT0", x)]))
        return responses
"""


def gated_config(name: str, gate_dir: Path) -> str:
    return identity_config(name, "TYPE_FP32") + f"""
instance_group [ {{ count: 1, kind: KIND_CPU }} ]
parameters {{ key: "GATE_DIR" value: {{ string_value: "{gate_dir}" }} }}
"""


class Gate:
    """The test's side of GATED_PY for one token."""

    def __init__(self, gate_dir: Path, token: int) -> None:
        self.started = gate_dir / f"started-{token}"
        self.released = gate_dir / f"release-{token}"
        self.token = token

    def wait_started(self) -> None:
        deadline = time.monotonic() + WAIT_S
        while not self.started.exists():
            assert time.monotonic() < deadline, f"the gated request {self.token} never started"
            time.sleep(0.01)

    def release(self) -> None:
        self.released.touch()


def gate_folder(repo: Path) -> Path:
    """Where the gated model of ``repo`` and the test meet (outside the repository)."""
    return repo.parent / f"{repo.name}-gates"


def write_gated(repo: Path, name: str = "gated") -> Path:
    """A gated model in ``repo``; returns its gate folder."""
    gate_dir = gate_folder(repo)
    gate_dir.mkdir(parents=True, exist_ok=True)
    write_model(repo, name, gated_config(name, gate_dir), GATED_PY)
    return gate_dir


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("grpc-threads") / "models"
    write_model(repo, "add_sub", ADD_SUB_CONFIG, ADD_SUB_PY)
    # One instance, batches of up to 8 rows, a short queue delay so concurrent callers share
    # executions.
    write_model(repo, "batched", reporting_config(
        "batched", "max_queue_delay_microseconds: 20000", sleep_s=0.02), REPORTING_PY)
    write_gated(repo)
    return repo


@pytest.fixture(scope="module")
def server(repo):
    with naiad_server("--model-repository", str(repo)) as process:
        yield process


@pytest.fixture(scope="module")
def gate_dir(repo) -> Path:
    return gate_folder(repo)


@pytest.fixture
def client(server):
    with grpcclient.InferenceServerClient(server.grpc_url) as c:
        yield c


# --- helpers -----------------------------------------------------------------------------


def add_sub_inputs(a: np.ndarray, b: np.ndarray) -> list[grpcclient.InferInput]:
    inputs = [grpcclient.InferInput("INPUT0", [4], "FP32"),
              grpcclient.InferInput("INPUT1", [4], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


def one_input(data: np.ndarray) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("INPUT0", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data)
    return [tensor]


def random_pair(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    return (rng.standard_normal(4).astype(np.float32),
            rng.standard_normal(4).astype(np.float32))


def check_add_sub(client: grpcclient.InferenceServerClient, rng: np.random.Generator,
                  request_id: str = "") -> None:
    """One add_sub call with fresh inputs; its answer must be for exactly those inputs."""
    a, b = random_pair(rng)
    result = client.infer("add_sub", add_sub_inputs(a, b), request_id=request_id,
                          client_timeout=CALL_TIMEOUT_S)
    assert result.get_response().id == request_id
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def counters(client: grpcclient.InferenceServerClient, model: str) -> tuple[int, int, int]:
    """(inference_count, execution_count, success count) of the model's one version."""
    (stats,) = client.get_inference_statistics(model, client_timeout=CALL_TIMEOUT_S).model_stats
    return stats.inference_count, stats.execution_count, stats.inference_stats.success.count


def run_in_threads(count: int, work: Callable[[int], object]) -> list:
    """``work(index)`` on ``count`` threads at once; their results (re-raising failures)."""
    with ThreadPoolExecutor(count) as pool:
        futures = [pool.submit(work, index) for index in range(count)]
        return [future.result() for future in futures]


def start_gated_call(url: str, token: int) -> Future:
    """A gRPC infer on the gated model in a background thread; its future's result is the
    output."""
    def call() -> np.ndarray:
        with grpcclient.InferenceServerClient(url) as c:
            data = np.array([token, token + 0.5], np.float32)
            return c.infer("gated", one_input(data), client_timeout=WAIT_S).as_numpy("OUTPUT0")

    pool = ThreadPoolExecutor(1)
    future = pool.submit(call)
    pool.shutdown(wait=False)
    return future


# --- many callers ------------------------------------------------------------------------


def test_many_concurrent_callers_get_their_own_answers(server, client):
    threads, calls = 32, 25
    before = counters(client, "add_sub")

    def caller(index: int) -> None:
        rng = np.random.default_rng(index)
        with grpcclient.InferenceServerClient(server.grpc_url) as own:
            for call in range(calls):
                check_add_sub(own, rng, request_id=f"t{index}-c{call}")

    run_in_threads(threads, caller)
    after = counters(client, "add_sub")
    sent = threads * calls
    # add_sub does not batch: one inference and one execution per request.
    assert [x - y for x, y in zip(after, before, strict=True)] == [sent, sent, sent]


def test_dynamic_batching_forms_batches_across_grpc_threads(server, client):
    threads, calls = 16, 8
    before = counters(client, "batched")

    def caller(index: int) -> tuple[int, list[int]]:
        rng = np.random.default_rng(1000 + index)
        rows_sent, batches = 0, []
        with grpcclient.InferenceServerClient(server.grpc_url) as own:
            for _ in range(calls):
                data = rng.standard_normal((int(rng.integers(1, 3)), 3)).astype(np.float32)
                result = own.infer("batched", one_input(data), client_timeout=CALL_TIMEOUT_S)
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
                rows_sent += data.shape[0]
                batches.append(int(result.as_numpy("BATCH")[0, 0]))
        return rows_sent, batches

    results = run_in_threads(threads, caller)
    rows = sum(r for r, _ in results)
    requests = threads * calls
    inferences, executions, successes = (
        x - y for x, y in zip(counters(client, "batched"), before, strict=True))
    assert successes == requests
    assert inferences == rows  # Triton counts every row of a batched request
    assert executions < requests, "no two gRPC requests ever shared an execution"
    assert max(b for _, batches in results for b in batches) > 1


# --- a slow model holds nothing else up --------------------------------------------------


def test_a_slow_model_does_not_block_other_rpcs(server, client, gate_dir):
    gate = Gate(gate_dir, token=11)
    slow = start_gated_call(server.grpc_url, gate.token)
    try:
        gate.wait_started()
        assert client.is_server_live(client_timeout=5)
        assert client.is_model_ready("gated", client_timeout=5)
        assert client.get_model_metadata("gated", client_timeout=5).name == "gated"
        check_add_sub(client, np.random.default_rng(7), request_id="beside-the-slow-one")
        # All of the above answered while the gated call was still inside execute.
        assert not slow.done()
    finally:
        gate.release()
    np.testing.assert_array_equal(slow.result(WAIT_S), [gate.token, gate.token + 0.5])


# --- a stream and unary calls at once ----------------------------------------------------


def test_a_stream_and_unary_calls_at_once(server, client):
    count = 20
    rng = np.random.default_rng(99)
    pairs = [random_pair(rng) for _ in range(count)]
    answers: queue.Queue = queue.Queue()
    start = threading.Barrier(9)

    def unary(index: int) -> None:
        rng = np.random.default_rng(2000 + index)
        with grpcclient.InferenceServerClient(server.grpc_url) as own:
            start.wait(WAIT_S)
            for call in range(20):
                check_add_sub(own, rng, request_id=f"u{index}-{call}")

    with ThreadPoolExecutor(8) as pool:
        unary_calls = [pool.submit(unary, index) for index in range(8)]
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        try:
            start.wait(WAIT_S)
            for i, (a, b) in enumerate(pairs):
                client.async_stream_infer("add_sub", add_sub_inputs(a, b), request_id=f"s-{i}")
            got = [answers.get(timeout=WAIT_S) for _ in range(count)]
        finally:
            client.stop_stream()
        for call in unary_calls:
            call.result()
    assert [error for _, error in got] == [None] * count
    assert [result.get_response().id for result, _ in got] == [f"s-{i}" for i in range(count)]
    for (result, _), (a, b) in zip(got, pairs, strict=True):
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


# --- unload under load -------------------------------------------------------------------


class LoadRecord:
    """What the load threads saw, shared with the main thread."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.successes = 0
        self.refusals: list[InferenceServerException] = []
        self.unexpected: list[BaseException] = []

    def wait_for(self, what: str, predicate: Callable[[], bool]) -> None:
        with self.changed:
            assert self.changed.wait_for(predicate, WAIT_S), (
                f"{what}: successes {self.successes}, refusals {len(self.refusals)}, "
                f"unexpected {self.unexpected[:3]}")


# add_sub that takes a few milliseconds per execution, on two instances: when an unload
# begins, requests are inside execute and queued at the instances.
BUSY_ADD_SUB_PY = "import time\n" + ADD_SUB_PY.replace(
    "    def execute(self, requests):\n",
    "    def execute(self, requests):\n        time.sleep(0.005)\n")
assert "time.sleep" in BUSY_ADD_SUB_PY
BUSY_ADD_SUB_CONFIG = ADD_SUB_CONFIG + "instance_group [ { count: 2, kind: KIND_CPU } ]\n"


def test_unload_under_load_never_hangs_a_caller(tmp_path):
    write_model(tmp_path, "add_sub", BUSY_ADD_SUB_CONFIG, BUSY_ADD_SUB_PY)
    threads, max_calls, cycles, served_between = 4, 5000, 5, 20
    record = LoadRecord()
    done = threading.Event()

    def load(index: int, url: str) -> None:
        rng = np.random.default_rng(3000 + index)
        with grpcclient.InferenceServerClient(url) as own:
            for call in range(max_calls):
                if done.is_set():
                    return
                try:
                    check_add_sub(own, rng, request_id=f"l{index}-{call}")
                except InferenceServerException as exc:
                    refused = (exc.status() in ("StatusCode.UNAVAILABLE", "StatusCode.NOT_FOUND")
                               and "'add_sub'" in (exc.message() or ""))
                    with record.changed:
                        (record.refusals if refused else record.unexpected).append(exc)
                        record.changed.notify_all()
                    time.sleep(0.005)  # the model is away: do not spin on fast refusals
                except BaseException as exc:  # a wrong answer: report it, stop this thread
                    with record.changed:
                        record.unexpected.append(exc)
                        record.changed.notify_all()
                    return
                else:
                    with record.changed:
                        record.successes += 1
                        record.changed.notify_all()

    with naiad_server("--model-repository", str(tmp_path), "--model-control-mode=explicit",
                      "--load-model=*") as server, \
            grpcclient.InferenceServerClient(server.grpc_url) as client:
        with ThreadPoolExecutor(threads) as pool:
            workers = [pool.submit(load, index, server.grpc_url) for index in range(threads)]
            try:
                for cycle in range(cycles):
                    served, refused = record.successes, len(record.refusals)
                    record.wait_for(f"cycle {cycle}: served before the unload",
                                    lambda s=served: record.successes >= s + served_between)
                    client.unload_model("add_sub", client_timeout=WAIT_S)
                    record.wait_for(f"cycle {cycle}: refused once unloaded",
                                    lambda r=refused: len(record.refusals) > r)
                    served = record.successes
                    client.load_model("add_sub", client_timeout=WAIT_S)
                    record.wait_for(f"cycle {cycle}: served after the reload",
                                    lambda s=served: record.successes > s)
            finally:
                done.set()
            for worker in workers:
                worker.result(WAIT_S)
        assert record.unexpected == []
        assert all("'add_sub'" in exc.message() for exc in record.refusals)
        assert client.is_server_live(client_timeout=5)
        assert client.is_model_ready("add_sub", client_timeout=5)
        check_add_sub(client, np.random.default_rng(5), request_id="after-the-cycles")
        assert "Traceback" not in server.log(), server.log()[-3000:]


# --- shutdown drains calls in flight -----------------------------------------------------


def test_sigterm_drains_a_grpc_call_in_flight(tmp_path):
    repo = tmp_path / "models"
    write_model(repo, "add_sub", ADD_SUB_CONFIG, ADD_SUB_PY)
    gate = Gate(write_gated(repo), token=21)
    with naiad_server("--model-repository", str(repo)) as server:
        slow = start_gated_call(server.grpc_url, gate.token)
        try:
            gate.wait_started()
            server.signal(signal.SIGTERM)
            assert_refuses_new_calls(server)
        finally:
            gate.release()
        np.testing.assert_array_equal(slow.result(WAIT_S), [gate.token, gate.token + 0.5])
        assert server.process is not None
        assert server.process.wait(server.stop_timeout) == 0
        assert "Traceback" not in server.log(), server.log()[-3000:]


def assert_refuses_new_calls(server: ServerProcess) -> None:
    """Once shutdown began, a new gRPC inference gets UNAVAILABLE (the call in flight keeps
    the listener open meanwhile). Calls made before the signal took effect still succeed."""
    rng = np.random.default_rng(8)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        for _ in range(1000):
            try:
                check_add_sub(client, rng)
            except InferenceServerException as exc:
                assert exc.status() == "StatusCode.UNAVAILABLE", exc
                assert "shutting down" in exc.message()
                return
            time.sleep(0.01)
    raise AssertionError("the server kept accepting gRPC inferences after SIGTERM")
