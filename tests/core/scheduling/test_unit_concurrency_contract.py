"""The one concurrency contract, in process: ``InstanceWorker.submit`` (a batch -> a future
of its execution), ``Scheduler.submit`` (a request -> a future of its response) and
``InferenceServer.infer``, used from frontend threads (as gRPC does) and from the event loop
(as HTTP does), cancellation through ``future.cancel()``, and that no other way in remains.
The event loop runs on a thread of its own, as in ``naiad serve``."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from google.protobuf import text_format
from loop_thread import loop_in_thread
from tritonclient.grpc.model_config_pb2 import ModelConfig
from zoo import ADD_SUB_CONFIG, ADD_SUB_PY, SLOW_PY, identity_config, write_model

from naiad.batching import batch_sizes, merge_inputs, split_outputs
from naiad.errors import InferenceServerError, Status
from naiad.futures import LoopWaiter
from naiad.metrics.stats import ModelStats
from naiad.scheduling.base import Scheduler, SchedulingContext
from naiad.scheduling.default import DefaultScheduler
from naiad.scheduling.dynamic import DynamicBatcher
from naiad.scheduling.ensemble import EnsembleScheduler
from naiad.scheduling.sequence import SequenceBatcher
from naiad.scheduling.worker import InstanceWorker
from naiad.server import InferenceServer, ServerOptions, answer
from naiad.types import (
    InferenceRequest,
    InferenceResponse,
    InstanceInfo,
    ModelInstance,
    RequestedOutput,
    Tensor,
)

WAIT_S = 10.0  # upper bound for anything that should happen; never a speed assertion


class Doubling(ModelInstance):
    """Y = 2 X for every request of the batch (merged into one array, as a backend does);
    remembers the threads it ran on and can be held at a gate."""

    def __init__(self) -> None:
        self.threads: set[str] = set()
        self.gate = threading.Event()
        self.gate.set()
        self.started = threading.Semaphore(0)
        self.closed_after: list[int] = []
        self.executions = 0

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        self.threads.add(threading.current_thread().name)
        self.started.release()
        assert self.gate.wait(WAIT_S)
        self.executions += 1
        merged = merge_inputs(requests, ["X"])
        parts = split_outputs({"Y": merged["X"] * 2}, batch_sizes(requests))
        return [InferenceResponse(outputs=[Tensor("Y", "FP32", p["Y"].shape, p["Y"])])
                for p in parts]

    def close(self) -> None:
        self.closed_after.append(self.executions)


def request_of(x: np.ndarray) -> InferenceRequest:
    request = InferenceRequest("m", 1, {"X": Tensor("X", "FP32", x.shape, x)})
    request.arrival_ns = time.perf_counter_ns()
    return request


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop running on its own thread."""
    with loop_in_thread() as loop:
        yield loop


def on_loop(loop: asyncio.AbstractEventLoop, fn: Callable[[], Any]) -> Any:
    """Await ``fn()`` on ``loop`` from this thread."""
    return asyncio.run_coroutine_threadsafe(fn(), loop).result(WAIT_S)


def worker_with(instance: ModelInstance, loop: asyncio.AbstractEventLoop,
                name: str = "m_0") -> InstanceWorker:
    worker = InstanceWorker(InstanceInfo(name, "KIND_CPU", 0, 0), "m")

    async def load() -> None:
        await worker.load(lambda: instance)

    on_loop(loop, load)
    return worker


def context(config_text: str, workers: list[InstanceWorker]) -> SchedulingContext:
    config = text_format.Parse(config_text, ModelConfig())
    return SchedulingContext("m", 1, config, workers, ModelStats("m", 1))


def wait_until(predicate: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.002)


def submitted_on_loop(loop: asyncio.AbstractEventLoop,
                      submit: Callable[[], Future[Any]]) -> Future[Any]:
    """Call ``submit()`` on the loop's thread, as the HTTP frontend does; its future."""

    async def call() -> Future[Any]:
        return submit()

    return asyncio.run_coroutine_threadsafe(call(), loop).result(WAIT_S)


def one_row(n: float = 1.0) -> InferenceRequest:
    return request_of(np.full((1, 1), n, np.float32))


# --- InstanceWorker.submit ------------------------------------------------------------------


