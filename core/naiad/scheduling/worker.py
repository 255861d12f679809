"""Instance workers: one thread per model instance, and the one call that feeds it.

A worker owns one :class:`ModelInstance` and the thread it was created on; the instance is
created and closed there, and runs its batches there, so state a framework ties to a thread
stays put and instances run in parallel. An instance that may run on any thread
(``ModelInstance.any_thread``) and whose recent batches were short
(``--loop-execution-max-usecs``) has a batch submitted on the event loop run by the loop
itself, at the end of the loop's round, when its thread has nothing to do: on a
second core the hop to the thread and back (two GIL hand-overs) cost more than such a
batch (``docs/design.md``, "Short batches on the event loop").

:meth:`InstanceWorker.submit` is how every batch reaches an instance, whoever sends it
(a scheduler on the event loop, on a gRPC thread or on another instance's thread, warmup):
it returns a :class:`concurrent.futures.Future` of the :class:`Execution`. The worker
thread completes it and runs its done-callbacks right there, so a scheduler answers its
requests and cuts the next batch on the instance thread without waking anyone else.
:meth:`InstanceWorker.run_elsewhere` is the exception: a batch for an instance in another
process, answered by callback on the thread that reads that process's answers, with no
future (``docs/design.md``, "Requests without a future").

The hop to the thread and back is the largest fixed cost of a request, so it is kept
small: jobs go through a ``SimpleQueue`` (no executor bookkeeping), and a future is the
only thing that waits; how the event loop waits for it cheaply is
:class:`naiad.futures.LoopWaiter`. See ``benchmarks/README.md``, "One concurrency
contract", for what this costs against the four entry points it replaced.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from functools import partial
from typing import Any, NamedTuple, TypeVar, overload

from naiad.errors import InferenceServerError, Status
from naiad.futures import LightFuture
from naiad.types import InferenceRequest, InferenceResponse, InstanceInfo, ModelInstance

log = logging.getLogger("naiad.scheduling")

R = TypeVar("R")

#: ``--loop-execution-max-usecs``: on two cores the hop to an instance's thread and back
#: cost the event loop about as much as an ONNX Runtime run of this length
#: (``docs/design.md``, "Short batches on the event loop").
DEFAULT_LOOP_EXECUTION_MAX_US = 50


class Execution(NamedTuple):
    """What one backend execution produced, and when it ran (perf_counter_ns)."""

    responses: list[InferenceResponse]
    # True when the backend failed the batch as a whole (it raised): as in Triton, the
    # requests count as failures; a response that merely carries an error is a success.
    failed: bool
    start_ns: int
    end_ns: int


def refused_as_cancelled(response: InferenceResponse) -> bool:
    """Whether the instance answered CANCELLED: its client gave up and (a worker process
    checks before the model runs) the request was refused. Counted as a failure for reason
    CANCELED (``ModelStats.record_cancelled``), not as a success carrying an error."""
    error = response.error
    return error is not None and error.status is Status.CANCELLED


class _Batch(NamedTuple):
    """One execution to run; ``future`` gets its :class:`Execution`, or ``then`` of it."""

    future: Future[Any]
    requests: Sequence[InferenceRequest]
    then: Callable[[Execution], Any] | None


class _Call(NamedTuple):
    """A lifecycle call to run on the worker thread (creating, closing the instance)."""

    future: Future[Any]
    fn: Callable[..., Any]
    args: tuple[Any, ...]


_STOP = None


class InstanceWorker:
    """A model instance and its thread. :meth:`submit` a batch from any thread; ``load``
    and ``stop`` begin and end the instance's life."""

    def __init__(self, info: InstanceInfo, model_name: str,
                 loop_execution_max_ns: int = 0) -> None:
        """``loop_execution_max_ns``: a batch may run on the event loop when the instance
        allows it and its recent batches took at most this long (0: never)."""
        self.info = info
        self.model_name = model_name
        self.instance: ModelInstance | None = None
        self.loop_execution_max_ns = loop_execution_max_ns
        self._jobs: queue.SimpleQueue[_Batch | _Call | None] = queue.SimpleQueue()
        # Set (under the lock) when the instance starts closing: later batches are refused,
        # so none can queue behind the close or the end of the thread.
        self._closed = False
        self._closing = threading.Lock()
        # Under _closing: batches queued to the thread and not finished; batches handed to
        # an asynchronous instance and not answered yet; batches held for the event loop
        # and not finished (held ones are in _held, in order).
        self._queued = 0
        self._elsewhere = 0
        self._on_loop = 0
        self._held: deque[_Batch] = deque()
        # The event loop that loaded the instance, and the longest recent run it holds a
        # batch for (-1 until the instance allows it: never).
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = -1
        self._hold_max_ns = -1
        # How long a batch takes, recent runs weighted (ns; None until one ran): it
        # rises to a longer run at once and falls back by an eighth of the gap per run.
        self._run_ns: int | None = None
        # Taken around every call into the instance that may meet another: a batch on the
        # loop, and a lifecycle call (close) on the thread.
        self._calling = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"naiad-{info.name}",
                                        daemon=True)
        self._thread.start()

    @property
    def pending(self) -> int:
        """Jobs submitted and not yet started."""
        return self._jobs.qsize() + len(self._held)

    @property
    def busy(self) -> int:
        """Batches submitted and not yet finished (those running count)."""
        return self._queued + self._elsewhere + self._on_loop

    @overload
    def submit(self, requests: Sequence[InferenceRequest]) -> Future[Execution]: ...

    @overload
    def submit(self, requests: Sequence[InferenceRequest],
               then: Callable[[Execution], R]) -> Future[R]: ...

    def submit(self, requests: Sequence[InferenceRequest],
               then: Callable[[Execution], Any] | None = None) -> Future[Any]:
        """Queue one execution of ``requests`` on the instance. The future gets the
        :class:`Execution` (never an exception), or ``then(execution)`` when ``then`` is
        given: computed on the instance thread before the future completes (its exception,
        if it raises), so a scheduler that answers one request per execution records it
        and picks its response there without a second future. Done-callbacks run on the
        instance thread, between executions: they must be short. ``cancel()`` before the
        execution starts means it never runs. A closing instance answers at once: every
        request fails with UNAVAILABLE (the future is done when it comes back).

        An instance whose model runs in another process (``ModelInstance.asynchronous``)
        gets the batch from the submitting thread at once, with no hop through the
        instance thread; its future completes on the thread that reads the worker's
        answers (the event loop, in the server) and cannot be cancelled once submitted.

        An instance that may run on any thread has a batch submitted on the event loop
        held, and run by the loop at the end of its round, when nothing is queued to its
        thread and its recent batches were short; while batches are held, every batch
        submitted joins them, whichever thread submits it, so batches run one at a time and
        in the order submitted. Its future then completes on the loop."""
        instance = self.instance
        if instance is not None and instance.asynchronous:
            return self._submit_elsewhere(instance, requests, then)
        future: Future[Any] = LightFuture()
        closing = self._closing
        closing.acquire()  # not ``with``: half the cost, on every batch
        try:
            if not self._closed:
                batch = _Batch(future, requests, then)
                if self._on_loop:
                    self._held.append(batch)
                    self._on_loop += 1
                    return future
                run_ns = self._run_ns
                if (not self._queued and run_ns is not None
                        and run_ns <= self._hold_max_ns
                        and threading.get_ident() == self._loop_thread):
                    self._held.append(batch)
                    self._on_loop = 1
                    self._loop.call_soon(self._run_held)  # type: ignore[union-attr]
                    return future
                self._queued += 1
                self._jobs.put(batch)
                return future
        finally:
            closing.release()
        _complete(future, self._refused(requests), then)
        return future

    def run_elsewhere(self, requests: Sequence[InferenceRequest],
                      then: Callable[[Execution], object]) -> bool:
        """:meth:`submit` without a future, for an instance whose model runs in another
        process (``ModelInstance.asynchronous``): the batch goes at once, and
        ``then(execution)`` runs on the thread that reads the worker's answers (the event
        loop, in the server), or on this thread at once when the instance refuses the batch
        (closing). ``then`` must not raise. False, and nothing done, for any other instance:
        those run batches on their thread, so only a future can wait for them."""
        instance = self.instance
        if instance is None or not instance.asynchronous:
            return False
        self._run_elsewhere(instance, requests, then)
        return True

    def _submit_elsewhere(self, instance: ModelInstance, requests: Sequence[InferenceRequest],
                          then: Callable[[Execution], Any] | None) -> Future[Any]:
        future: Future[Any] = LightFuture(running=True)
        self._run_elsewhere(instance, requests, partial(_complete, future, then=then))
        return future

    def _run_elsewhere(self, instance: ModelInstance, requests: Sequence[InferenceRequest],
                       then: Callable[[Execution], object]) -> None:
        closing = self._closing
        closing.acquire()  # not ``with``: half the cost, on every batch
        closed = self._closed
        if not closed:
            self._elsewhere += 1
        closing.release()
        if closed:
            then(self._refused(requests))
            return
        start = time.perf_counter_ns()

        def done(result: list[InferenceResponse] | BaseException) -> None:
            execution = self._execution(requests, result, start)
            closing.acquire()
            self._elsewhere -= 1
            closing.release()
            then(execution)

        try:
            instance.execute_async(requests, done)
        except Exception as exc:  # a backend bug must not take the server down
            done(exc)

    def _refused(self, requests: Sequence[InferenceRequest]) -> Execution:
        error = InferenceServerError(f"model '{self.model_name}' instance '{self.info.name}' "
                                     f"is unloading", Status.UNAVAILABLE)
        now = time.perf_counter_ns()
        return Execution([InferenceResponse(error=error) for _ in requests], True, now, now)

    async def load(self, factory: Callable[[], ModelInstance]) -> None:
        """Create the instance on the worker thread. Its batches may run on this event
        loop from then on, when the instance allows it."""
        instance = await asyncio.wrap_future(self._call(factory))
        if (self.loop_execution_max_ns > 0 and instance.any_thread
                and not instance.asynchronous):
            self._loop = asyncio.get_running_loop()
            self._loop_thread = threading.get_ident()
            self._hold_max_ns = self.loop_execution_max_ns
            log.info("model '%s' instance '%s': batches whose recent runs took at most %d µs "
                     "run on the event loop when the instance's thread is idle "
                     "(--loop-execution-max-usecs)", self.model_name, self.info.name,
                     self.loop_execution_max_ns // 1000)
        self.instance = instance

    def stop(self) -> None:
        """Close the instance (on its thread), then end the thread. Batches queued before
        run first; later ones are refused. Blocks; call it from a thread other than the
        event loop's."""
        with self._closing:
            self._closed = True
        if self.instance is not None:
            try:
                self._call(self.instance.close).result()
            except Exception:
                log.exception("closing instance '%s' of model '%s' failed", self.info.name,
                              self.model_name)
        self._jobs.put(_STOP)
        self._thread.join()
        # The model's objects go with the unload, whatever still holds this worker for a
        # moment (the thread pool's work item that ran this call): a heap settled now must
        # not find them alive and freeze them.
        self.instance = None

    def _call(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        future: Future[Any] = LightFuture()
        self._jobs.put(_Call(future, fn, args))
        return future

    # --- the worker thread --------------------------------------------------------------

    def _run(self) -> None:
        jobs = self._jobs
        closing = self._closing
        while True:
            job = jobs.get()
            if job is _STOP:
                break
            if isinstance(job, _Batch):
                # Callbacks run here, and count as busy; concurrent.futures logs one that
                # raises, and the thread goes on.
                if job.future.set_running_or_notify_cancel():  # not cancelled while queued
                    _complete(job.future, self._execute(job.requests), job.then)
                closing.acquire()
                self._queued -= 1
                closing.release()
                continue
            if not job.future.set_running_or_notify_cancel():
                continue
            try:
                with self._calling:
                    job.future.set_result(job.fn(*job.args))
            except BaseException as exc:
                job.future.set_exception(exc)

    # --- the event loop -----------------------------------------------------------------

    def _run_held(self) -> None:
        """Run the held batches on the event loop, in order, with those held meanwhile."""
        closing = self._closing
        finished = 0
        while True:
            closing.acquire()
            try:
                self._on_loop -= finished
                if not self._held:
                    return
                jobs, self._held = self._held, deque()
            finally:
                closing.release()
            finished = len(jobs)
            try:
                self._run_and_answer(jobs)
            except BaseException as exc:
                # Only an interrupt raised on the loop's thread gets here (KeyboardInterrupt,
                # where an application left Python's SIGINT handler in place): every batch
                # still gets its answer, and those held meanwhile run in the next round.
                now = time.perf_counter_ns()
                for job in jobs:
                    if not job.future.done():
                        _complete(job.future, self._execution(job.requests, exc, now), job.then)
                with closing:
                    self._on_loop -= finished
                    if self._held:
                        self._loop.call_soon(self._run_held)  # type: ignore[union-attr]
                raise

    def _run_and_answer(self, jobs: deque[_Batch]) -> None:
        started = [job for job in jobs if job.future.set_running_or_notify_cancel()]
        # Every batch runs before any is answered: the framework's work back to back, then
        # the loop's, each with its caches warm (a run then an answer, batch by batch,
        # served 15 % less). The lock is only ever held elsewhere by a lifecycle call, and
        # the one that can come now is close: the batches are then refused as a closing
        # instance refuses.
        calling = self._calling
        if calling.acquire(blocking=False):
            try:
                executions = ([self._execute(job.requests) for job in started]
                              if not self._closed
                              else [self._refused(job.requests) for job in started])
            finally:
                calling.release()
        else:
            executions = [self._refused(job.requests) for job in started]
        for job, execution in zip(started, executions, strict=True):
            _complete(job.future, execution, job.then)

    def _execute(self, requests: Sequence[InferenceRequest]) -> Execution:
        """Run a batch. Never raises: a backend that raises fails the whole batch
        (``failed``), one error response per request."""
        start = time.perf_counter_ns()
        result: list[InferenceResponse] | BaseException
        try:
            assert self.instance is not None, "execute before load"
            result = self.instance.execute(requests)
        except Exception as exc:
            result = exc
        execution = self._execution(requests, result, start)
        took = execution.end_ns - start
        run_ns = self._run_ns
        self._run_ns = (took if run_ns is None or took >= run_ns
                        else run_ns - ((run_ns - took) >> 3))
        return execution

    def _execution(self, requests: Sequence[InferenceRequest],
                   result: list[InferenceResponse] | BaseException, start: int) -> Execution:
        """The :class:`Execution` of a batch that started at ``start`` and produced
        ``result``: its responses, or what the backend raised (which fails every request)."""
        failed = True
        if isinstance(result, InferenceServerError):
            responses = [InferenceResponse(error=result) for _ in requests]
        elif isinstance(result, BaseException):  # a backend bug must not take the server down
            error = InferenceServerError(
                f"model '{self.model_name}' instance '{self.info.name}' failed: "
                f"{type(result).__name__}: {result}", Status.INTERNAL)
            responses = [InferenceResponse(error=error) for _ in requests]
        elif len(result) != len(requests):
            error = InferenceServerError(
                f"model '{self.model_name}' returned {len(result)} responses for "
                f"{len(requests)} requests", Status.INTERNAL)
            responses = [InferenceResponse(error=error) for _ in requests]
        else:
            failed = False
            responses = result
        return Execution(responses, failed, start, time.perf_counter_ns())


def _complete(future: Future[Any], execution: Execution,
              then: Callable[[Execution], Any] | None) -> None:
    if then is None:
        future.set_result(execution)
        return
    try:
        value = then(execution)
    except BaseException as exc:  # the future carries it; the thread goes on
        future.set_exception(exc)
    else:
        future.set_result(value)
