"""The dynamic batcher (``dynamic_batching`` in config.pbtxt), Triton's semantics.

Requests wait in per-priority queues. Whenever an instance is free, the batcher walks the
queues oldest first and cuts a batch, exactly as Triton decides (``batch_policy.py``): a
preferred batch size is sent at once, a batch that cannot grow (``max_batch_size`` reached,
or the next request's shapes differ) is sent at once, anything else waits until its oldest
request has waited ``max_queue_delay_microseconds``. Requests only ever share a batch with
requests whose inputs have the same shapes past the batch dimension.

Batches form by themselves under load: an instance busy with one batch leaves the next
requests queued, and the next cut takes all of them. The batcher never runs model code; it
hands each batch to a free instance's worker thread.

Requests come from any thread (the event loop for HTTP, gRPC handler threads, instance
threads for ensemble steps), so the batcher's state sits behind one lock and no request
needs the loop: each request's future is a :class:`~naiad.scheduling.queues.Waiting`, and
the instance thread that finishes a batch answers its requests and cuts the next batch
itself (completing a future there wakes a waiting gRPC thread at once; the HTTP loop's
futures reach it in one wake-up per batch through :class:`naiad.futures.LoopWaiter`).
Only the ``max_queue_delay_microseconds`` wake-up is a loop timer. Futures are completed
and batches handed to instances after the lock is released, since both run callbacks.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import Future
from functools import partial

from tritonclient.grpc.model_config_pb2 import ModelConfig

from naiad.batching import shape_key
from naiad.errors import InferenceServerError, Status
from naiad.hookspecs import hookimpl
from naiad.metrics.stats import REJECTED
from naiad.scheduling.adaptive import ADAPTIVE_PARAMETER, AdaptiveWait, adaptive_enabled
from naiad.scheduling.base import Scheduler, SchedulerFactory, SchedulingContext
from naiad.scheduling.batch_policy import CutReason, cut_batch
from naiad.scheduling.queues import PriorityQueues, Waiting
from naiad.scheduling.worker import Execution, InstanceWorker, refused_as_cancelled
from naiad.types import InferenceRequest, InferenceResponse

log = logging.getLogger("naiad.scheduling.dynamic")

DRAIN_POLL_S = 0.005
# The loop running on the calling thread, or None (C-fast; no exception when there is none).
_running_loop = asyncio._get_running_loop

Reply = tuple[Waiting, InferenceResponse]
Launch = tuple[InstanceWorker, list[Waiting]]

__all__ = ["ADAPTIVE_PARAMETER", "DynamicBatcher"]


class DynamicBatcher(Scheduler):
    """Merges queued requests of one model version into batches for its instances. Built
    on the server's event loop, which runs its queue-delay timers."""

    holds_requests = True

    def __init__(self, context: SchedulingContext) -> None:
        config = context.config
        batching = config.dynamic_batching
        self.name = context.name
        self.version = context.version
        self.stats = context.stats
        self.max_batch_size = max(config.max_batch_size, 1)
        self.batches_requests = config.max_batch_size > 0
        self.preferred = frozenset(s for s in batching.preferred_batch_size
                                   if 0 < s <= self.max_batch_size)
        self.max_preferred = max(self.preferred, default=self.max_batch_size)
        self.delay_ns = batching.max_queue_delay_microseconds * 1000
        self.preserve_ordering = batching.preserve_ordering
        self.queues = PriorityQueues(context.name, batching)
        self.adaptive = AdaptiveWait(self.delay_ns) if adaptive_enabled(config) else None
        self._loop = asyncio.get_running_loop()
        # Everything below is guarded by _lock. Hold it only for bookkeeping: never while
        # a model runs, never while waiting for anything, never while completing a future.
        self._lock = threading.Lock()
        self._idle: list[InstanceWorker] = list(reversed(context.workers))
        self._executing = 0
        self._next_seq = 0
        # The earliest pending timer wake-up (perf_counter_ns; 0: none). Timers are never
        # cancelled: one that finds nothing due does nothing.
        self._wake_at = 0
        # Made under the lock, carried out after it: batches to hand to instances, answers.
        self._launches: list[Launch] = []
        self._replies: list[Reply] = []
        # preserve_ordering: responses leave in arrival order, whichever batch ends first.
        self._next_to_send = 0
        self._finished: dict[int, Reply] = {}
        self._dropped: set[int] = set()

    # --- the request side ---------------------------------------------------------------

    def submit(self, request: InferenceRequest) -> Future[InferenceResponse]:
        item = Waiting(request, self._withdraw, 0, _rows(request, self.batches_requests),
                       shape_key(request))
        now = item.enqueue_ns = time.perf_counter_ns()
        with self._lock:
            item.seq = self._next_seq
            self.queues.put(item, now)  # raises UNAVAILABLE when the level's queue is full
            self._next_seq += 1
            if self.adaptive is not None:
                self.adaptive.arrived(now)
            if self._idle:
                self._dispatch()
            elif self.queues.next_deadline:
                self._wake(self.queues.next_deadline)
            launches, replies = self._take()
        self._carry_out(launches, replies)
        return item

    def _withdraw(self, item: Waiting) -> None:
        """``item.cancel()`` was called: drop it if it is still queued (it never runs)."""
        with self._lock:
            if not self.queues.discard(item):
                return  # it runs, or has its answer already
            self._drop(item)
            launches, replies = self._take()
        self._carry_out(launches, replies)

    def pending(self) -> int:
        return self.queues.count

    async def drain(self) -> None:
        # Batches finish on instance threads: watch the counts.
        while self.queues.count or self._executing:
            await asyncio.sleep(DRAIN_POLL_S)

    # --- cutting and dispatching batches (under the lock) -----------------------------

    def _dispatch(self) -> None:
        """Cut batches while instances are free and the queues say a batch is due."""
        while self._idle:
            now = time.perf_counter_ns()
            self._reject(self.queues.expire(now))
            candidates = self.queues.candidates(self.max_batch_size + 1)
            if not candidates:
                break
            cut = cut_batch(candidates, self.max_batch_size, self.preferred,
                            self.max_preferred, self.delay_ns, now)
            if cut.wait_until and self.adaptive is not None:
                cut = self.adaptive.decide(cut, now)
            if cut.wait_until:
                self._wake(cut.wait_until)
                break
            batch = candidates[:cut.count]
            if self.adaptive is not None:
                self.adaptive.dispatched(len(batch))
            reason: CutReason | None = cut.reason
            assert reason is not None, "a batch sent now always has its reason"
            self.stats.record_batch_cut(reason.label)
            # Checked per cut (a cached dict lookup), so --log-verbose changed through the
            # logging extension applies at once; nothing is formatted unless it is on.
            if log.isEnabledFor(logging.DEBUG):
                log.debug("model '%s' version %d: batch of %d request(s) (%d rows) cut: %s "
                          "(%s)", self.name, self.version, len(batch),
                          sum(item.rows for item in batch), reason.label, reason.description)
            self._run(batch)
        if self.queues.next_deadline:
            self._wake(self.queues.next_deadline)

    def _run(self, batch: list[Waiting]) -> None:
        self.queues.remove(batch)
        # A request cancelled since it was cut is left out: cancel() returned True for it.
        batch = [item for item in batch if self._claim(item)]
        if batch:
            self._executing += 1
            self._launches.append((self._idle.pop(), batch))

    def _claim(self, item: Waiting) -> bool:
        """Mark a request that left the queue as running (no longer cancellable); False,
        and it is dropped, when its client cancelled it meanwhile."""
        if item.set_running_or_notify_cancel():
            return True
        self._drop(item)
        return False

    def _drop(self, item: Waiting) -> None:
        """``item`` was cancelled before it ran: it never finishes."""
        self.stats.record_cancelled(item.rows, item.request.arrival_ns)
        if self.preserve_ordering:  # it never finishes: later answers must not wait for it
            self._dropped.add(item.seq)
            self._answer_in_order()

    def _wake(self, at_ns: int) -> None:
        """Make sure the timer fires by ``at_ns``."""
        if self._wake_at and self._wake_at <= at_ns:
            return
        self._wake_at = at_ns
        if _running_loop() is self._loop:
            self._arm(at_ns)
        else:
            try:
                self._loop.call_soon_threadsafe(self._arm, at_ns)
            except RuntimeError:  # the loop is closed: the server is gone
                pass

    def _arm(self, at_ns: int) -> None:
        self._loop.call_later(max(at_ns - time.perf_counter_ns(), 0) / 1e9,
                              self._timer_fired, at_ns)

    def _timer_fired(self, at_ns: int) -> None:
        with self._lock:
            if self._wake_at == at_ns:
                self._wake_at = 0
            if self._idle:
                self._dispatch()
            else:  # every instance is busy: only queue timeouts can be due
                self._reject(self.queues.expire(time.perf_counter_ns()))
                if self.queues.next_deadline:
                    self._wake(self.queues.next_deadline)
            launches, replies = self._take()
        self._carry_out(launches, replies)

    def _reject(self, expired: list[Waiting]) -> None:
        for item in expired:
            if not self._claim(item):
                continue
            error = InferenceServerError(
                f"Request timeout expired: model '{self.name}' did not start the request "
                f"within its queue timeout", Status.UNAVAILABLE)
            self._answer(item, InferenceResponse(error=error))
            waited = time.perf_counter_ns() - item.request.arrival_ns
            # as Triton counts a queue policy's timeout: a failure for reason REJECTED
            self.stats.record_request(False, item.rows, waited, 0, 0, 0, 0, REJECTED)

    def _take(self) -> tuple[list[Launch], list[Reply]]:
        """What the lock's holder decided, for it to carry out once it lets go."""
        launches, replies = self._launches, self._replies
        self._launches, self._replies = [], []
        return launches, replies

    # --- after the lock -----------------------------------------------------------------

    def _carry_out(self, launches: list[Launch], replies: list[Reply]) -> None:
        """Hand batches to their instances, then complete the answered futures."""
        index = 0
        while index < len(launches):
            worker, batch = launches[index]
            index += 1
            done = worker.submit([item.request for item in batch])
            if not done.done():
                done.add_done_callback(partial(self._finished_batch, worker, batch))
                continue
            # Refused at once (the instance is closing): answer here, in this loop rather
            # than from the callback, so refusing a long queue does not recurse. The worker
            # goes back to the idle list for the dispatch to refuse the rest.
            with self._lock:
                self._complete(worker, batch, done.result())
                self._dispatch()
                more, answered = self._take()
            launches += more
            replies += answered
        for item, response in replies:
            item.set_result(response)  # claimed: neither cancelled nor answered before

    def _finished_batch(self, worker: InstanceWorker, batch: list[Waiting],
                        done: Future[Execution]) -> None:
        """On the instance's thread, right after the batch ran: answer it, cut the next."""
        with self._lock:
            self._complete(worker, batch, done.result())
            if self.queues.count:
                self._dispatch()
            launches, replies = self._take()
        self._carry_out(launches, replies)

    def _complete(self, worker: InstanceWorker, batch: list[Waiting],
                  execution: Execution) -> None:
        self._executing -= 1
        self._idle.append(worker)
        finished = time.perf_counter_ns()
        start, end = execution.start_ns, execution.end_ns
        rows = sum(item.rows for item in batch)
        if not all(map(refused_as_cancelled, execution.responses)):  # the model ran
            self.stats.record_execution(rows, 0, end - start, finished - end)
        ok = not execution.failed
        for item, response in zip(batch, execution.responses, strict=True):
            arrival = item.request.arrival_ns
            queued = max(start - arrival, 0)
            if refused_as_cancelled(response):
                self.stats.record_cancelled(item.rows, arrival)
            else:
                self.stats.record_request(ok, item.rows, finished - arrival, queued, 0,
                                          end - start, finished - end)
            item.request.durations = (queued, 0, end - start, finished - end)
            self._answer(item, response)

    def _answer(self, item: Waiting, response: InferenceResponse) -> None:
        if not self.preserve_ordering:
            self._replies.append((item, response))
            return
        self._finished[item.seq] = (item, response)
        self._answer_in_order()

    def _answer_in_order(self) -> None:
        while True:
            seq = self._next_to_send
            if seq in self._finished:
                self._replies.append(self._finished.pop(seq))
            elif seq in self._dropped:  # dropped from the queue: it never finishes
                self._dropped.discard(seq)
            else:
                return
            self._next_to_send += 1


def _rows(request: InferenceRequest, batching: bool) -> int:
    if not batching:
        return 1
    for tensor in request.inputs.values():
        return tensor.shape[0] if tensor.shape else 1
    return 1


@hookimpl
def naiad_scheduler(config: ModelConfig) -> SchedulerFactory | None:
    if config.HasField("dynamic_batching") and not config.HasField("sequence_batching"):
        return DynamicBatcher
    return None