def test_submit_executes_and_calls_back_on_the_instance_thread(loop):
    instance = Doubling()
    worker = worker_with(instance, loop, "m_0")
    called_back_on: list[str] = []
    try:
        future = worker.submit([request_of(np.ones((1, 3), np.float32))])
        future.add_done_callback(lambda _: called_back_on.append(
            threading.current_thread().name))
        execution = future.result(WAIT_S)
        assert not execution.failed
        np.testing.assert_array_equal(execution.responses[0].outputs[0].data, [[2, 2, 2]])
        assert execution.start_ns <= execution.end_ns
        # Not the caller's thread: the instance keeps to its own, and so do callbacks.
        assert instance.threads == {"naiad-m_0"}
        wait_until(lambda: called_back_on == ["naiad-m_0"])
    finally:
        worker.stop()


def test_then_turns_the_execution_into_the_futures_value_on_the_instance_thread(loop):
    worker = worker_with(Doubling(), loop, "m_0")
    try:
        threads = worker.submit([one_row(2)], lambda execution: (
            threading.current_thread().name, execution.responses[0].outputs[0].data.tolist()))
        assert threads.result(WAIT_S) == ("naiad-m_0", [[4.0]])

        def broken(execution: Any) -> None:
            raise ValueError("then failed")

        with pytest.raises(ValueError, match="then failed"):
            worker.submit([one_row()], broken).result(WAIT_S)
        assert not worker.submit([one_row()]).result(WAIT_S).failed  # the thread goes on
    finally:
        worker.stop()
    # A closing instance refuses at once, and ``then`` sees the refusal.
    refused = worker.submit([one_row()], lambda execution: execution.failed)
    assert refused.done() and refused.result() is True


def test_pending_and_busy_count_jobs_from_every_thread(loop):
    instance = Doubling()
    instance.gate.clear()
    worker = worker_with(instance, loop)
    try:
        with ThreadPoolExecutor(3) as pool:
            results = [pool.submit(lambda: worker.submit([one_row()]).result(WAIT_S))
                       for _ in range(3)]
            assert instance.started.acquire(timeout=WAIT_S)  # one runs, two wait
            wait_until(lambda: worker.pending == 2)
            assert worker.busy == 3
            instance.gate.set()
            assert all(not r.result(WAIT_S).failed for r in results)
        wait_until(lambda: worker.busy == 0)
        assert worker.pending == 0
    finally:
        worker.stop()


def test_a_batch_cancelled_before_it_starts_never_runs(loop):
    instance = Doubling()
    instance.gate.clear()
    worker = worker_with(instance, loop)
    try:
        running = worker.submit([one_row()])
        assert instance.started.acquire(timeout=WAIT_S)
        queued = worker.submit([one_row()])
        assert not running.cancel()  # it runs already
        assert queued.cancel()
        instance.gate.set()
        assert not running.result(WAIT_S).failed
        with pytest.raises(CancelledError):
            queued.result(WAIT_S)
        wait_until(lambda: worker.busy == 0)
    finally:
        worker.stop()
    assert instance.executions == 1


def test_jobs_queued_before_stop_run_before_close_later_ones_are_refused(loop):
    instance = Doubling()
    instance.gate.clear()
    worker = worker_with(instance, loop)
    queued = worker.submit([one_row()])
    assert instance.started.acquire(timeout=WAIT_S)
    stopping = threading.Thread(target=worker.stop)
    stopping.start()
    wait_until(lambda: worker._closed)
    # Refused at once, with a status and a message naming the model and instance.
    refused = worker.submit([one_row()])
    assert refused.done()
    assert refused.result().failed
    error = refused.result().responses[0].error
    assert error is not None and error.status is Status.UNAVAILABLE
    assert "model 'm' instance 'm_0' is unloading" in error.message
    assert submitted_on_loop(loop, lambda: worker.submit([one_row()])).result().failed
    instance.gate.set()
    assert not queued.result(WAIT_S).failed
    stopping.join(WAIT_S)
    assert instance.closed_after == [1]  # closed after the job queued before stop, once


# --- schedulers ---------------------------------------------------------------------------


