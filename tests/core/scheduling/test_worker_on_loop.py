"""naiad.scheduling.worker: short batches of an instance that may run on any thread run on
the event loop (``ModelInstance.any_thread``, ``--loop-execution-max-usecs``).

Real threads, a real event loop and a tiny in-test instance: where each batch runs, when it
goes back to the thread, that batches keep their order and never overlap across the switch,
what a failing backend, a cancelled batch and a closing instance do with batches held for
the loop, and what ``busy`` and ``pending`` count meanwhile."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import pytest

from naiad.errors import Status
from naiad.scheduling.worker import Execution, InstanceWorker
from naiad.types import InferenceRequest, InferenceResponse, InstanceInfo, ModelInstance

WAIT_S = 10
MAX_NS = 5_000_000  # 5 ms: every in-test run but the slow ones is far shorter
THREAD = "naiad-m_0"


class AnyThread(ModelInstance):
    """Records where each batch ran, in order, and whether two ever overlapped. A request
    whose id starts with "slow" takes 20 ms; one whose id is "raise" makes the batch raise."""

    any_thread = True

    def __init__(self) -> None:
        self.ran: list[tuple[str, str]] = []  # (request id, thread name)
        self.running = 0
        self.overlapped = False
        self.closed_while_running = False
        self.closed_on = ""

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        self.running += 1
        self.overlapped |= self.running > 1
        try:
            for request in requests:
                self.ran.append((request.id, threading.current_thread().name))
                if request.id.startswith("slow"):
                    time.sleep(0.02)
                if request.id == "raise":
                    raise RuntimeError("boom")
            time.sleep(0)  # let another thread in, if one could run a batch now
            return [InferenceResponse() for _ in requests]
        finally:
            self.running -= 1

    def close(self) -> None:
        self.closed_while_running = self.running > 0
        self.closed_on = threading.current_thread().name


class ThreadBound(AnyThread):
    any_thread = False


def batch(*ids: str) -> list[InferenceRequest]:
    return [InferenceRequest("m", 1, {}, id=i) for i in ids]


async def loaded(instance: ModelInstance, max_ns: int = MAX_NS) -> InstanceWorker:
    worker = InstanceWorker(InstanceInfo("m_0", "KIND_CPU", 0, 0), "m", max_ns)
    await worker.load(lambda: instance)
    return worker


@asynccontextmanager
async def serving(instance: ModelInstance, max_ns: int = MAX_NS
                  ) -> AsyncIterator[InstanceWorker]:
    """A loaded worker, stopped when the block ends (however it ends)."""
    worker = await loaded(instance, max_ns)
    try:
        yield worker
    finally:
        worker.stop()


async def measured(worker: InstanceWorker) -> None:
    """The first batch runs on the thread: nothing is known of the instance's runs yet."""
    await asyncio.wrap_future(worker.submit(batch("first")))
    await idle(worker)


async def idle(worker: InstanceWorker) -> None:
    """Until the thread is done with its batch: it answers first and counts it done after
    its callbacks, so a batch submitted in between still goes to the thread."""
    for _ in range(WAIT_S * 1000):
        if not worker.busy:
            return
        await asyncio.sleep(0.001)
    raise AssertionError("the instance's thread never finished its batch")


async def test_a_short_batch_submitted_on_the_loop_runs_there_at_the_end_of_its_round():
    instance = AnyThread()
    loop_thread = threading.current_thread().name
    async with serving(instance) as worker:
        await measured(worker)
        future = worker.submit(batch("a", "b"))
        # held, not run inside submit: the loop finishes what it was doing first
        assert not future.done() and worker.busy == 1 and worker.pending == 1
        execution = await asyncio.wrap_future(future)
        assert isinstance(execution, Execution) and not execution.failed
        assert len(execution.responses) == 2 and execution.start_ns <= execution.end_ns
        assert worker.busy == 0 and worker.pending == 0
        # ``then`` runs where the batch ran, on the loop
        where = await asyncio.wrap_future(
            worker.submit(batch("c"), lambda e: threading.current_thread().name))
        assert where == loop_thread
    assert instance.ran == [("first", THREAD), ("a", loop_thread), ("b", loop_thread),
                            ("c", loop_thread)]
    assert instance.closed_on == THREAD  # created and closed on its own thread still


async def test_every_batch_runs_on_the_thread_when_the_instance_or_the_setting_says_so():
    bound = ThreadBound()
    off = AnyThread()
    async with serving(bound) as bound_worker, serving(off, max_ns=0) as off_worker:
        for worker in (bound_worker, off_worker):
            for ids in (("first",), ("a",), ("b",)):
                await asyncio.wrap_future(worker.submit(batch(*ids)))
                await idle(worker)  # as an instance that may would have "a" and "b" held
    assert {thread for _, thread in bound.ran + off.ran} == {THREAD}


