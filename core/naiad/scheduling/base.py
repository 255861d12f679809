"""The scheduler contract: what a scheduler is built from and what it must do."""

from __future__ import annotations

import abc
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from tritonclient.grpc.model_config_pb2 import ModelConfig

from naiad.metrics.stats import ModelStats
from naiad.scheduling.worker import InstanceWorker
from naiad.types import InferenceRequest, InferenceResponse

if TYPE_CHECKING:
    from naiad.models.gate import VersionGate
    from naiad.models.signature import ModelSignature


class CalledModel(Protocol):
    """Another model version, as a scheduler that calls it sees it (an ensemble's step).

    :class:`naiad.models.records.ModelVersion` is one; a protocol, so that the schedulers
    need nothing of the model manager (which builds them)."""

    name: str
    version: int
    decoupled: bool
    signature: ModelSignature
    scheduler: Scheduler
    #: requests enter before they reach ``scheduler`` and leave when they are over
    gate: VersionGate


ModelLookup = Callable[[str, str], CalledModel]
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
    """Queues a model version's requests and dispatches them to its instance workers.

    The contract, for the built-in schedulers and third-party ones alike:

    - :meth:`submit` is the way in (:meth:`submit_on_loop` is an optional shortcut for
      instances in worker processes). It is called from any thread (the event loop for
      HTTP, a gRPC handler thread, an instance thread when an ensemble step follows
      another) and must not block. It returns a :class:`concurrent.futures.Future` of the
      response; an error the model or the scheduler answers with is a response
      (``InferenceResponse(error=...)``), and a request refused at once (a full queue)
      may instead raise :class:`naiad.errors.InferenceServerError` from ``submit``.
    - Batches reach instances through :meth:`InstanceWorker.submit` on the workers of
      :attr:`SchedulingContext.workers`, which also returns a future. Chain work with
      done-callbacks: they run on the thread that completes the future (usually the
      instance's), so they must be short, must not block, and must not hold a lock that
      the callbacks of the futures they complete take again.
    - ``future.cancel()`` is cancellation. A request still queued in the scheduler is
      withdrawn and never runs (:class:`naiad.futures.Withdrawable` does the bookkeeping);
      when the scheduler hands the request to an instance it calls
      ``set_running_or_notify_cancel()``, after which ``cancel()`` returns False.
    - Statistics are the scheduler's to record (:attr:`SchedulingContext.stats`), with
      ``request.durations`` set before the future completes.
    - Schedulers are built on the server's event loop; one that needs timers takes it
      there (``asyncio.get_running_loop()``) and reaches it with ``call_soon_threadsafe``.
    """

    #: True when requests may wait here long enough that a client who hangs up should take
    #: its request out of the queue: frontends then cancel the future when the client goes
    #: away (HTTP watches for the disconnect, gRPC registers ``future.cancel`` with
    #: ``context.add_callback``).
    holds_requests: bool = False

    #: True when :meth:`submit_on_loop` may take requests: the server asks only then, so a
    #: model whose instances run on threads pays nothing for the callback way.
    answers_on_loop: bool = False

    @abc.abstractmethod
    def submit(self, request: InferenceRequest) -> Future[InferenceResponse]:
        """Accept one request; the future gets its response (see the class docstring)."""

    def submit_on_loop(self, request: InferenceRequest,
                       answer: Callable[[InferenceResponse], object]) -> bool:
        """Optional: accept one request without a future, for a caller on the server's event
        loop, when this scheduler's instances answer there (models in worker processes):
        ``answer(response)`` gets what the future of :meth:`submit` would, on the loop (or
        at once, on this thread, for a request an instance refuses), and must not raise.
        Return False, having done nothing, to leave the request to :meth:`submit`, as this
        default does (the server asks only when :attr:`answers_on_loop` is set). Only the
        default scheduler implements it: the request's future, its callbacks and the
        loop's wait for them were 7 % of the server's Python work per request
        (``docs/design.md``, "Requests without a future")."""
        return False

    @abc.abstractmethod
    async def drain(self) -> None:
        """Wait until every request already submitted has finished."""

    def pending(self) -> int:
        """Requests waiting to execute right now (``nv_inference_pending_request_count``)."""
        return 0


SchedulerFactory = Callable[[SchedulingContext], Scheduler]