def test_default_scheduler_from_many_threads_answers_each_and_counts_each(loop):
    instances = [Doubling(), Doubling()]
    workers = [worker_with(i, loop, f"m_{n}") for n, i in enumerate(instances)]
    scheduler = DefaultScheduler(context("max_batch_size: 8", workers))
    rng = np.random.default_rng(7)
    inputs = [rng.random((2, 3), dtype=np.float32) for _ in range(200)]
    try:
        with ThreadPoolExecutor(8) as pool:
            responses = list(pool.map(
                lambda x: scheduler.submit(request_of(x)).result(WAIT_S), inputs))
    finally:
        for worker in workers:
            worker.stop()
    for x, response in zip(inputs, responses, strict=True):
        np.testing.assert_array_equal(response.outputs[0].data, x * 2)
    stats = scheduler.stats.as_dict()
    assert stats["inference_count"] == 400  # 200 requests of batch 2
    assert stats["execution_count"] == 200
    assert stats["inference_stats"]["success"]["count"] == 200
    assert sum(i.executions for i in instances) == 200


def test_the_default_scheduler_withdraws_a_request_still_queued_on_its_instance(loop):
    # It holds no requests itself (the frontends do not cancel them), but its futures are
    # the instance's: one still queued there can be withdrawn, one running cannot.
    instance = Doubling()
    instance.gate.clear()
    worker = worker_with(instance, loop)
    scheduler = DefaultScheduler(context("max_batch_size: 0", [worker]))
    try:
        first = scheduler.submit(request_of(np.ones(1, np.float32)))
        assert instance.started.acquire(timeout=WAIT_S)
        second = scheduler.submit(request_of(np.ones(1, np.float32)))
        assert not scheduler.holds_requests
        assert not first.cancel()
        assert second.cancel()
        instance.gate.set()
        assert first.result(WAIT_S).outputs
        wait_until(lambda: worker.busy == 0)
    finally:
        worker.stop()
    assert instance.executions == 1
    assert scheduler.stats.as_dict()["inference_stats"]["success"]["count"] == 1


def held_batcher(loop: asyncio.AbstractEventLoop, config: str = "max_batch_size: 8 "
                 "dynamic_batching { }") -> tuple[Doubling, InstanceWorker, DynamicBatcher]:
    """A dynamic batcher over one instance held at its gate."""
    instance = Doubling()
    instance.gate.clear()
    worker = worker_with(instance, loop)

    async def make() -> DynamicBatcher:
        return DynamicBatcher(context(config, [worker]))

    return instance, worker, on_loop(loop, make)


def test_dynamic_batcher_from_threads_batches_requests_of_different_threads(loop):
    instance, worker, batcher = held_batcher(loop)
    inputs = [np.full((1, 2), n, np.float32) for n in range(9)]

    def infer(x: np.ndarray) -> InferenceResponse:
        return batcher.submit(request_of(x)).result(WAIT_S)

    try:
        with ThreadPoolExecutor(9) as pool:
            first = pool.submit(infer, inputs[0])
            assert instance.started.acquire(timeout=WAIT_S)  # the instance is now busy
            rest = [pool.submit(infer, x) for x in inputs[1:]]
            wait_until(lambda: batcher.pending() == 8)
            instance.gate.set()
            responses = [first.result(WAIT_S)] + [r.result(WAIT_S) for r in rest]
    finally:
        on_loop(loop, batcher.drain)
        worker.stop()
    for x, response in zip(inputs, responses, strict=True):
        np.testing.assert_array_equal(response.outputs[0].data, x * 2)
    assert instance.executions == 2  # the first alone, then the eight waiting ones together


def test_batched_requests_from_threads_need_no_event_loop(loop):
    # The instance thread answers a batch and cuts the next one itself: with the loop
    # stuck, requests from frontend threads still batch, run and come back.
    instance, worker, batcher = held_batcher(loop)
    loop_free = threading.Event()
    loop.call_soon_threadsafe(loop_free.wait, WAIT_S)
    inputs = [np.full((1, 2), n, np.float32) for n in range(9)]
    try:
        first = batcher.submit(request_of(inputs[0]))
        assert instance.started.acquire(timeout=WAIT_S)
        rest = [batcher.submit(request_of(x)) for x in inputs[1:]]
        assert batcher.pending() == 8
        instance.gate.set()
        responses = [f.result(WAIT_S) for f in [first, *rest]]
        assert not loop_free.is_set()
    finally:
        loop_free.set()
        on_loop(loop, batcher.drain)
        worker.stop()
    for x, response in zip(inputs, responses, strict=True):
        np.testing.assert_array_equal(response.outputs[0].data, x * 2)
    assert instance.executions == 2
    assert instance.threads == {"naiad-m_0"}


