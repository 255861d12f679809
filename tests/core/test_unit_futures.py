"""naiad.futures: the future naiad makes (LightFuture, which must behave exactly as
concurrent.futures.Future), the queued request's future (Withdrawable) and the event loop's
adapter (LoopWaiter)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Iterator
from concurrent.futures import CancelledError, Future, InvalidStateError
from typing import Any

import pytest

from naiad.errors import InferenceServerError, Status
from naiad.futures import LightFuture, LoopWaiter, Withdrawable

WAIT_S = 10.0


# --- LightFuture: concurrent.futures.Future's behaviour, cheaper ----------------------------


@pytest.fixture(params=[Future, LightFuture], ids=["Future", "LightFuture"])
def make(request: pytest.FixtureRequest) -> type[Future[Any]]:
    """Each behaviour is checked on the standard Future too, so the two cannot drift."""
    return request.param


def finish_later(fn: Any, *args: Any, delay_s: float = 0.05) -> threading.Thread:
    def run() -> None:
        time.sleep(delay_s)
        fn(*args)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_result_waits_for_another_thread_and_wakes_every_waiter(make):
    future = make()
    got: list[int] = []
    waiters = [threading.Thread(target=lambda: got.append(future.result(WAIT_S)))
               for _ in range(4)]
    for waiter in waiters:
        waiter.start()
    finish_later(future.set_result, 7).join(WAIT_S)
    for waiter in waiters:
        waiter.join(WAIT_S)
    assert got == [7, 7, 7, 7]
    assert future.done() and not future.running() and not future.cancelled()
    assert future.result() == 7 and future.exception() is None


def test_an_exception_is_raised_by_result_and_returned_by_exception(make):
    future = make()
    finish_later(future.set_exception, ValueError("broken"))
    with pytest.raises(ValueError, match="broken"):
        future.result(WAIT_S)
    assert isinstance(future.exception(0), ValueError)


def test_result_times_out_then_still_completes(make):
    future = make()
    with pytest.raises(concurrent.futures.TimeoutError):
        future.result(0.01)
    with pytest.raises(concurrent.futures.TimeoutError):
        future.exception(0)
    future.set_result(1)
    assert future.result(0) == 1


def test_cancel_wakes_a_waiter_and_only_a_waiting_future_cancels(make):
    future = make()
    finish_later(future.cancel)
    with pytest.raises(CancelledError):
        future.result(WAIT_S)
    with pytest.raises(CancelledError):
        future.exception(WAIT_S)
    assert future.cancelled() and future.cancel()  # cancelling again says True
    assert not future.set_running_or_notify_cancel()
    running = make()
    assert running.set_running_or_notify_cancel()
    assert running.running() and not running.cancel()
    with pytest.raises(RuntimeError):
        running.set_running_or_notify_cancel()
    running.set_result(None)
    assert not running.cancel()


def test_a_future_made_running_cannot_be_cancelled():
    future: LightFuture[int] = LightFuture(running=True)
    assert future.running() and not future.cancel()
    future.set_result(2)
    assert future.result(0) == 2


def test_a_future_is_completed_once(make):
    future = make()
    future.set_result(1)
    with pytest.raises(InvalidStateError):
        future.set_result(2)
    with pytest.raises(InvalidStateError):
        future.set_exception(ValueError())
    cancelled = make()
    cancelled.cancel()
    with pytest.raises(InvalidStateError):
        cancelled.set_result(1)


def test_callbacks_run_in_order_once_and_at_once_when_done(make, caplog):
    future = make()
    calls: list[str] = []
    future.add_done_callback(lambda f: calls.append(f"a{f.result()}"))
    future.add_done_callback(lambda f: 1 / 0)  # logged, and the others still run
    future.add_done_callback(lambda f: calls.append(f"b{f.result()}"))
    with caplog.at_level(logging.ERROR, logger="concurrent.futures"):
        future.set_result(3)
    assert calls == ["a3", "b3"]
    assert "exception calling callback" in caplog.text
    future.add_done_callback(lambda f: calls.append("late"))
    assert calls == ["a3", "b3", "late"]
    cancelled = make()
    cancelled.add_done_callback(lambda f: calls.append(f"cancelled {f.cancelled()}"))
    cancelled.cancel()
    assert calls[-1] == "cancelled True"


def test_wait_and_as_completed_see_it(make):
    futures = [make() for _ in range(3)]
    finish_later(futures[1].set_result, 1)
    done, not_done = concurrent.futures.wait(futures, WAIT_S,
                                             concurrent.futures.FIRST_COMPLETED)
    assert done == {futures[1]} and len(not_done) == 2
    futures[0].set_exception(ValueError())
    running = futures[2]
    running.set_running_or_notify_cancel()
    finish_later(running.set_result, 2)
    assert set(concurrent.futures.as_completed(futures, WAIT_S)) == set(futures)


def test_asyncio_awaits_it_and_cancels_it(make):
    async def run() -> None:
        future = make()
        finish_later(future.set_result, 5)
        assert await asyncio.wrap_future(future) == 5
        queued = make()
        wrapped = asyncio.wrap_future(queued)
        wrapped.cancel()
        await asyncio.sleep(0.01)
        assert queued.cancelled()

    asyncio.run(run())


# --- Withdrawable -----------------------------------------------------------------------


def test_cancelling_a_waiting_future_withdraws_it():
    withdrawn: list[Withdrawable[int]] = []
    future: Withdrawable[int] = Withdrawable(withdrawn.append)
    assert future.cancel()
    assert future.cancelled()
    assert withdrawn == [future]
    with pytest.raises(CancelledError):
        future.result(0)


def test_a_running_future_is_neither_cancelled_nor_withdrawn():
    withdrawn: list[Withdrawable[int]] = []
    future: Withdrawable[int] = Withdrawable(withdrawn.append)
    assert future.set_running_or_notify_cancel()
    assert not future.cancel()
    future.set_result(7)
    assert not future.cancel()
    assert withdrawn == []
    assert future.result(0) == 7


def test_set_running_after_cancel_says_the_request_must_not_run():
    future: Withdrawable[int] = Withdrawable(lambda _: None)
    assert future.cancel()
    assert not future.set_running_or_notify_cancel()


# --- LoopWaiter -------------------------------------------------------------------------


class CountingLoop(asyncio.SelectorEventLoop):
    """A plain asyncio loop that counts its wake-ups from other threads."""

    def __init__(self) -> None:
        super().__init__()
        self.wakeups = 0

    def call_soon_threadsafe(self, *args: Any, **kwargs: Any) -> Any:
        self.wakeups += 1
        return super().call_soon_threadsafe(*args, **kwargs)


@pytest.fixture
def loop() -> Iterator[CountingLoop]:
    loop = CountingLoop()
    yield loop
    loop.close()


def test_a_result_an_exception_and_a_cancellation_are_handed_over(loop):
    async def run() -> list[Any]:
        waiter = LoopWaiter(loop)
        futures: list[Future[Any]] = [Future(), Future(), Future()]
        waiting = [waiter.wait(f) for f in futures]

        def finish() -> None:
            futures[0].set_result("ok")
            futures[1].set_exception(InferenceServerError("no", Status.UNAVAILABLE))
            futures[2].cancel()

        threading.Thread(target=finish).start()
        return await asyncio.gather(*waiting, return_exceptions=True)

    result, error, cancelled = loop.run_until_complete(run())
    assert result == "ok"
    assert isinstance(error, InferenceServerError) and error.status is Status.UNAVAILABLE
    assert isinstance(cancelled, asyncio.CancelledError)


def test_futures_finished_together_on_a_thread_wake_the_loop_once(loop):
    async def run() -> list[int]:
        waiter = LoopWaiter(loop)
        futures: list[Future[int]] = [Future() for _ in range(16)]
        waiting = [waiter.wait(f) for f in futures]
        before = loop.wakeups

        def finish() -> None:  # as an instance thread answering a batch
            for n, future in enumerate(futures):
                future.set_result(n)

        thread = threading.Thread(target=finish)
        thread.start()
        thread.join(WAIT_S)  # the loop is not running: nothing is delivered yet
        results = await asyncio.gather(*waiting)
        assert loop.wakeups - before == 1
        return results

    assert loop.run_until_complete(run()) == list(range(16))


def test_a_future_finished_on_the_loop_needs_no_wake_up(loop):
    async def run() -> int:
        waiter = LoopWaiter(loop)
        future: Future[int] = Future()
        waiting = waiter.wait(future)
        before = loop.wakeups
        future.set_result(5)
        assert waiting.done()  # at once, on this thread
        assert loop.wakeups == before
        return await waiting

    assert loop.run_until_complete(run()) == 5


def test_an_abandoned_wait_ignores_the_result(loop):
    async def run() -> None:
        waiter = LoopWaiter(loop)
        future: Future[int] = Future()
        waiting = waiter.wait(future)
        waiting.cancel()  # whoever awaited it went away
        future.set_result(1)
        await asyncio.sleep(0)
        assert waiting.cancelled()
        assert not future.cancelled()  # the request itself is not cancelled by that

    loop.run_until_complete(run())


def test_a_closed_loop_is_not_woken(loop):
    waiter = LoopWaiter(loop)
    future: Future[int] = Future()

    async def wait() -> None:
        waiter.wait(future)

    loop.run_until_complete(wait())
    loop.close()
    future.set_result(1)  # from this thread: must not raise
