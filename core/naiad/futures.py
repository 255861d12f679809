"""The futures of naiad's one concurrency contract, and how the event loop waits for them.

Every request a scheduler accepts is answered through a :class:`concurrent.futures.Future`,
and so is every batch an instance worker runs. Whoever completes one (an instance thread, a
gRPC thread, the event loop) runs its done-callbacks there and then, so schedulers chain
work with callbacks and never need a thread or the loop to wait. The frontends adapt at
their edge: a gRPC handler thread waits on ``future.result()``, the HTTP event loop awaits
:meth:`LoopWaiter.wait`. The one exception: a request the event loop sends to a model in a
worker process, whose answer the loop itself reads, gets no future
(``InferenceServer.infer_on_loop``; ``docs/design.md``, "Requests without a future").

- :class:`LightFuture`: the future naiad makes, a ``concurrent.futures.Future`` that waits
  on plain locks instead of a Condition (measured below).
- :class:`Withdrawable`: the future of a request a scheduler holds in a queue. ``cancel()``
  also tells the scheduler, which takes the request out of its queue; the scheduler marks
  the future running (``set_running_or_notify_cancel``) when it hands the request to an
  instance, so ``cancel()`` returns True exactly when the request will never run.
- :class:`LoopWaiter`: awaits futures on one event loop. ``asyncio.wrap_future`` costs a
  ``call_soon_threadsafe`` per future and a chain of callbacks both ways; here results
  that finish close together (the requests of one batch, an instance working through its
  queue) reach the loop in one wake-up, and a future completed on the loop itself is handed
  over at once.

Measured with ``benchmarks/stage_costs.py`` (``benchmarks/README.md``, "One concurrency
contract"): with the standard ``Future`` a request cost 7-9 µs more than through the entry
points this contract replaced (a lock per waiting thread, results coalesced by the worker);
a bare ``Future`` round trip to another thread and back costs 25 µs on one core against 16
µs for :class:`LightFuture`.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import CancelledError, Future, InvalidStateError, TimeoutError
from concurrent.futures._base import (
    CANCELLED,
    CANCELLED_AND_NOTIFIED,
    FINISHED,
    LOGGER,
    PENDING,
    RUNNING,
)
from functools import partial
from typing import Any, TypeVar

T = TypeVar("T")

_CANCELLED = (CANCELLED, CANCELLED_AND_NOTIFIED)
_DONE = (CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED)


class LightFuture(Future[T]):
    """A :class:`concurrent.futures.Future` that is cheaper to make and to wait for.

    It behaves as its base class in every respect (callbacks, ``cancel``, ``result`` with a
    timeout, ``concurrent.futures.wait`` and ``as_completed``, ``asyncio.wrap_future``);
    only the locking differs. The base class makes a Condition over an RLock per future,
    and a thread woken in ``result()`` must take that RLock back, often while the finisher
    still holds it, so it sleeps a second time. Here a plain lock guards the state (stored
    where the base class keeps its Condition, which ``wait`` and ``as_completed`` take),
    the done checks read the state without it (one attribute read, atomic under the GIL),
    and a thread that must wait sleeps on a second lock, made only then, which the
    finisher releases once, after the done-callbacks, and each woken thread passes on.
    """

    def __init__(self, running: bool = False) -> None:
        """``running``: the work has begun already, so ``cancel()`` returns False (the
        future of a request that nothing holds back)."""
        # The base class's attributes, with a plain lock where it keeps its Condition.
        self._condition = threading.Lock()  # type: ignore[assignment]
        self._state = RUNNING if running else PENDING
        self._result: T | None = None
        self._exception: BaseException | None = None
        self._waiters: list[Any] = []
        self._done_callbacks: list[Callable[[Future[T]], object]] = []
        self._woken: threading.Lock | None = None  # held until done, while threads sleep

    def cancelled(self) -> bool:
        return self._state in _CANCELLED

    def running(self) -> bool:
        return self._state == RUNNING

    def done(self) -> bool:
        return self._state in _DONE

    def cancel(self) -> bool:
        with self._condition:
            state = self._state
            if state in (RUNNING, FINISHED):
                return False
            if state in _CANCELLED:
                return True
            self._state = CANCELLED
        self._call_back()
        self._wake()
        return True

    def result(self, timeout: float | None = None) -> T:
        if self._state != FINISHED:
            self._sleep(timeout)
        exception = self._exception
        if exception is not None:
            try:
                raise exception
            finally:
                del self, exception  # the traceback must not keep this future alive
        return self._result  # type: ignore[return-value]

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if self._state != FINISHED:
            self._sleep(timeout)
        return self._exception

    # The lock is taken with acquire() and release() in try/finally rather than ``with``:
    # half the cost (70 against 155 ns), and these run several times per request.

    def add_done_callback(self, fn: Callable[[Future[T]], object]) -> None:
        lock = self._condition
        lock.acquire()
        try:
            if self._state not in _DONE:
                self._done_callbacks.append(fn)
                return
        finally:
            lock.release()
        try:
            fn(self)
        except Exception:
            LOGGER.exception("exception calling callback for %r", self)

    def set_running_or_notify_cancel(self) -> bool:
        lock = self._condition
        lock.acquire()
        try:
            state = self._state
            if state == PENDING:
                self._state = RUNNING
                return True
            if state == CANCELLED:
                self._state = CANCELLED_AND_NOTIFIED
                for waiter in self._waiters:
                    waiter.add_cancelled(self)
                return False
        finally:
            lock.release()
        raise RuntimeError(f"Future in unexpected state: {state}")

    def set_result(self, result: T) -> None:
        lock = self._condition
        lock.acquire()
        try:
            done_already = self._state in _DONE
            if not done_already:
                self._result = result
                self._state = FINISHED
                for waiter in self._waiters:
                    waiter.add_result(self)
        finally:
            lock.release()
        if done_already:  # raised outside the lock: repr() takes it
            raise InvalidStateError(f"{self._state}: {self!r}")
        if self._done_callbacks:
            self._call_back()
        self._wake()

    def set_exception(self, exception: BaseException | None) -> None:
        lock = self._condition
        lock.acquire()
        try:
            done_already = self._state in _DONE
            if not done_already:
                self._exception = exception
                self._state = FINISHED
                for waiter in self._waiters:
                    waiter.add_exception(self)
        finally:
            lock.release()
        if done_already:
            raise InvalidStateError(f"{self._state}: {self!r}")
        if self._done_callbacks:
            self._call_back()
        self._wake()

    def _call_back(self) -> None:
        """Run the done-callbacks, once (the future is done: later ones run at once)."""
        callbacks, self._done_callbacks = self._done_callbacks, []
        for callback in callbacks:
            try:
                callback(self)
            except Exception:  # as the base class: one broken callback stops nothing
                LOGGER.exception("exception calling callback for %r", self)

    def _wake(self) -> None:
        """Wake the threads sleeping in result() or exception(), last of all: a thread
        woken while this one still holds the GIL would only wait for it again (two more
        context switches per request on a busy core)."""
        woken = self._woken
        if woken is not None:
            woken.release()

    def _sleep(self, timeout: float | None) -> None:
        """Return once the future is done; CancelledError when it was cancelled,
        TimeoutError when ``timeout`` seconds pass first."""
        woken = None
        lock = self._condition
        lock.acquire()
        try:
            if self._state not in _DONE:
                woken = self._woken
                if woken is None:
                    woken = self._woken = threading.Lock()
                    woken.acquire()
        finally:
            lock.release()
        if woken is not None:
            if not woken.acquire(True, -1 if timeout is None else max(timeout, 0)):
                raise TimeoutError()
            woken.release()  # for the next thread sleeping here
        if self._state in _CANCELLED:
            raise CancelledError()


class Withdrawable(LightFuture[T]):
    """A queued request's future: ``cancel()`` while it waits also calls ``withdraw(self)``,
    which must take the request out of its scheduler's queue (it may be called more than
    once, and from any thread). Once the scheduler has called
    ``set_running_or_notify_cancel()`` the request runs and ``cancel()`` returns False."""

    def __init__(self, withdraw: Callable[[Any], object]) -> None:
        super().__init__()
        self._withdraw = withdraw

    def cancel(self) -> bool:
        if not super().cancel():
            return False
        self._withdraw(self)
        return True


class LoopWaiter:
    """Runs what waits for concurrent futures on ``loop``, waking the loop once for futures
    that finish close together. Create it on the loop; call :meth:`wait` and
    :meth:`when_done` on the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        # Finishers on this thread are on the loop: asking asyncio for the running loop
        # costs a getpid() system call (it guards against forks).
        self._loop_thread = threading.get_ident()
        # Finished futures waiting for the loop, with what to call for each, appended by any
        # thread. A deque and a flag suffice under the GIL: a finisher that sees the flag
        # set has appended before the pending delivery empties the deque; one that sees it
        # clear schedules another.
        self._ready: deque[tuple[Callable[[Future[Any]], object], Future[Any]]] = deque()
        self._wake_pending = False

    def wait(self, future: Future[T]) -> asyncio.Future[T]:
        """An asyncio future of this loop that ends as ``future`` does: same result, same
        exception, cancelled when it is. Cancelling the asyncio future does not cancel
        ``future``: call ``future.cancel()`` for that."""
        waiter: asyncio.Future[T] = self.loop.create_future()
        self.when_done(future, partial(_hand_over, waiter))
        return waiter

    def when_done(self, future: Future[T], callback: Callable[[Future[T]], object]) -> None:
        """Call ``callback(future)`` on the loop once ``future`` is done (at once when it is
        done already); the callback must not raise."""
        future.add_done_callback(partial(self._finished, callback))

    def _finished(self, callback: Callable[[Future[Any]], object], future: Future[Any]
                  ) -> None:
        if threading.get_ident() == self._loop_thread:
            callback(future)
            return
        self._ready.append((callback, future))
        if self._wake_pending:
            return
        self._wake_pending = True
        try:
            self.loop.call_soon_threadsafe(self._deliver)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass

    def _deliver(self) -> None:
        self._wake_pending = False
        ready = self._ready
        while ready:
            callback, future = ready.popleft()
            callback(future)


def _hand_over(waiter: asyncio.Future[Any], future: Future[Any]) -> None:
    if waiter.done():  # whoever awaited it went away
        return
    try:
        waiter.set_result(future.result())
    except CancelledError:
        waiter.cancel()
    except BaseException as exc:  # the future's own exception, handed on as it is
        waiter.set_exception(exc)