def test_requests_from_the_loop_and_from_threads_share_a_batch(loop):
    instance, worker, batcher = held_batcher(loop)
    inputs = [np.full((1, 2), n, np.float32) for n in range(7)]
    try:
        first = batcher.submit(request_of(inputs[0]))
        assert instance.started.acquire(timeout=WAIT_S)
        threaded = [batcher.submit(request_of(x)) for x in inputs[1:4]]
        looped = [submitted_on_loop(loop, lambda x=x: batcher.submit(request_of(x)))
                  for x in inputs[4:]]
        assert batcher.pending() == 6
        instance.gate.set()
        responses = [f.result(WAIT_S) for f in [first, *threaded, *looped]]
    finally:
        on_loop(loop, batcher.drain)
        worker.stop()
    for x, response in zip(inputs, responses, strict=True):
        np.testing.assert_array_equal(response.outputs[0].data, x * 2)
    assert instance.executions == 2  # the first alone, then both kinds of caller together


def test_preserve_ordering_holds_for_requests_from_threads(loop):
    slow, fast = Doubling(), Doubling()
    slow.gate.clear()
    workers = [worker_with(slow, loop, "m_0"), worker_with(fast, loop, "m_1")]

    async def make() -> DynamicBatcher:
        return DynamicBatcher(context(
            "max_batch_size: 1 dynamic_batching { preserve_ordering: true }", workers))

    batcher = on_loop(loop, make)
    answered: list[int] = []

    def one(n: int) -> None:
        batcher.submit(one_row(n)).result(WAIT_S)
        answered.append(n)

    try:
        with ThreadPoolExecutor(3) as pool:
            calls = [pool.submit(one, 0)]
            assert slow.started.acquire(timeout=WAIT_S)  # 0 holds the first instance
            calls += [pool.submit(one, n) for n in (1, 2)]
            wait_until(lambda: fast.executions == 2)
            time.sleep(0.05)  # room for a wrong early answer to arrive
            assert answered == []  # 1 and 2 are done but wait behind 0
            slow.gate.set()
            for call in calls:
                call.result(WAIT_S)
    finally:
        slow.gate.set()
        for worker in workers:
            worker.stop()
    assert sorted(answered) == [0, 1, 2]


def test_a_closing_instance_refuses_every_queued_batch_from_threads(loop):
    worker = worker_with(Doubling(), loop)

    async def make() -> DynamicBatcher:
        return DynamicBatcher(context("max_batch_size: 1 dynamic_batching { }", [worker]))

    batcher = on_loop(loop, make)
    worker.stop()  # unloading: the worker refuses new jobs
    with ThreadPoolExecutor(3) as pool:
        responses = list(pool.map(lambda n: batcher.submit(one_row(n)).result(WAIT_S),
                                  range(3)))
    for response in responses:
        assert response.error is not None
        assert response.error.status is Status.UNAVAILABLE
        assert "is unloading" in response.error.message
    assert batcher.pending() == 0


def test_a_closing_instance_refuses_a_long_queue_without_recursing(loop):
    # Each refused batch frees the instance for the next cut: thousands of batches must be
    # refused in a loop, not in nested callbacks (the recursion limit is 1000 frames).
    instance, worker, batcher = held_batcher(loop, "max_batch_size: 1 dynamic_batching { }")
    running = batcher.submit(one_row())
    assert instance.started.acquire(timeout=WAIT_S)
    queued = [batcher.submit(one_row(n)) for n in range(3000)]
    stopping = threading.Thread(target=worker.stop)
    stopping.start()
    wait_until(lambda: worker._closed)
    instance.gate.set()
    stopping.join(WAIT_S)
    assert running.result(WAIT_S).outputs
    for future in queued:
        error = future.result(WAIT_S).error
        assert error is not None and error.status is Status.UNAVAILABLE
    assert batcher.pending() == 0
    assert instance.executions == 1


# --- cancellation: future.cancel() ----------------------------------------------------------


def test_cancel_from_a_thread_withdraws_a_queued_request(loop):
    instance, worker, batcher = held_batcher(loop)
    try:
        busy = batcher.submit(one_row())
        assert instance.started.acquire(timeout=WAIT_S)
        waiting = batcher.submit(one_row())
        assert batcher.pending() == 1
        # What gRPC does when the client cancels or its deadline passes (not the loop's
        # thread: this test's).
        assert waiting.cancel()
        with pytest.raises(CancelledError):
            waiting.result(WAIT_S)
        assert batcher.pending() == 0
        instance.gate.set()
        assert busy.result(WAIT_S).outputs
    finally:
        on_loop(loop, batcher.drain)
        worker.stop()
    assert instance.executions == 1


