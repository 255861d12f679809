"""naiad.scheduling.worker: one thread per model instance, and the one call that feeds it.

Real threads and futures, a tiny in-test instance: where each call runs, what a failing
backend turns into, cancellation before a batch starts, an asynchronous instance, and what
an unloading instance answers."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import pytest

from naiad.errors import InferenceServerError, Status
from naiad.scheduling.worker import Execution, InstanceWorker
from naiad.types import InferenceRequest, InferenceResponse, InstanceInfo, ModelInstance

WAIT_S = 10


class Recording(ModelInstance):
    """Answers each request with an empty response; remembers the threads it ran on."""

    def __init__(self, answer: Callable[[Sequence[InferenceRequest]], list] | None = None,
                 gate: threading.Event | None = None) -> None:
        self.threads: list[str] = [threading.current_thread().name]
        self.answer = answer or (lambda requests: [InferenceResponse() for _ in requests])
        self.gate = gate
        self.closed_on = ""

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        self.threads.append(threading.current_thread().name)
        if self.gate is not None:
            assert self.gate.wait(WAIT_S)
        return self.answer(requests)

    def close(self) -> None:
        self.closed_on = threading.current_thread().name


def requests(count: int) -> list[InferenceRequest]:
    return [InferenceRequest("m", 1, {}, id=str(i)) for i in range(count)]


async def started(instance: ModelInstance) -> InstanceWorker:
    worker = InstanceWorker(InstanceInfo("m_0", "KIND_CPU", 0, 0), "m")
    await worker.load(lambda: instance)
    return worker


async def test_every_call_runs_on_the_instance_thread():
    worker = InstanceWorker(InstanceInfo("m_0", "KIND_CPU", 0, 0), "m")
    await worker.load(Recording)  # created on the instance thread too
    instance = worker.instance
    assert isinstance(instance, Recording)
    try:
        execution = worker.submit(requests(3)).result(WAIT_S)
        assert isinstance(execution, Execution) and not execution.failed
        assert len(execution.responses) == 3 and execution.start_ns <= execution.end_ns
        assert worker.submit(requests(2), lambda e: len(e.responses)).result(WAIT_S) == 2
    finally:
        worker.stop()
    assert instance.threads == ["naiad-m_0"] * 3
    assert instance.closed_on == "naiad-m_0"


@pytest.mark.parametrize(("raised", "status", "words"), [
    (RuntimeError("boom"), Status.INTERNAL, "model 'm' instance 'm_0' failed: RuntimeError: boom"),
    (InferenceServerError("bad input", Status.INVALID_ARG), Status.INVALID_ARG, "bad input"),
])
async def test_a_backend_that_raises_fails_every_request_of_the_batch(raised, status, words):
    def answer(batch):
        raise raised

    worker = await started(Recording(answer))
    try:
        execution = worker.submit(requests(2)).result(WAIT_S)
    finally:
        worker.stop()
    assert execution.failed
    assert [r.error.status for r in execution.responses] == [status, status]
    assert words in execution.responses[0].error.message


async def test_a_wrong_number_of_responses_is_an_internal_error():
    worker = await started(Recording(lambda batch: [InferenceResponse()]))
    try:
        execution = worker.submit(requests(3)).result(WAIT_S)
    finally:
        worker.stop()
    assert execution.failed and len(execution.responses) == 3
    assert "returned 1 responses for 3 requests" in execution.responses[0].error.message


async def test_a_batch_cancelled_before_it_starts_never_runs():
    gate = threading.Event()
    seen: list[str] = []
    worker = await started(Recording(lambda batch: seen.extend(r.id for r in batch)
                                     or [InferenceResponse() for _ in batch], gate))
    try:
        first = worker.submit(requests(1))
        second = worker.submit([InferenceRequest("m", 1, {}, id="second")])
        assert worker.busy == 2
        assert second.cancel() is True
        gate.set()
        assert not first.result(WAIT_S).failed
    finally:
        worker.stop()
    assert seen == ["0"]


async def test_an_unloading_instance_refuses_new_batches():
    worker = await started(Recording())
    worker.stop()
    execution = worker.submit(requests(2)).result(WAIT_S)
    assert execution.failed
    assert execution.responses[0].error.status is Status.UNAVAILABLE
    assert "model 'm' instance 'm_0' is unloading" in execution.responses[0].error.message


class Elsewhere(ModelInstance):
    """An asynchronous instance: batches go out from the submitting thread."""

    asynchronous = True

    def __init__(self) -> None:
        self.sent_from: list[str] = []
        self.pending: list[Callable] = []

    def execute(self, requests):  # pragma: no cover - never called for an async instance
        raise AssertionError("execute on an asynchronous instance")

    def execute_async(self, requests, done) -> None:
        self.sent_from.append(threading.current_thread().name)
        self.pending.append(lambda: done([InferenceResponse() for _ in requests]))


async def test_an_asynchronous_instance_gets_batches_from_the_submitting_thread():
    instance = Elsewhere()
    worker = await started(instance)
    try:
        future = worker.submit(requests(2))
        assert instance.sent_from == [threading.current_thread().name]
        assert worker.busy == 1 and not future.done()
        instance.pending.pop()()
        assert not future.result(WAIT_S).failed and worker.busy == 0
    finally:
        worker.stop()


async def test_run_elsewhere_sends_at_once_and_answers_from_the_reading_thread():
    instance = Elsewhere()
    worker = await started(instance)
    got: list[Execution] = []
    try:
        assert worker.run_elsewhere(requests(2), got.append)
        assert instance.sent_from == [threading.current_thread().name]
        assert worker.busy == 1 and not got
        reader = threading.Thread(target=instance.pending.pop(), name="reader")
        reader.start()
        reader.join(WAIT_S)
        assert len(got) == 1 and not got[0].failed and len(got[0].responses) == 2
        assert got[0].start_ns <= got[0].end_ns and worker.busy == 0
    finally:
        worker.stop()


async def test_run_elsewhere_turns_a_failed_batch_into_error_responses():
    instance = Elsewhere()
    worker = await started(instance)
    got: list[Execution] = []
    try:
        instance.execute_async = lambda requests, done: done(  # type: ignore[method-assign]
            InferenceServerError("worker gone", Status.UNAVAILABLE))
        assert worker.run_elsewhere(requests(2), got.append)
        assert got[0].responses[1].error.message == "worker gone" and worker.busy == 0

        def broken(requests, done):
            raise RuntimeError("backend bug")

        instance.execute_async = broken  # type: ignore[method-assign]
        assert worker.run_elsewhere(requests(1), got.append)
        assert got[1].failed and got[1].responses[0].error.status is Status.INTERNAL
        assert "RuntimeError: backend bug" in got[1].responses[0].error.message
        assert worker.busy == 0
    finally:
        worker.stop()


async def test_run_elsewhere_refuses_only_for_a_closing_instance():
    instance = Elsewhere()
    worker = await started(instance)
    worker.stop()
    got: list[Execution] = []
    # After stop the instance is gone: nothing is done, the caller takes the future way,
    # which refuses (test_a_stopped_worker_lets_go_of_its_instance).
    assert not worker.run_elsewhere(requests(1), got.append) and not got
    closing = Elsewhere()
    worker = await started(closing)
    worker._closed = True  # closing: the instance is still there, batches are refused
    try:
        assert worker.run_elsewhere(requests(1), got.append)
        assert got[0].failed and got[0].responses[0].error.status is Status.UNAVAILABLE
        assert closing.sent_from == [] and worker.busy == 0
    finally:
        worker._closed = False
        worker.stop()


async def test_run_elsewhere_leaves_an_instance_of_its_thread_to_submit():
    worker = await started(Recording())
    got: list[Execution] = []
    try:
        assert not worker.run_elsewhere(requests(1), got.append)
        assert not got and worker.busy == 0
    finally:
        worker.stop()


async def test_a_stopped_worker_lets_go_of_its_instance():
    """The unloaded model's objects must not live on through the worker: a thread-pool work
    item or a retired version may keep the worker a moment longer, and a heap settled then
    would freeze the model with it (tests/core/test_unit_heap.py)."""
    instance = Recording()
    worker = await started(instance)
    worker.stop()
    assert instance.closed_on == "naiad-m_0"
    assert worker.instance is None
    refused = worker.submit(requests(1)).result(WAIT_S)  # and it still answers, refusing
    assert refused.failed and refused.responses[0].error.status == Status.UNAVAILABLE
