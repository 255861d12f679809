"""The public types plugins see: tensors, requests, responses and the plugin base classes.

Plugins never see HTTP or gRPC. A frontend decodes a wire request into an
:class:`InferenceRequest`, the model's :class:`Scheduler` hands batches of them to a
:class:`ModelInstance` (made by the model's :class:`Backend`), and the frontend encodes the
:class:`InferenceResponse` it gets back.
"""

from __future__ import annotations

import abc
import threading
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import asyncio
    from concurrent.futures import Future

    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from naiad.errors import InferenceServerError
    from naiad.metrics.custom_metrics import ModelMetrics


@dataclass(slots=True)
class Tensor:
    """A named tensor. ``data`` is a numpy array of ``shape``; BYTES is an object array."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    data: np.ndarray
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class RequestedOutput:
    """An output the client asked for, with its per-output parameters (``binary_data``...)."""

    name: str
    parameters: dict[str, Any] = field(default_factory=dict)


class RequestTrace(typing.Protocol):
    """A traced request's trace, as a plugin holds it (``InferenceRequest.trace``).

    The core makes it (``naiad.tracing.trace.RequestTrace``); a plugin only passes it on:
    to the requests it makes for the one it serves (a BLS call), or by ``id`` to a worker
    process and back. A protocol, so that this module needs nothing of the tracer."""

    #: unique in the process while the trace lives
    id: int

    def child(self, model: Any, request: InferenceRequest) -> RequestTrace | None:
        """The trace of ``request`` to ``model``, made on behalf of this one."""

    def watch(self, request: InferenceRequest, future: Future[Any]) -> None:
        """Take the rest of the timestamps when ``request``'s ``future`` is done."""

    def abandon(self) -> None:
        """The request was refused before a scheduler took it: end the trace now."""


@dataclass(slots=True)
class InferenceRequest:
    """One client request, already checked against the model's inputs."""

    model_name: str
    model_version: int
    inputs: dict[str, Tensor]
    id: str = ""
    # None means every output of the model.
    requested_outputs: list[RequestedOutput] | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    # Filled by the core: when the request entered the server (time.perf_counter_ns()).
    arrival_ns: int = 0
    # Filled by the scheduler that ran it: nanoseconds spent queued, in compute input, infer
    # and output (an ensemble adds up its steps' durations, as Triton reports them).
    durations: tuple[int, int, int, int] | None = None
    #: Set by the core for a request to a decoupled model: where the model sends its
    #: responses (any number, from any thread, the last one final). None otherwise.
    sender: ResponseSender | None = None
    #: Set by the frontend where the client can give up on the request (a gRPC cancel or
    #: deadline, an HTTP client that disconnects while it is watched). None: it cannot.
    cancellation: Cancellation | None = None
    #: Set by the core for a request it traces (``--trace-config``, the trace extension):
    #: its Triton trace (timestamps, tensors). None: not traced, the usual case.
    trace: RequestTrace | None = None


@dataclass(slots=True)
class InferenceResponse:
    """The answer to one request: its outputs, or ``error`` when that request failed."""

    outputs: list[Tensor] = field(default_factory=list)
    parameters: dict[str, Any] = field(default_factory=dict)
    error: InferenceServerError | None = None


#: ``on_response(response, final)``: one response of a request (None: the final flag alone).
ResponseCallback = Callable[["InferenceResponse | None", bool], object]


