"""The scheduler contract and the instance workers every scheduler dispatches to."""

from __future__ import annotations

import abc
import asyncio
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import NamedTuple

from tritonclient.grpc.model_config_pb2 import ModelConfig

from naiad.errors import InferenceServerError, Status
from naiad.stats import ModelStats
from naiad.types import InferenceRequest, InferenceResponse, InstanceInfo, ModelInstance


class Execution(NamedTuple):
    """What one backend execution produced, and when it ran (perf_counter_ns)."""

    responses: list[InferenceResponse]
    # True when the backend failed the batch as a whole (it raised): as in Triton, the
    # requests count as failures; a response that merely carries an error is a success.
    failed: bool
    start_ns: int
    end_ns: int


class InstanceWorker:
    """A :class:`ModelInstance` and the one thread it runs on.

    Each instance keeps its own thread so that state a framework ties to a thread (CUDA
    streams, thread-local sessions) stays put, and instances run in parallel.
    """

    __slots__ = ("executor", "info", "instance", "model_name")

    def __init__(self, instance: ModelInstance, info: InstanceInfo, model_name: str,
                 executor: ThreadPoolExecutor) -> None:
        self.instance = instance
        self.info = info
        self.model_name = model_name
        self.executor = executor

    def execute(self, requests: Sequence[InferenceRequest]) -> Execution:
        """Run a batch on this thread. Never raises: a backend that raises fails the whole
        batch (``failed``), one error response per request."""
        start = time.perf_counter_ns()
        failed = False
        try:
            responses = self.instance.execute(requests)
            if len(responses) != len(requests):
                raise InferenceServerError(
                    f"model '{self.model_name}' returned {len(responses)} responses for "
                    f"{len(requests)} requests", Status.INTERNAL)
        except InferenceServerError as exc:
            failed = True
            responses = [InferenceResponse(error=exc) for _ in requests]
        except Exception as exc:  # a backend bug must not take the server down
            failed = True
            error = InferenceServerError(
                f"model '{self.model_name}' instance '{self.info.name}' failed: "
                f"{type(exc).__name__}: {exc}", Status.INTERNAL)
            responses = [InferenceResponse(error=error) for _ in requests]
        return Execution(responses, failed, start, time.perf_counter_ns())

    def close(self) -> None:
        """Close the instance on its own thread, then stop the thread."""
        try:
            self.executor.submit(self.instance.close).result()
        finally:
            self.executor.shutdown(wait=True)


@dataclass(slots=True)
class SchedulingContext:
    """What a scheduler is built from: one loaded model version."""

    name: str
    version: int
    config: ModelConfig
    workers: list[InstanceWorker]
    stats: ModelStats


class Scheduler(abc.ABC):
    """Queues a model version's requests and dispatches them to its instance workers."""

    @abc.abstractmethod
    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        """Run one request and return its response (an error response is a response)."""

    @abc.abstractmethod
    async def drain(self) -> None:
        """Wait until every request already submitted has finished."""


SchedulerFactory = Callable[[SchedulingContext], Scheduler]


async def run_on_worker(worker: InstanceWorker, requests: Sequence[InferenceRequest]
                        ) -> Execution:
    """Execute ``requests`` on ``worker``'s thread from the event loop."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(worker.executor, worker.execute, requests)
