"""The default scheduler: each request goes to the next idle instance, unbatched."""

from __future__ import annotations

import asyncio
import time
from collections import deque

from tritonclient.grpc.model_config_pb2 import ModelConfig

from naiad.hookspecs import hookimpl
from naiad.scheduling.base import (
    InstanceWorker,
    Scheduler,
    SchedulerFactory,
    SchedulingContext,
    run_on_worker,
)
from naiad.types import InferenceRequest, InferenceResponse


def batch_size_of(request: InferenceRequest, batching: bool) -> int:
    """The number of inferences in a request: its leading dimension when the model batches."""
    if not batching:
        return 1
    for tensor in request.inputs.values():
        return tensor.shape[0] if tensor.shape else 1
    return 1


class DefaultScheduler(Scheduler):
    """One request per execution, on whichever instance is idle (Triton's default)."""

    def __init__(self, context: SchedulingContext) -> None:
        self.stats = context.stats
        self.batching = context.config.max_batch_size > 0
        self._idle: deque[InstanceWorker] = deque(context.workers)
        self._waiting: deque[asyncio.Future[InstanceWorker]] = deque()
        self._in_flight = 0
        self._drained: asyncio.Event | None = None

    async def _acquire(self) -> InstanceWorker:
        if self._idle:
            return self._idle.popleft()
        waiter: asyncio.Future[InstanceWorker] = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            # The worker may have been handed over just as the client went away.
            if waiter.done() and not waiter.cancelled():
                self._release(waiter.result())
            raise

    def _release(self, worker: InstanceWorker) -> None:
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(worker)
                return
        self._idle.append(worker)

    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        self._in_flight += 1
        self.stats.pending += 1
        try:
            try:
                worker = await self._acquire()
            finally:
                self.stats.pending -= 1
            dispatched = time.perf_counter_ns()
            try:
                execution = await run_on_worker(worker, (request,))
            finally:
                self._release(worker)
            done = time.perf_counter_ns()
            start, end = execution.start_ns, execution.end_ns
            batch = batch_size_of(request, self.batching)
            input_ns, infer_ns, output_ns = start - dispatched, end - start, done - end
            self.stats.record_execution(batch, input_ns, infer_ns, output_ns)
            self.stats.record_request(not execution.failed, batch, done - request.arrival_ns,
                                      dispatched - request.arrival_ns, input_ns, infer_ns,
                                      output_ns)
            return execution.responses[0]
        finally:
            self._in_flight -= 1
            if self._in_flight == 0 and self._drained is not None:
                self._drained.set()

    async def drain(self) -> None:
        while self._in_flight:
            self._drained = asyncio.Event()
            await self._drained.wait()


@hookimpl(trylast=True)
def naiad_scheduler(config: ModelConfig) -> SchedulerFactory | None:
    return DefaultScheduler
