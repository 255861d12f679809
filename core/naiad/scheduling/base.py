"""The scheduler contract: what a scheduler is built from and what it must do."""

from __future__ import annotations

import abc
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

    @abc.abstractmethod
    async def drain(self) -> None:
        """Wait until every request already submitted has finished."""

    def pending(self) -> int:
        """Requests waiting to execute right now (``nv_inference_pending_request_count``)."""
        return 0


SchedulerFactory = Callable[[SchedulingContext], Scheduler]