class ResponseSender:
    """Where the responses of one request to a decoupled model go (Triton's response
    factory). The model calls :meth:`send` any number of times, from any thread, during
    ``execute`` or after it returned; exactly one call is final (``final=True``, with or
    without a response), and nothing may be sent after it."""

    __slots__ = ("_deliver", "_final", "_lock", "count")

    def __init__(self, deliver: ResponseCallback) -> None:
        self._deliver = deliver
        self._final = False
        self._lock = threading.Lock()
        #: responses sent so far (the final flag alone does not count)
        self.count = 0

    @property
    def final(self) -> bool:
        """True once the final response (or flag) was sent."""
        return self._final

    def send(self, response: InferenceResponse | None = None, final: bool = False) -> None:
        """Send ``response`` (None with ``final`` to end the stream without one). Raises
        :class:`RuntimeError` after the final one. Delivery happens on the calling thread,
        in the order the calls take the sender's lock."""
        with self._lock:
            if self._final:
                raise RuntimeError("the final response of this request was sent already")
            if response is None and not final:
                raise ValueError("send(): a response, or final=True, is needed")
            self._final = final
            if response is not None:
                self.count += 1
            # Under the lock: two threads' responses reach the client in the order sent.
            self._deliver(response, final)

    def fail(self, error: InferenceServerError) -> bool:
        """End the stream with ``error`` unless it ended already; True if it was sent."""
        with self._lock:
            if self._final:
                return False
            self._final = True
            self.count += 1
            self._deliver(InferenceResponse(error=error), True)
            return True


class Cancellation:
    """Whether the client of a request gave up on it (cancelled the call, let its
    deadline pass, disconnected). Frontends :meth:`cancel`; models read :attr:`cancelled`
    (``request.is_cancelled()`` in a Python model), and an instance whose model runs
    elsewhere forwards it with :meth:`on_cancel`. Cancelling never interrupts a model:
    it is for models that look, so a long or streaming one can stop early."""

    __slots__ = ("_callbacks", "_lock", "cancelled")

    def __init__(self) -> None:
        self.cancelled = False
        self._callbacks: list[Callable[[], object]] = []
        self._lock = threading.Lock()

    def cancel(self) -> None:
        """Mark the request cancelled and run the callbacks (once; from any thread)."""
        with self._lock:
            if self.cancelled:
                return
            self.cancelled = True
        self._run_callbacks()

    def on_cancel(self, callback: Callable[[], object]) -> None:
        """Call ``callback()`` when the request is cancelled (at once if it is already).

        Without the lock: this runs twice for nearly every gRPC request, and cancelling
        is rare. The append is atomic under the GIL; a callback appended before
        :meth:`cancel` takes the list runs there, one appended after is run here, since
        ``cancelled`` was set before the list was taken."""
        self._callbacks.append(callback)
        if self.cancelled:
            self._run_callbacks()

    def _run_callbacks(self) -> None:
        """Run the callbacks not run yet, each once (the list is taken under the lock)."""
        with self._lock:
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()


class InferenceClient(abc.ABC):
    """The server's models, as a model calls them (Triton's business logic scripting):
    what :attr:`ModelContext.server` gives a backend. Requests are checked as a client's
    are; ``request.model_version`` -1 (or 0) means the latest ready version."""

    @abc.abstractmethod
    def infer(self, request: InferenceRequest) -> Future[InferenceResponse]:
        """Run ``request`` on the model it names; the future gets the response (an error
        response when the model, the request or the lookup failed: never an exception).
        A caller that sets ``request.trace`` to the trace of the request it serves (that
        request's own ``trace``) has the call traced as its child; the server replaces it
        with the call's own trace."""

    @abc.abstractmethod
    def stream(self, request: InferenceRequest, on_response: ResponseCallback) -> None:
        """Run ``request`` and pass each of its responses to ``on_response(response,
        final)``, from any thread: one for an ordinary model, any number for a decoupled
        one; the last call is final. Errors arrive as final error responses."""

    @abc.abstractmethod
    def is_ready(self, name: str, version: int = -1) -> bool:
        """Whether the model (the version, or the latest with -1) can serve now."""

    @abc.abstractmethod
    def load(self, name: str, config: str = "", files: dict[str, bytes] | None = None
             ) -> Future[None]:
        """Load (or reload) model ``name`` as the repository API's load does, with
        ``config`` (JSON) overriding its config.pbtxt; explicit model control mode only.
        The future fails with :class:`~naiad.errors.InferenceServerError` saying why."""

    @abc.abstractmethod
    def unload(self, name: str, unload_dependents: bool = False) -> Future[None]:
        """Unload model ``name`` as the repository API's unload does (the ensembles that
        call it go with it, as in Triton; with ``unload_dependents``, an ensemble's
        composing models go too)."""