async def test_the_loop_runs_every_held_batch_before_it_answers_any():
    """The framework's work back to back, then the loop's: each keeps its caches warm."""
    instance = AnyThread()
    async with serving(instance) as worker:
        await measured(worker)
        seen_when_answered: list[int] = []
        futures = [worker.submit(batch(f"b{n}"), lambda e: seen_when_answered.append(
            len(instance.ran))) for n in range(3)]
        await asyncio.wrap_future(futures[-1])
    assert seen_when_answered == [4, 4, 4]  # "first" and the three held ones


async def test_batches_from_other_threads_go_to_the_instance_thread():
    instance = AnyThread()
    async with serving(instance) as worker:
        await measured(worker)
        from_thread = await asyncio.to_thread(lambda: worker.submit(batch("t")).result(WAIT_S))
        assert not from_thread.failed
    assert instance.ran[-1] == ("t", THREAD)


async def test_a_slow_batch_sends_the_next_ones_to_the_thread_until_runs_are_short_again():
    instance = AnyThread()
    loop_thread = threading.current_thread().name
    async with serving(instance) as worker:
        await measured(worker)
        await asyncio.wrap_future(worker.submit(batch("slow")))  # on the loop: short so far
        await asyncio.wrap_future(worker.submit(batch("after-slow")))
        assert instance.ran[-2:] == [("slow", loop_thread), ("after-slow", THREAD)]
        for n in range(200):  # each short run brings the estimate an eighth of the way back
            await idle(worker)
            await asyncio.wrap_future(worker.submit(batch(f"short-{n}")))
            if instance.ran[-1][1] == loop_thread:
                break
    assert instance.ran[-1][1] == loop_thread
    back = int(instance.ran[-1][0].removeprefix("short-"))
    # 20 ms against 5: (7/8)^n of the gap must fall under a quarter, n >= 11
    assert 10 <= back < 200


async def test_a_batch_that_waits_for_the_thread_is_not_overtaken_by_one_on_the_loop():
    instance = AnyThread()
    async with serving(instance) as worker:
        await measured(worker)
        # the thread runs a slow batch another thread sent: batches submitted on the loop
        # meanwhile queue behind it, in order, though the thread's queue is empty
        slow = await asyncio.to_thread(worker.submit, batch("slow"))
        for _ in range(WAIT_S * 1000):
            if instance.running:
                break
            await asyncio.sleep(0.001)
        assert instance.running and worker.pending == 0
        later = [worker.submit(batch(f"q{n}")) for n in range(3)]
        await asyncio.wrap_future(later[-1])
        assert slow.done() and all(f.done() for f in later)
    assert [i for i, _ in instance.ran[1:]] == ["slow", "q0", "q1", "q2"]
    assert {t for _, t in instance.ran[1:]} == {THREAD}


async def test_while_batches_are_held_every_submission_joins_them_in_order():
    instance = AnyThread()
    loop_thread = threading.current_thread().name
    async with serving(instance) as worker:
        await measured(worker)
        held = worker.submit(batch("held"))
        # another thread submits before the loop's round ends (the loop is blocked here in
        # join): had it gone to the idle thread, it would have run first
        joined: list = []
        other = threading.Thread(target=lambda: joined.append(worker.submit(batch("joined"))))
        other.start()
        other.join(WAIT_S)
        assert worker.busy == 2 and worker.pending == 2
        await asyncio.wrap_future(joined[0])
        assert held.done()
    assert instance.ran[1:] == [("held", loop_thread), ("joined", loop_thread)]


async def test_batches_from_the_loop_and_other_threads_never_run_at_once():
    instance = AnyThread()
    rounds = 300
    async with serving(instance) as worker:
        await measured(worker)

        def from_thread(name: str) -> None:
            for n in range(rounds):
                worker.submit(batch(f"{name}-{n}")).result(WAIT_S)
                time.sleep(0.001)  # leave the instance's thread idle now and then

        threads = [threading.Thread(target=from_thread, args=(f"t{k}",)) for k in range(2)]
        for thread in threads:
            thread.start()
        for n in range(rounds):
            await asyncio.wrap_future(worker.submit(batch(f"loop-{n}")))
        await asyncio.to_thread(lambda: [t.join(WAIT_S) for t in threads])
    assert not instance.overlapped
    places = {t for _, t in instance.ran}
    assert places == {THREAD, threading.current_thread().name}  # both ways were taken
    for source in ("loop", "t0", "t1"):  # each submitter's batches ran in its order
        ids = [i for i, _ in instance.ran if i.startswith(f"{source}-")]
        assert ids == [f"{source}-{n}" for n in range(rounds)]


