"""The scheduler contract: what a scheduler is built from and what it must do."""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tritonclient.grpc.model_config_pb2 import ModelConfig

from naiad.scheduling.worker import InstanceWorker
from naiad.stats import ModelStats
from naiad.types import InferenceRequest, InferenceResponse

if TYPE_CHECKING:
    from naiad.models.manager import ModelVersion

ModelLookup = Callable[[str, str], "ModelVersion"]
"""``lookup(name, version)``: the serving version of another model ("" = the latest ready);
raises :class:`naiad.errors.InferenceServerError` when there is none."""

CancelHook = Callable[[Callable[[], object]], object]
"""``on_cancel(fn)``: call ``fn`` when the client gives up on the request (as gRPC's
``ServicerContext.add_callback``, which also calls it once the call is over)."""


@dataclass(slots=True)
class SchedulingContext:
    """What a scheduler is built from: one loaded model version."""

    name: str
    version: int
    config: ModelConfig
    workers: list[InstanceWorker]
    stats: ModelStats
    #: other models of the server, for schedulers that call them (ensembles)
    models: ModelLookup | None = None
    #: the model's folder (``<repository>/<model>``), for files a scheduler reads
    model_dir: Path | None = None


class Scheduler(abc.ABC):
    """Queues a model version's requests and dispatches them to its instance workers."""

    #: True when requests may wait here long enough that a client who hangs up should take
    #: its request out of the queue: the HTTP frontend then watches for the disconnect and
    #: cancels the waiting ``infer`` (gRPC cancels it by itself on cancel or deadline).
    holds_requests: bool = False

    @abc.abstractmethod
    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        """Run one request and return its response (an error response is a response)."""

    def infer_blocking(self, request: InferenceRequest, loop: asyncio.AbstractEventLoop,
                       on_cancel: CancelHook | None = None) -> InferenceResponse:
        """Run one request from a frontend thread (not ``loop``'s) and wait for it.

        The default runs :meth:`infer` on ``loop``, the event loop the model was loaded on,
        and, when this scheduler holds requests, registers the cancellation of that
        :meth:`infer` with ``on_cancel`` (waiting then raises
        ``concurrent.futures.CancelledError``). A scheduler that can reach its instances
        without the loop overrides this to save the two hops."""
        future = asyncio.run_coroutine_threadsafe(self.infer(request), loop)
        if on_cancel is not None and self.holds_requests:
            on_cancel(future.cancel)
        return future.result()

    @abc.abstractmethod
    async def drain(self) -> None:
        """Wait until every request already submitted has finished."""

    def pending(self) -> int:
        """Requests waiting to execute right now (``nv_inference_pending_request_count``)."""
        return 0


SchedulerFactory = Callable[[SchedulingContext], Scheduler]