@dataclass(slots=True, frozen=True)
class InstanceInfo:
    """Which instance of a model a :class:`ModelInstance` is (from ``instance_group``)."""

    name: str  # e.g. "add_sub_0_0", as Triton names instances
    kind: str  # "KIND_CPU", "KIND_GPU", "KIND_MODEL"
    device_id: int  # GPU ordinal for KIND_GPU, 0 otherwise
    index: int  # 0-based position among all instances of the model version


@dataclass(slots=True, frozen=True)
class ModelContext:
    """What a backend needs to load one version of a model."""

    name: str
    version: int
    config: ModelConfig
    model_dir: Path  # <repository>/<model>
    version_dir: Path  # <repository>/<model>/<version>
    repository: Path
    # --backend-config values for this backend (KEY=VALUE pairs).
    backend_config: dict[str, str]
    #: The server's event loop. An asynchronous instance may wait for its I/O there (the
    #: Python backend reads its worker processes' answers on it); never run model code on
    #: it. None outside a server (a backend called directly, in a test).
    loop: asyncio.AbstractEventLoop | None = None
    #: The server's models, for a model that calls others (BLS). None outside a server.
    server: InferenceClient | None = None
    #: This version's custom metrics (:class:`naiad.metrics.custom_metrics.ModelMetrics`): the
    #: families a model defines, shown on the metrics port and deleted when the version
    #: unloads. None outside a server.
    metrics: ModelMetrics | None = None


@dataclass(slots=True, frozen=True)
class InstanceHealth:
    """Whether a :class:`ModelInstance` can serve now (see :meth:`ModelInstance.health`)."""

    ready: bool = True
    #: why it is not ready (shown in the log and the repository index)
    reason: str = ""
    #: how many times it was started again after it failed (a worker process that died)
    restarts: int = 0


HEALTHY = InstanceHealth()


class ModelInstance(abc.ABC):
    """One loaded copy of a model version. ``execute`` runs in the instance's own thread,
    one batch at a time, and gets a batch of requests (one element unless the scheduler
    batched); an instance that sets :attr:`any_thread` may have a short batch run on the
    server's event loop instead."""

    @abc.abstractmethod
    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        """Run the model on ``requests``; return one response per request, in order."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the instance's resources (called once, from the instance's thread)."""

    #: True for an instance whose :meth:`execute` may run on any thread, one call at a time
    #: (the framework keeps no state per thread, such as PyTorch's grad mode or a CUDA
    #: device): a batch submitted on the event loop whose recent batches were short
    #: (``--loop-execution-max-usecs``) then runs on the loop at the end of its round,
    #: without the hop to the instance's thread and back. The instance is still created
    #: and closed on its own thread, and a long batch still runs there.
    any_thread: bool = False

    #: True for an instance whose model runs outside the server's threads (a worker
    #: process) and that implements :meth:`execute_async`: the core then hands it batches
    #: from whichever thread submits them, without a hop through the instance's thread.
    asynchronous: bool = False

    def execute_async(self, requests: Sequence[InferenceRequest],
                      done: Callable[[list[InferenceResponse] | InferenceServerError], object]
                      ) -> None:
        """Start running ``requests`` without waiting for them (only with
        :attr:`asynchronous`). Called from any thread, possibly several at once; must not
        block for long. Call ``done`` exactly once, from any thread, with one response per
        request or with the :class:`~naiad.errors.InferenceServerError` that failed the
        whole batch."""
        raise NotImplementedError(f"{type(self).__name__} is not asynchronous")

    def health(self) -> InstanceHealth:
        """Whether the instance can serve now. An instance that runs the model somewhere
        that can fail on its own (a worker process) reports not ready while it recovers;
        its model version reads not ready meanwhile. Called from any thread; keep it cheap."""
        return HEALTHY

    def abort(self) -> None:  # noqa: B027 - optional hook
        """Stop what runs now, at once: the server is shutting down and
        ``--exit-timeout-secs`` has passed. An instance whose model runs in another process
        kills it (the batch in flight then fails); an in-process one cannot stop a thread
        and does nothing. Called from any thread, possibly while ``execute`` runs."""