def test_cancel_on_the_loop_withdraws_a_queued_request(loop):
    # What the HTTP frontend does when the client disconnects.
    instance, worker, batcher = held_batcher(loop)

    async def submit_then_cancel() -> tuple[bool, int]:
        waiting = batcher.submit(one_row())
        queued = batcher.pending()
        return waiting.cancel(), queued

    try:
        busy = batcher.submit(one_row())
        assert instance.started.acquire(timeout=WAIT_S)
        assert on_loop(loop, submit_then_cancel) == (True, 1)
        assert batcher.pending() == 0
        instance.gate.set()
        assert busy.result(WAIT_S).outputs
        on_loop(loop, batcher.drain)
    finally:
        worker.stop()
    assert instance.executions == 1


def test_a_request_that_runs_cannot_be_cancelled(loop):
    instance, worker, batcher = held_batcher(loop)
    try:
        running = batcher.submit(one_row(3))
        assert instance.started.acquire(timeout=WAIT_S)
        assert not running.cancel()
        instance.gate.set()
        np.testing.assert_array_equal(running.result(WAIT_S).outputs[0].data, [[6]])
    finally:
        worker.stop()


def test_a_cancelled_request_does_not_hold_back_later_answers_in_order(loop):
    instance, worker, batcher = held_batcher(
        loop, "max_batch_size: 1 dynamic_batching { preserve_ordering: true }")
    try:
        first = batcher.submit(one_row(0))
        assert instance.started.acquire(timeout=WAIT_S)
        second, third = batcher.submit(one_row(1)), batcher.submit(one_row(2))
        assert second.cancel()
        instance.gate.set()
        np.testing.assert_array_equal(third.result(WAIT_S).outputs[0].data, [[4]])
        assert first.result(WAIT_S).outputs
    finally:
        worker.stop()
    assert instance.executions == 2


def test_cancel_withdraws_a_queued_request_of_a_sequence(loop):
    instance = Doubling()
    instance.gate.clear()
    worker = worker_with(instance, loop)

    async def make() -> SequenceBatcher:
        return SequenceBatcher(context("max_batch_size: 1 sequence_batching { }", [worker]))

    batcher = on_loop(loop, make)

    def step(start: bool) -> InferenceRequest:
        request = one_row()
        request.parameters = {"sequence_id": 7, "sequence_start": start}
        return request

    try:
        first = batcher.submit(step(True))  # from this thread: it hops to the loop
        assert instance.started.acquire(timeout=WAIT_S)
        second = batcher.submit(step(False))
        wait_until(lambda: batcher.pending() == 1)
        assert second.cancel()
        wait_until(lambda: batcher.pending() == 0)
        instance.gate.set()
        assert first.result(WAIT_S).outputs
        with pytest.raises(CancelledError):
            second.result(WAIT_S)
        on_loop(loop, batcher.drain)
    finally:
        worker.stop()
    assert instance.executions == 1


# --- one way in -------------------------------------------------------------------------------


def public_methods(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")
            and callable(getattr(cls, name))}


def test_there_is_one_way_to_an_instance_and_one_way_to_a_scheduler():
    """``submit`` (a future) is the way in; ``run_elsewhere`` and ``submit_on_loop`` are the
    one exception, for instances in worker processes, which answer on the event loop
    (``docs/design.md``, "Requests without a future")."""
    assert public_methods(InstanceWorker) == {"submit", "run_elsewhere", "load", "stop"}
    assert public_methods(Scheduler) == {"submit", "submit_on_loop", "drain", "pending"}
    for scheduler in (DefaultScheduler, DynamicBatcher, SequenceBatcher, EnsembleScheduler):
        assert public_methods(scheduler) == {"submit", "submit_on_loop", "drain",
                                             "pending"}, scheduler
    for scheduler in (DynamicBatcher, SequenceBatcher, EnsembleScheduler):
        assert scheduler.submit_on_loop is Scheduler.submit_on_loop, scheduler
    assert not hasattr(InferenceServer, "infer_blocking")
    assert not asyncio.iscoroutinefunction(InferenceServer.infer)


# --- InferenceServer.infer --------------------------------------------------------------------