async def test_a_backend_that_raises_on_the_loop_fails_its_batch_and_the_loop_goes_on():
    instance = AnyThread()
    async with serving(instance) as worker:
        await measured(worker)
        failed = worker.submit(batch("ok", "raise"))
        after = worker.submit(batch("after"))
        execution = await asyncio.wrap_future(failed)
        assert execution.failed
        assert [r.error.status for r in execution.responses] == [Status.INTERNAL] * 2
        assert "model 'm' instance 'm_0' failed: RuntimeError: boom" in (
            execution.responses[0].error.message)
        assert not (await asyncio.wrap_future(after)).failed
        assert worker.busy == 0
        # a ``then`` that raises reaches its own future only
        def then(execution: Execution) -> None:
            raise ValueError("then failed")
        broken = worker.submit(batch("x"), then)
        fine = worker.submit(batch("y"), lambda e: "fine")
        assert await asyncio.wrap_future(fine) == "fine"
        assert isinstance(broken.exception(0), ValueError)


async def test_a_held_batch_cancelled_before_the_round_ends_never_runs():
    instance = AnyThread()
    async with serving(instance) as worker:
        await measured(worker)
        cancelled = worker.submit(batch("cancelled"))
        kept = worker.submit(batch("kept"))
        assert cancelled.cancel() is True
        await asyncio.wrap_future(kept)
        assert worker.busy == 0
    assert [i for i, _ in instance.ran] == ["first", "kept"]


async def test_batches_held_when_the_instance_starts_closing_are_refused():
    instance = AnyThread()
    worker = await loaded(instance)
    await measured(worker)
    held = worker.submit(batch("held"))
    # stop() on the loop's thread, before the round ends: the close runs on the instance's
    # thread, so nothing here needs the loop
    worker.stop()
    execution = await asyncio.wrap_future(held)
    assert execution.failed
    assert execution.responses[0].error.status is Status.UNAVAILABLE
    assert "model 'm' instance 'm_0' is unloading" in execution.responses[0].error.message
    assert [i for i, _ in instance.ran] == ["first"] and worker.busy == 0


async def test_an_instance_closes_only_after_the_batch_running_on_the_loop():
    class ClosedMidRun(AnyThread):
        def execute(self, requests):
            if requests[0].id == "mid":
                # the unload begins while this batch runs on the loop
                stopper = threading.Thread(target=worker.stop)
                stopper.start()
                time.sleep(0.2)  # long enough for a close that did not wait to run
                self.closed_before_end = self.closed_on != ""
                stoppers.append(stopper)
            return super().execute(requests)

    instance = ClosedMidRun()
    stoppers: list[threading.Thread] = []
    worker = await loaded(instance, max_ns=10**9)
    await measured(worker)
    execution = await asyncio.wrap_future(worker.submit(batch("mid")))
    await asyncio.to_thread(stoppers[0].join, WAIT_S)
    assert not execution.failed
    assert instance.closed_before_end is False and not instance.closed_while_running
    assert instance.closed_on == THREAD


async def test_an_interrupt_on_the_loop_still_answers_every_held_batch():
    """A KeyboardInterrupt raised on the loop's thread while a held batch runs (an
    application that left Python's SIGINT handler in place) goes on up, but no batch is left
    unanswered and the instance keeps serving. ``_run_held`` is called here directly: raised
    from a loop callback, the interrupt would end the test session."""

    class Interrupted(AnyThread):
        def execute(self, requests):
            if requests[0].id == "interrupt":
                self.ran.append(("interrupt", threading.current_thread().name))
                raise KeyboardInterrupt
            return super().execute(requests)

    instance = Interrupted()
    async with serving(instance) as worker:
        await measured(worker)
        interrupted = worker.submit(batch("interrupt"))
        after = worker.submit(batch("after"))
        with pytest.raises(KeyboardInterrupt):
            worker._run_held()  # what the loop would run at the end of this round
        for future in (interrupted, after):  # "after" was to run before any answer
            execution = future.result(0)
            assert execution.failed
            assert "failed: KeyboardInterrupt" in execution.responses[0].error.message
        assert worker.busy == 0
        assert not (await asyncio.wrap_future(worker.submit(batch("later")))).failed
    assert [i for i, _ in instance.ran] == ["first", "interrupt", "later"]