class Backend(abc.ABC):
    """A backend plugin: turns a model folder into instances that execute requests."""

    #: the ``backend:`` name in config.pbtxt this backend serves
    name: str = ""
    #: the file or folder in the version directory when config.pbtxt names none
    default_model_filename: str = ""

    def auto_complete_config(self, config: ModelConfig, model_dir: Path) -> list[str]:
        """Fill what ``config`` leaves out (inputs, outputs, max_batch_size), in place, from
        the model file. Return the names of the top-level fields that were filled in, so the
        load log can mark them. Called unless ``--disable-auto-complete-config``."""
        return []

    @abc.abstractmethod
    def create_instance(self, context: ModelContext, instance: InstanceInfo) -> ModelInstance:
        """Load one instance. Runs in a worker thread; raise to fail the model's load with
        the exception's message as the reason."""


@dataclass(slots=True, frozen=True)
class RepositoryFile:
    """One file of a model repository, as its source lists it."""

    #: the path under the repository's root, "/"-separated: ``resnet/1/model.onnx``
    path: str
    #: its size in bytes
    size: int
    #: changes whenever the file's content changes (an ETag, a generation, a version id,
    #: or size and modification time for a local file): the same path with the same tag is
    #: the same content, so the core never downloads it twice
    tag: str


class Repository(abc.ABC):
    """One ``--model-repository`` URI, opened by its :class:`RepositorySource`.

    The server reads models from local folders. A repository on this machine says where it
    is (:attr:`local_path`) and is read in place; any other is mirrored by the core: it
    lists the files (:meth:`list_files`) at start-up, at every poll and before an explicit
    load, and downloads (:meth:`download`) only the files whose tag it has not seen, into a
    content-addressed cache it keeps, so a restart or a poll downloads nothing unchanged.
    Methods are called from worker threads, several downloads at once (the core bounds how
    many); none is called on the event loop.
    """

    #: the repository's folder when it is on this machine (read in place); None for a
    #: remote repository (mirrored)
    local_path: Path | None = None

    @abc.abstractmethod
    def list_files(self, prefix: str = "") -> list[RepositoryFile]:
        """Every file under the repository's root, or under ``prefix`` (a model's name and
        "/"). Folders are not listed; an empty folder does not exist. A repository that
        cannot be reached, or that refuses access, raises
        :class:`naiad.errors.InferenceServerError` (UNAVAILABLE, NOT_FOUND) whose message
        names the URI and the cause."""

    @abc.abstractmethod
    def download(self, file: RepositoryFile, destination: Path) -> None:
        """Write ``file``'s content to ``destination`` (a new file, in a folder that
        exists). Errors as for :meth:`list_files`; a download that fails leaves whatever it
        wrote, which the core removes."""

    def close(self) -> None:  # noqa: B027 - optional: most repositories hold nothing open
        """Release connections; called once, at shutdown."""


class RepositorySource(abc.ABC):
    """Where model repositories of one URI scheme live (``s3``, ``gs``, ``as``; ``file`` for
    a plain path): opens a ``--model-repository`` URI."""

    @abc.abstractmethod
    def open(self, uri: str) -> Repository:
        """The repository at ``uri`` (the whole ``--model-repository`` value). Raise
        :class:`naiad.errors.InferenceServerError` naming the URI when it is malformed
        (INVALID_ARG); reaching it may wait for the first :meth:`Repository.list_files`."""