@pytest.fixture
def server(tmp_path, loop) -> Iterator[InferenceServer]:
    write_model(tmp_path, "add_sub", ADD_SUB_CONFIG, ADD_SUB_PY)
    write_model(tmp_path, "slow", identity_config("slow", "TYPE_FP32"), SLOW_PY)
    server = InferenceServer(ServerOptions(model_repositories=[str(tmp_path)]))
    on_loop(loop, server.start)
    try:
        yield server
    finally:
        if server.live:
            on_loop(loop, lambda: server.shutdown(WAIT_S))


def add_sub_request(a: np.ndarray, b: np.ndarray) -> InferenceRequest:
    return InferenceRequest("add_sub", 1, {"INPUT0": Tensor("INPUT0", "FP32", (4,), a),
                                          "INPUT1": Tensor("INPUT1", "FP32", (4,), b)})


def test_server_infer_from_a_thread_answers_only_the_requested_outputs(server):
    a = np.arange(4, dtype=np.float32)
    b = np.full(4, 10, np.float32)
    request = add_sub_request(a, b)
    request.requested_outputs = [RequestedOutput("OUTPUT1")]
    response = answer(request, server.infer(server.model("add_sub"), request).result(WAIT_S))
    assert [t.name for t in response.outputs] == ["OUTPUT1"]
    np.testing.assert_array_equal(response.outputs[0].data, a - b)
    wait_until(lambda: server.in_flight == 0)


def test_server_infer_on_the_loop_through_a_loop_waiter(server, loop):
    a = np.arange(4, dtype=np.float32)

    async def infer() -> InferenceResponse:
        waiter = LoopWaiter(asyncio.get_running_loop())
        request = add_sub_request(a, a)
        return answer(request, await waiter.wait(server.infer(server.model("add_sub"),
                                                              request)))

    response = on_loop(loop, infer)
    np.testing.assert_array_equal(response.outputs[0].data, a + a)


def test_server_infer_on_loop_answers_a_worker_process_model_by_callback(server, loop):
    """A model whose instances run in worker processes answers on the loop without a
    future, with what ``infer``'s future would carry, and the same bookkeeping."""
    a = np.arange(4, dtype=np.float32)
    model = server.model("add_sub")
    stats = model.stats
    before = (stats.inference_count, stats.execution_count, stats.success.count)
    answered: list[tuple[int, InferenceResponse]] = []

    async def infer() -> Any:
        request = add_sub_request(a, a)
        request.requested_outputs = [RequestedOutput("OUTPUT0")]
        future = server.infer_on_loop(model, request, lambda response: answered.append(
            (threading.get_ident(), answer(request, response))))
        return future, request, threading.get_ident()

    future, request, loop_thread = on_loop(loop, infer)
    assert future is None
    wait_until(lambda: answered)
    thread, response = answered[0]
    assert thread == loop_thread
    assert [t.name for t in response.outputs] == ["OUTPUT0"]
    np.testing.assert_array_equal(response.outputs[0].data, a + a)
    assert request.durations is not None and all(d >= 0 for d in request.durations)
    wait_until(lambda: server.in_flight == 0)
    after = (stats.inference_count, stats.execution_count, stats.success.count)
    assert after == tuple(n + 1 for n in before)
    assert model.gate.inside == 0  # it left its version's gate: the version may retire


def test_a_callback_that_raises_is_logged_and_the_request_still_leaves(server, loop, caplog):
    """As a future's done-callback that raises: logged, and the server's count and the
    version's gate are not left holding the request."""
    a = np.ones(4, np.float32)
    model = server.model("add_sub")

    def broken(response: InferenceResponse) -> None:
        raise RuntimeError("the frontend's callback failed")

    async def infer() -> Any:
        return server.infer_on_loop(model, add_sub_request(a, a), broken)

    assert on_loop(loop, infer) is None
    wait_until(lambda: "answering a request of model 'add_sub' failed" in caplog.text)
    wait_until(lambda: server.in_flight == 0)
    assert model.gate.inside == 0


class Remote(ModelInstance):
    """An instance in "another process": it answers from a thread of its own."""

    asynchronous = True

    def execute(self, requests):  # pragma: no cover - never called for an async instance
        raise AssertionError("execute on an asynchronous instance")

    def execute_async(self, requests, done) -> None:
        threading.Thread(target=done, args=([InferenceResponse() for _ in requests],)).start()


