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
"""

from __future__ import annotations

import asyncio
import logging
import time

from tritonclient.grpc.model_config_pb2 import ModelConfig

from naiad.batching import shape_key
from naiad.errors import InferenceServerError, Status
from naiad.hookspecs import hookimpl
from naiad.scheduling.adaptive import ADAPTIVE_PARAMETER, AdaptiveWait, adaptive_enabled
from naiad.scheduling.base import Scheduler, SchedulerFactory, SchedulingContext
from naiad.scheduling.batch_policy import cut_batch
from naiad.scheduling.queues import PriorityQueues, Waiting
from naiad.scheduling.worker import Execution, InstanceWorker
from naiad.types import InferenceRequest, InferenceResponse

log = logging.getLogger("naiad.scheduling.dynamic")

__all__ = ["ADAPTIVE_PARAMETER", "DynamicBatcher"]


class DynamicBatcher(Scheduler):
    """Merges queued requests of one model version into batches for its instances."""

    holds_requests = True

    def __init__(self, context: SchedulingContext) -> None:
        config = context.config
        batching = config.dynamic_batching
        self.name = context.name
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
        self._idle: list[InstanceWorker] = list(reversed(context.workers))
        self._executing = 0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0
        self._drained: asyncio.Event | None = None
        # preserve_ordering: responses leave in arrival order, whichever batch ends first.
        self._next_seq = 0
        self._next_to_send = 0
        self._finished: dict[int, tuple[Waiting, InferenceResponse]] = {}
        self._dropped: set[int] = set()
        self._verbose = log.isEnabledFor(logging.DEBUG)

    # --- the request side ---------------------------------------------------------------

    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        loop = asyncio.get_running_loop()
        now = time.perf_counter_ns()
        item = Waiting(request, loop.create_future(), now, self._next_seq,
                       _rows(request, self.batches_requests), shape_key(request))
        self._next_seq += 1
        self.queues.put(item, now)  # raises UNAVAILABLE when the level's queue is full
        if self.adaptive is not None:
            self.adaptive.arrived(now)
        if self._idle:
            self._dispatch()
        elif self.queues.next_deadline:
            self._arm(self.queues.next_deadline)
        try:
            return await item.future
        except asyncio.CancelledError:
            # The client went away: a request still queued is dropped and never runs.
            if self.queues.discard(item) and self.preserve_ordering:
                self._dropped.add(item.seq)
                self._answer_in_order()
            raise

    def pending(self) -> int:
        return self.queues.count

    async def drain(self) -> None:
        while self.queues.count or self._executing:
            self._drained = asyncio.Event()
            await self._drained.wait()

    # --- cutting and dispatching batches --------------------------------------------------

    def _dispatch(self) -> None:
        """Cut batches while instances are free and the queues say a batch is due."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
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
                self._arm(cut.wait_until)
                break
            batch = candidates[:cut.count]
            if self.adaptive is not None:
                self.adaptive.dispatched(len(batch))
            if self._verbose:
                log.debug("model '%s': batch of %d request(s) (%d rows) cut: %s", self.name,
                          len(batch), sum(item.rows for item in batch), cut.reason)
            self._run(batch)
        if self.queues.next_deadline and (self._timer is None
                                          or self.queues.next_deadline < self._timer_at):
            self._arm(self.queues.next_deadline)
        self._wake_drain()

    def _run(self, batch: list[Waiting]) -> None:
        self.queues.remove(batch)
        worker = self._idle.pop()
        self._executing += 1
        future = worker.submit([item.request for item in batch])
        future.add_done_callback(
            lambda done: self._finished_batch(worker, batch, done))

    def _arm(self, at_ns: int) -> None:
        if self._timer is not None:
            if self._timer_at <= at_ns:
                return
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._timer_at = at_ns
        self._timer = loop.call_later(max(at_ns - time.perf_counter_ns(), 0) / 1e9,
                                      self._timer_fired)

    def _timer_fired(self) -> None:
        self._timer = None
        if self._idle:
            self._dispatch()
        else:  # every instance is busy: only queue timeouts can be due
            self._reject(self.queues.expire(time.perf_counter_ns()))
            if self.queues.next_deadline:
                self._arm(self.queues.next_deadline)

    def _reject(self, expired: list[Waiting]) -> None:
        for item in expired:
            error = InferenceServerError(
                f"Request timeout expired: model '{self.name}' did not start the request "
                f"within its queue timeout", Status.UNAVAILABLE)
            self._answer(item, InferenceResponse(error=error))
            waited = time.perf_counter_ns() - item.request.arrival_ns
            self.stats.record_request(False, item.rows, waited, 0, 0, 0, 0)

    # --- completions --------------------------------------------------------------------

    def _finished_batch(self, worker: InstanceWorker, batch: list[Waiting],
                        done: asyncio.Future[Execution]) -> None:
        self._executing -= 1
        self._idle.append(worker)
        execution = done.result()
        finished = time.perf_counter_ns()
        start, end = execution.start_ns, execution.end_ns
        rows = sum(item.rows for item in batch)
        self.stats.record_execution(rows, 0, end - start, finished - end)
        ok = not execution.failed
        for item, response in zip(batch, execution.responses, strict=True):
            arrival = item.request.arrival_ns
            queued = max(start - arrival, 0)
            self.stats.record_request(ok, item.rows, finished - arrival, queued, 0,
                                      end - start, finished - end)
            item.request.durations = (queued, 0, end - start, finished - end)
            self._answer(item, response)
        if self.queues.count:
            self._dispatch()
        self._wake_drain()

    def _answer(self, item: Waiting, response: InferenceResponse) -> None:
        if not self.preserve_ordering:
            if not item.future.done():
                item.future.set_result(response)
            return
        self._finished[item.seq] = (item, response)
        self._answer_in_order()

    def _answer_in_order(self) -> None:
        while True:
            seq = self._next_to_send
            if seq in self._finished:
                ready, answer = self._finished.pop(seq)
                if not ready.future.done():
                    ready.future.set_result(answer)
            elif seq in self._dropped:  # dropped from the queue: it never finishes
                self._dropped.discard(seq)
            else:
                return
            self._next_to_send += 1

    def _wake_drain(self) -> None:
        if self._drained is not None and not self.queues.count and not self._executing:
            self._drained.set()


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