@dataclass(slots=True, frozen=True)
class CacheUsage:
    """What a response cache says about itself on the metrics port: Triton's server-wide
    ``nv_cache_*`` gauges. Counts and durations are totals since the cache started. A
    figure the cache does not know stays None, and its line is left out."""

    #: responses stored now (``nv_cache_num_entries``)
    entries: int | None = None
    #: bytes held now and the budget, both counted as the cache counts them
    #: (``nv_cache_util`` = used / total, when both are known and total > 0)
    bytes_used: int | None = None
    bytes_total: int | None = None
    #: ``nv_cache_num_lookups``, ``nv_cache_num_hits``, ``nv_cache_num_misses``
    lookups: int | None = None
    hits: int | None = None
    misses: int | None = None
    #: entries dropped to make room (``nv_cache_num_evictions``)
    evictions: int | None = None
    #: time spent in lookups (hits and misses) and in inserts, in nanoseconds
    #: (``nv_cache_lookup_duration`` and ``nv_cache_insertion_duration``, in µs)
    lookup_ns: int | None = None
    insertion_ns: int | None = None


class ResponseCache(abc.ABC):
    """A response cache (``--cache-config NAME,KEY=VALUE``): opaque keys to stored bytes.

    The core decides what is cached and when (models with ``response_cache { enable: true }``),
    makes the key (a digest of the model name, version, every input's name, datatype, shape
    and bytes, and the request parameters that can change the result) and serializes the
    response; a cache only stores bytes, so what it holds is what it counts against its
    budget, and entries of two model versions never share a key.

    Methods are called from any thread, several at once (the HTTP event loop, gRPC handler
    threads, instance threads). A cache that cannot answer (a remote server down or slow)
    logs it and answers None, or drops the insert: an inference never fails because of its
    cache. A cache whose calls can wait on a network sets :attr:`blocking`, and the core
    then calls it away from the HTTP event loop.
    """

    #: True when lookup or insert may wait on I/O (a remote cache): the core then calls
    #: them on a thread of its own, never on the event loop. An in-memory cache leaves it
    #: False and is called inline.
    blocking: bool = False

    @abc.abstractmethod
    def lookup(self, key: bytes) -> bytes | None:
        """The bytes stored under ``key``, or None (a miss, or the cache could not answer)."""

    @abc.abstractmethod
    def insert(self, key: bytes, value: bytes) -> None:
        """Store ``value`` under ``key``; a value the cache cannot hold is dropped."""

    def close(self) -> None:  # noqa: B027 - optional: most caches hold nothing open
        """Release what the cache holds open (connections); called once, at shutdown."""

    def usage(self) -> CacheUsage | None:
        """The cache's figures for the metrics port, read at every scrape on the metrics
        endpoint's thread: answer from what the cache keeps in memory, never wait on a
        network. None (the default): the server-wide ``nv_cache_*`` lines are left out."""
        return None


# --- frontends (plugins that speak another protocol: naiad.frontends) ----------------


@dataclass(slots=True, frozen=True)
class FrontendContext:
    """What a plugin frontend is built with (see ``hookspecs.naiad_frontend``)."""

    #: the running :class:`naiad.server.InferenceServer`: reach models only through its
    #: public methods (``model``, ``infer``, ``stream``, ``model_metadata``,
    #: ``model_config``, ``models.index``, ``load_model``, ``unload_model``, ``ready``)
    server: Any
    #: the parsed ``naiad serve`` flags, the frontend's own among them
    options: Any
    #: an ASGI app answering ``GET /metrics`` with the server's Prometheus text (what the
    #: metrics port serves), for a frontend that serves metrics on its own port too; None
    #: with ``--allow-metrics=false``
    metrics_app: Any = None


@typing.runtime_checkable
class Frontend(typing.Protocol):
    """A listener started by ``naiad serve`` beside the KServe HTTP and gRPC frontends."""

    async def start(self) -> None:
        """Start listening; raise :class:`OSError` naming the address when it cannot."""

    async def stop(self) -> None:
        """Stop accepting, let the responses under way finish, close the listener."""


#: what ``hookspecs.naiad_frontend`` returns: builds the frontend from its context
FrontendFactory = Callable[[FrontendContext], Frontend]
