"""The default scheduler: each request runs alone, on the least busy instance."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial

from tritonclient.grpc.model_config_pb2 import ModelConfig

from naiad.errors import InferenceServerError, Status
from naiad.hookspecs import hookimpl
from naiad.scheduling.base import Scheduler, SchedulerFactory, SchedulingContext
from naiad.scheduling.worker import Execution, InstanceWorker, refused_as_cancelled
from naiad.types import InferenceRequest, InferenceResponse

DRAIN_POLL_S = 0.005


def batch_size_of(request: InferenceRequest, batching: bool) -> int:
    """The number of inferences in a request: its leading dimension when the model batches."""
    if not batching:
        return 1
    for tensor in request.inputs.values():
        return tensor.shape[0] if tensor.shape else 1
    return 1


class DefaultScheduler(Scheduler):
    """One request per execution (Triton's default scheduler). Requests queue on the
    instance with the fewest unfinished jobs and run in arrival order on it; the instance
    thread records the statistics and answers, whichever thread submitted."""

    def __init__(self, context: SchedulingContext) -> None:
        self.stats = context.stats
        self.workers = context.workers
        self.batching = context.config.max_batch_size > 0
        # Loaded before the scheduler is built; an instance that goes (an unload) makes
        # run_elsewhere decline, and the request takes submit, which refuses it.
        self.answers_on_loop = bool(self.workers) and all(
            worker.instance is not None and worker.instance.asynchronous
            for worker in self.workers)

    def _worker(self) -> InstanceWorker:
        workers = self.workers
        return workers[0] if len(workers) == 1 else min(workers, key=_busy)

    def submit(self, request: InferenceRequest) -> Future[InferenceResponse]:
        # The instance's own future: cancel() withdraws the request while it waits in the
        # instance's queue (the frontends do not: this scheduler holds no requests).
        return self._worker().submit((request,), partial(self._finished, request))

    def submit_on_loop(self, request: InferenceRequest,
                       answer: Callable[[InferenceResponse], object]) -> bool:
        return self._worker().run_elsewhere((request,), partial(self._answer, request, answer))

    def _answer(self, request: InferenceRequest, answer: Callable[[InferenceResponse], object],
                execution: Execution) -> None:
        try:
            response = self._finished(request, execution)
        except Exception as exc:  # a bug here still answers, as submit's future would
            response = InferenceResponse(error=InferenceServerError(
                f"model '{request.model_name}': internal error: {type(exc).__name__}: {exc}",
                Status.INTERNAL))
        answer(response)

    def _finished(self, request: InferenceRequest, execution: Execution
                  ) -> InferenceResponse:
        """On the instance's thread, right after the request ran: record it, answer it."""
        finished = time.perf_counter_ns()
        start, end = execution.start_ns, execution.end_ns
        arrival = request.arrival_ns
        batch = batch_size_of(request, self.batching)
        # compute_input: the hop to the instance's thread; compute_output: the way back.
        queued = max(start - arrival, 0)
        if refused_as_cancelled(execution.responses[0]):  # the model never saw it
            self.stats.record_cancelled(batch, arrival)
        else:
            self.stats.record_executed_request(not execution.failed, batch, finished - arrival,
                                               queued, 0, end - start, finished - end)
        request.durations = (queued, 0, end - start, finished - end)
        return execution.responses[0]

    def pending(self) -> int:
        return sum(w.pending for w in self.workers)

    async def drain(self) -> None:
        # Requests come from any thread and finish on instance threads: watch the instances.
        while any(w.busy for w in self.workers):
            await asyncio.sleep(DRAIN_POLL_S)


def _busy(worker: InstanceWorker) -> int:
    return worker.busy


@hookimpl(trylast=True)
def naiad_scheduler(config: ModelConfig) -> SchedulerFactory | None:
    return DefaultScheduler