def test_the_default_schedulers_callback_answers_even_when_its_bookkeeping_fails(loop,
                                                                                monkeypatch):
    worker = worker_with(Remote(), loop)
    scheduler = DefaultScheduler(context("max_batch_size: 0", [worker]))
    answered: list[InferenceResponse] = []
    try:
        assert scheduler.answers_on_loop
        assert scheduler.submit_on_loop(one_row(), answered.append)
        wait_until(lambda: answered)
        assert answered[0].error is None
        monkeypatch.setattr(scheduler, "_finished", lambda request, execution: 1 / 0)
        assert scheduler.submit_on_loop(one_row(), answered.append)
        wait_until(lambda: len(answered) == 2)
        error = answered[1].error
        assert error is not None and error.status is Status.INTERNAL
        assert "model 'm': internal error: ZeroDivisionError" in error.message
    finally:
        worker.stop()


def test_only_a_default_scheduler_over_worker_processes_answers_on_the_loop(loop):
    """The server asks for the callback way only where it can be taken: a model whose
    instances run on threads pays nothing for it."""
    remote, threaded = worker_with(Remote(), loop), worker_with(Doubling(), loop, "m_1")
    try:
        assert DefaultScheduler(context("max_batch_size: 0", [remote])).answers_on_loop
        mixed = DefaultScheduler(context("max_batch_size: 0", [remote, threaded]))
        assert not mixed.answers_on_loop
        assert not DefaultScheduler(context("max_batch_size: 0", [])).answers_on_loop
        for scheduler in (DynamicBatcher, SequenceBatcher, EnsembleScheduler):
            assert scheduler.answers_on_loop is False, scheduler
    finally:
        remote.stop()
        threaded.stop()


def test_server_infer_on_loop_refuses_a_bad_request_as_infer_does(server, loop):
    request = InferenceRequest("add_sub", 1, {"INPUT0": Tensor(
        "INPUT0", "FP32", (4,), np.zeros(4, np.float32))})
    answered: list[InferenceResponse] = []

    async def infer() -> Any:
        return server.infer_on_loop(server.model("add_sub"), request, answered.append)

    with pytest.raises(InferenceServerError) as info:
        on_loop(loop, infer)
    assert info.value.status is Status.INVALID_ARG and "INPUT1" in info.value.message
    assert server.in_flight == 0 and not answered


def test_server_infer_on_loop_gives_the_future_where_the_scheduler_takes_no_callback(
        server, loop, monkeypatch):
    """A scheduler without the callback way (every one but the default, and the default
    over instances on threads) gets the request through ``submit``: the caller waits on
    the future it gets back, and the callback is never called."""
    model = server.model("add_sub")
    monkeypatch.setattr(model.scheduler, "submit_on_loop", lambda request, answer: False)
    a = np.ones(4, np.float32)
    answered: list[InferenceResponse] = []

    async def infer() -> Any:
        return server.infer_on_loop(model, add_sub_request(a, a), answered.append)

    future = on_loop(loop, infer)
    assert isinstance(future, Future)
    np.testing.assert_array_equal(future.result(WAIT_S).outputs[0].data, a + a)
    wait_until(lambda: server.in_flight == 0)
    assert not answered


def test_server_infer_checks_the_request_first(server):
    request = InferenceRequest("add_sub", 1, {"INPUT0": Tensor(
        "INPUT0", "FP32", (4,), np.zeros(4, np.float32))})
    with pytest.raises(InferenceServerError) as info:
        server.infer(server.model("add_sub"), request)
    assert info.value.status is Status.INVALID_ARG
    assert "INPUT1" in info.value.message
    assert server.in_flight == 0


def test_shutdown_waits_for_a_request_in_flight_on_a_frontend_thread(server, loop):
    x = np.arange(3, dtype=np.float32)
    request = InferenceRequest("slow", 1, {"INPUT0": Tensor("INPUT0", "FP32", (3,), x)})
    add_sub = server.model("add_sub")  # a frontend thread may hold it across the shutdown
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(lambda: server.infer(server.model("slow"), request).result())
        wait_until(lambda: server.in_flight == 1)
        on_loop(loop, lambda: server.shutdown(WAIT_S))  # returns once the request is done
        assert pending.done()
        np.testing.assert_array_equal(pending.result().outputs[0].data, x)
    with pytest.raises(InferenceServerError) as info:
        server.infer(add_sub, add_sub_request(x[:1], x[:1]))
    assert info.value.status is Status.UNAVAILABLE
    assert "shutting down" in info.value.message
