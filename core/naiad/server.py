"""The protocol-free server core that both frontends call.

Frontends decode the wire format into an :class:`InferenceRequest`, call
:meth:`InferenceServer.infer`, wait for the future it returns in their own way (the HTTP
event loop awaits it, a gRPC handler thread blocks on it), pass the response through
:func:`answer` and encode it. Everything else a frontend answers (health, metadata,
repository, statistics, shared memory) is a method of :class:`InferenceServer` too, so HTTP
and gRPC cannot drift apart; those that are not the request path or the server's lifecycle
are written in modules of their own and mixed in: metadata, configuration, statistics and
trace settings (:mod:`naiad.metadata`), loading and unloading on request
(:mod:`naiad.models.control`).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from functools import partial
from pathlib import Path

from naiad.errors import InferenceServerError, Status, unavailable
from naiad.metadata import ServerMetadata
from naiad.metrics.histogram import Histogram
from naiad.model_client import ServerModels
from naiad.models.control import ModelControl
from naiad.models.gate import VersionGate
from naiad.models.manager import ModelManager
from naiad.models.poller import RepositoryPoller
from naiad.models.progress import progress
from naiad.models.records import ModelVersion
from naiad.models.staging import ModelStaging
from naiad.plugins import PluginManager
from naiad.repository.mirror import local_folders
from naiad.repository.scan import scheme_of
from naiad.response_cache import ServerCache
from naiad.server_options import ServerOptions
from naiad.shm import SharedMemoryRegistry
from naiad.tracing import TraceManager
from naiad.tracing.trace import RequestTrace
from naiad.types import (
    InferenceRequest,
    InferenceResponse,
    ResponseCallback,
    ResponseSender,
)

log = logging.getLogger("naiad.server")

NS_PER_MS = 1_000_000
_SHUTTING_DOWN = "the server is shutting down and accepts no new requests"
# How often shutdown looks whether the requests in flight have finished.
IDLE_POLL_S = 0.01
SECONDS = 1.0
# Past --exit-timeout-secs the instances are aborted, and the requests of the ones whose
# worker process was killed fail on their own within this long; the rest are failed then.
ABORT_SETTLE_S = 1 * SECONDS


class InferenceServer(ServerMetadata, ModelControl):
    """Models, shared memory and the request path, shared by the HTTP and gRPC frontends."""

    def __init__(self, options: ServerOptions, plugins: PluginManager | None = None) -> None:
        self.options = options
        self.plugins = plugins or PluginManager(options.plugins_allowed or None,
                                                options.plugins_blocked)
        self.plugins.backend_directory = Path(options.backend_directory)
        self.repositories = [self.plugins.source(scheme_of(uri)).open(uri)
                             for uri in options.model_repositories]
        repositories, mirrors = local_folders(options.model_repositories, self.repositories,
                                              options.repository_mirror)
        self.models = ModelManager(repositories, self.plugins, options.load,
                                   track_files=options.model_control_mode == "poll")
        self.models.mirrors = mirrors
        self.poller: RepositoryPoller | None = None
        if options.model_control_mode == "poll":
            self.poller = RepositoryPoller(self.models, options.repository_poll_secs,
                                           after_change=self.settle_heap)
        self.shared_memory = SharedMemoryRegistry(options.max_shared_memory_regions)
        #: the private folders of models deployed with their files (the load API)
        self.staging = ModelStaging(options.load_files_directory, options.load_files_max_size)
        self._staging_sweeps: set[asyncio.Task[None]] = set()
        #: the response cache (``--cache-config``), None without one
        self.cache: ServerCache | None = None
        if options.cache_name:
            self.cache = ServerCache(options.cache_name, self.plugins.cache(
                options.cache_name, dict(options.cache_settings)))
            self.models.response_cache = self.cache
        # What models that call other models (BLS) reach them through.
        self.models.client = ServerModels(self)
        #: request tracing; ``tracer`` is it while some setting traces, else None (the one
        #: check a request pays when tracing is off)
        self.tracing = TraceManager(options.trace)
        self.tracer: TraceManager | None = self.tracing if self.tracing.active else None
        # The loop the server runs on (set by start): model control runs there.
        self.loop: asyncio.AbstractEventLoop | None = None
        self.live = False
        self.accepting = False
        #: the start-up models have been loaded (ready waits for it)
        self.started = False
        # Inferences arrive on any thread and finish on instance threads.
        self.in_flight = 0
        self._in_flight_lock = threading.Lock()
        # The futures of requests in flight and the senders of decoupled ones: what a
        # shutdown past --exit-timeout-secs fails, so their clients get an answer.
        self._flying: set[Future[InferenceResponse]] = set()
        self._streams: set[ResponseSender] = set()
        #: shutdown had to end requests or leave instances running (exit status 1)
        self.forced = False

    # --- lifecycle ----------------------------------------------------------------------

    def open(self) -> None:
        """The process runs: live from now on, and inferences are admitted for every model
        as soon as it is ready (the start-up loads run meanwhile; the server reads ready
        once they are over). Call on the event loop, before the listeners start."""
        self.loop = asyncio.get_running_loop()
        self.live = True
        self.accepting = True

    async def start(self) -> None:
        """Load the models the control mode asks for, ``--model-load-thread-count`` at a
        time; with ``--exit-on-error`` a failed model fails start-up. In poll mode, then
        follow the repositories' changes. Opens the server first if :meth:`open` was not
        called."""
        if not self.live:
            self.open()
        mode = self.options.model_control_mode
        async with progress("start-up", "reading the model repositories",
                            self.options.load.progress_s):
            await self._sync_mirrors()
        if self.poller is not None:
            await self.poller.baseline()
        names = (list(self.models.discover()) if mode != "explicit"
                 else self._explicit_startup_models())
        failures = await self.models.load_many(names)
        failed = [f"{name}: {reason}" for name, reason in failures.items()]
        self.settle_heap()
        if failed and self.options.exit_on_error:
            raise RuntimeError(f"{len(failed)} model(s) failed to load and --exit-on-error "
                               f"is true: " + "; ".join(failed))
        self.started = True
        log.info("start-up models loaded: %d ready, %d failed", len(names) - len(failed),
                 len(failed))
        if self.poller is not None:
            self.poller.retry(list(failures))  # as Triton: tried again at every poll
            self.poller.start()

    async def _sync_mirrors(self, models: list[str] | None = None) -> None:
        """Bring remote repositories' mirrors up to date before models are read. One that
        cannot be listed is an error (start-up: fatal with --exit-on-error), its models
        serve what was mirrored before."""
        if not self.models.mirrors:
            return
        try:
            await asyncio.to_thread(self.models.sync_mirrors, models,
                                    self.options.repository_mirror.settle_s)
        except InferenceServerError as exc:
            if models is None and self.options.exit_on_error:
                raise RuntimeError(exc.message) from None
            log.error("%s", exc.message)

    def _explicit_startup_models(self) -> list[str]:
        wanted = self.options.load_models
        if "*" in wanted:
            return list(self.models.discover())
        return list(wanted)

    async def shutdown(self, timeout: float, grace: float = 10 * SECONDS) -> None:
        """Stop accepting inferences, wait for those in flight (up to ``timeout`` seconds),
        then unload every model. Past ``timeout`` the instances still running requests are
        aborted (a Python model's worker process is killed), every request still in flight
        fails with UNAVAILABLE, and unloading gets ``grace / 2`` seconds more
        (``--exit-grace-secs``); an instance stuck in its model's code (in-process: a thread
        cannot be stopped) is then left behind, named in the log, and :attr:`forced` set."""
        self.accepting = False
        if self.poller is not None:
            await self.poller.stop()  # nothing loads or unloads behind the drain below
        if self.in_flight:
            log.info("waiting for %d in-flight request(s) (up to %s s)", self.in_flight, timeout)
            deadline = time.monotonic() + timeout
            while self.in_flight and time.monotonic() < deadline:
                await asyncio.sleep(IDLE_POLL_S)
            if self.in_flight:
                self.forced = True
                log.warning("%d request(s) still in flight after %s s (--exit-timeout-secs): "
                            "ending the instances that run them", self.in_flight, timeout)
                self.models.abort_all()
                settled = time.monotonic() + ABORT_SETTLE_S
                while self.in_flight and time.monotonic() < settled:
                    await asyncio.sleep(IDLE_POLL_S)
                self._fail_in_flight(timeout)
                try:
                    await asyncio.wait_for(self.models.unload_all(), grace / 2)
                except asyncio.TimeoutError:
                    stuck = self.models.busy_instances()
                    log.error("shutdown leaves %d instance(s) running after %s s more "
                              "(a thread running a model cannot be stopped): %s", len(stuck),
                              grace / 2, "; ".join(stuck) or "none busy, unloading hangs")
                self._release()
                return
        await self.models.unload_all()
        self._release()

    def _fail_in_flight(self, timeout: float) -> None:
        """Answer every request still in flight with UNAVAILABLE, so its client is not left
        waiting for a model that will never answer (its instance is stuck or was ended)."""
        error = unavailable(f"the server is shutting down and the request did not finish "
                            f"within --exit-timeout-secs ({timeout} s)")
        streams, futures = list(self._streams), list(self._flying)
        for sender in streams:
            sender.fail(error)
        for future in futures:
            try:
                future.set_exception(error)
            except InvalidStateError:
                pass  # it finished meanwhile
        if futures or streams:
            log.warning("answered %d request(s) in flight with UNAVAILABLE",
                        len(futures) + len(streams))

    def _release(self) -> None:
        """What the server holds beyond its models, at the end of shutdown."""
        self.shared_memory.unregister_all()
        if self.cache is not None:
            self.cache.close()
        self.tracing.close()
        for sweep in self._staging_sweeps:
            sweep.cancel()
        self.staging.close()
        for repository in self.repositories:
            repository.close()
        self.live = False

    def settle_heap(self) -> None:
        """With ``freeze_heap``: collect garbage once, then move every object alive now
        (modules, frameworks, loaded models) out of the collector's reach.

        A full collection walks every tracked object: with onnxruntime and tritonclient
        imported, 46 000 objects and 11 ms; with torch too, 195 000 objects and 40-57 ms.
        The requests in flight wait that long. Measured with identity_py
        over HTTP at concurrency 64: p99 15.7-17.4 ms without, 4.9-6.1 ms with
        (benchmarks/README.md, "Garbage collection"). Called after start-up and
        after every load and unload; the unfreeze first puts objects a model left behind
        back within reach, so unloading leaks nothing.
        """
        if self.options.freeze_heap:
            gc.unfreeze()
            gc.collect()
            gc.freeze()

    @property
    def ready(self) -> bool:
        """Triton's readiness: live, accepting, and (strict) every loaded model ready."""
        if not (self.live and self.accepting and self.started):
            return False
        if not self.options.strict_readiness:
            return True
        # As in Triton: a model version that failed to load holds readiness back, and so
        # does a model whose backend failed completing its configuration (Triton meets that
        # loading its versions); a model whose config could not be read, or one unloaded on
        # purpose, does not.
        records = self.models.models.values()
        if any(record.backend_failed and not record.versions for record in records):
            return False
        return not any(version is not None and state == "UNAVAILABLE" and reason != "unloaded"
                       for record in records
                       for version, (state, reason) in record.states.items())

    # --- inference ----------------------------------------------------------------------

    def model(self, name: str, version: str = "") -> ModelVersion:
        return self.models.get(name, version)

    def infer(self, model: ModelVersion, request: InferenceRequest
              ) -> Future[InferenceResponse]:
        """Check ``request`` against ``model`` and hand it to the model's scheduler, from
        any thread. A request refused at once (a bad request, shutdown, a full queue)
        raises :class:`InferenceServerError`; otherwise the future gets the model's
        response, for :func:`answer`. ``future.cancel()`` withdraws a request the
        scheduler still holds (see :attr:`Scheduler.holds_requests`), and so does
        cancelling ``request.cancellation``. Not for decoupled models: see :meth:`stream`."""
        return self._submit(self._enter(model, request), request)

    def stream(self, model: ModelVersion, request: InferenceRequest,
               on_response: ResponseCallback, internal: bool = False
               ) -> Future[InferenceResponse]:
        """Run ``request`` on any model and pass its responses to ``on_response(response,
        final)``, from any thread, as they come: the one response of an ordinary model
        (final), or every response a decoupled model sends, the last call final (its
        response may be None: the final flag alone). Each response holds only the outputs
        the request asked for; a failure is a final response with ``error`` set. A request
        refused at once raises :class:`InferenceServerError`, as :meth:`infer`.

        The future is the scheduler's (``cancel()`` withdraws a queued request, which then
        ends with a CANCELLED error); its result is not a response to send. ``internal``:
        a model calls another (BLS), which goes on while the server drains."""
        model = self._enter(model, request, internal)
        if not model.decoupled:
            future = self._submit(model, request, internal)
            future.add_done_callback(lambda done: on_response(_outcome(request, done), True))
            return future
        gate = model.gate
        if model.first_response is not None:  # histogram_latencies: nothing to do otherwise
            on_response = _timing_first_response(model.first_response, request, on_response)

        def deliver(response: InferenceResponse | None, final: bool) -> None:
            if response is not None and response.error is None:
                response = _pruned(request, response)
            try:
                on_response(response, final)
            finally:
                if final:
                    self._streams.discard(sender)
                    self._leave()
                    gate.leave()

        sender = request.sender = ResponseSender(deliver)
        self._streams.add(sender)  # before a response can come
        try:
            trace = self._admit(model, request, internal)
        except BaseException:
            self._streams.discard(sender)
            gate.leave()
            raise
        try:
            future = model.scheduler.submit(request)
        except BaseException:
            request.sender = None
            self._streams.discard(sender)
            self._leave()
            gate.leave()
            if trace is not None:
                trace.abandon()
            raise
        future.add_done_callback(lambda done: _end_stream(request, sender, done))
        if trace is not None:
            trace.watch(request, future)
        if request.cancellation is not None:
            request.cancellation.on_cancel(future.cancel)
        return future

    def _enter(self, model: ModelVersion, request: InferenceRequest,
               internal: bool = False) -> ModelVersion:
        """Enter the gate of ``model``, or of the version serving in its place when
        ``model`` retired since the request looked it up (:mod:`naiad.models.gate`): the
        version that runs the request, which must leave its gate when the request is over."""
        while not model.gate.enter():
            if not (self.accepting or (internal and self.live)):
                raise unavailable(_SHUTTING_DOWN)  # what retired it was the shutdown
            # A model's own call (BLS) carries the version it asked for (-1: the latest);
            # a frontend's carries the version it found.
            replacement = self.models.replacement(model, latest=request.model_version <= 0)
            if replacement is model or replacement.decoupled != model.decoupled:
                raise unavailable(f"model '{model.name}' changed version while the request "
                                  f"arrived (now version {replacement.version}); send it again")
            model = replacement
            if request.model_version > 0:
                request.model_version = model.version
        return model

    def _submit(self, model: ModelVersion, request: InferenceRequest,
                internal: bool = False) -> Future[InferenceResponse]:
        """:meth:`infer` of a request that entered ``model``'s gate (it leaves it here);
        ``internal``: a model's call to another (admitted while the server drains)."""
        gate = model.gate
        try:
            trace = self._admit(model, request, internal)
        except BaseException:
            gate.leave()
            raise
        return self._hand_over(model, request, trace)

    def _hand_over(self, model: ModelVersion, request: InferenceRequest,
                   trace: RequestTrace | None) -> Future[InferenceResponse]:
        """Give an admitted request to its scheduler; its future leaves the count and the
        gate when it is done."""
        gate = model.gate
        try:
            future = model.scheduler.submit(request)
        except BaseException:
            self._leave()
            gate.leave()
            if trace is not None:
                trace.abandon()
            raise
        self._flying.add(future)  # before the callback that removes it, which may run now
        future.add_done_callback(partial(self._left, gate))
        if trace is not None:
            trace.watch(request, future)
        if request.cancellation is not None:
            request.cancellation.on_cancel(future.cancel)
        return future

    def infer_on_loop(self, model: ModelVersion, request: InferenceRequest,
                      answer: Callable[[InferenceResponse], object]
                      ) -> Future[InferenceResponse] | None:
        """:meth:`infer` for a caller on the event loop. When the model's scheduler answers
        without a future (:meth:`~naiad.scheduling.base.Scheduler.submit_on_loop`: a model
        whose instances run in worker processes), ``answer(response)`` gets the response
        :meth:`infer`'s future would get, on the loop (at once for a request an instance
        refuses), and this returns None; otherwise it returns that future and ``answer``
        is never called. A request refused as it arrives raises, as in :meth:`infer`.
        Nothing else differs: the same checks, gate, in-flight count and statistics."""
        model = self._enter(model, request)
        gate = model.gate
        try:
            trace = self._admit(model, request)
        except BaseException:
            gate.leave()
            raise
        # A traced request's trace watches its future.
        if trace is None and model.scheduler.answers_on_loop:
            try:
                started = model.scheduler.submit_on_loop(
                    request, partial(self._answered, model.name, gate, answer))
            except BaseException:
                self._leave()
                gate.leave()
                raise
            if started:
                return None
        return self._hand_over(model, request, trace)

    def _answered(self, model_name: str, gate: VersionGate,
                  answer: Callable[[InferenceResponse], object],
                  response: InferenceResponse) -> None:
        """A request :meth:`infer_on_loop` gave its scheduler is answered: it leaves, as
        :meth:`_left`, then its caller gets the response."""
        lock = self._in_flight_lock
        lock.acquire()
        self.in_flight -= 1
        lock.release()
        gate.leave()
        try:
            answer(response)
        except Exception:  # as a future's done-callback that raises: logged, nothing more
            log.exception("answering a request of model '%s' failed", model_name)

    def _admit(self, model: ModelVersion, request: InferenceRequest,
               internal: bool = False) -> RequestTrace | None:
        """Count ``request`` in flight; its trace when the tracer samples it (the caller
        watches it)."""
        # A model's own calls (BLS) are part of a request in flight: the drain waits for
        # them, so they are admitted while it runs (not once the server stopped).
        if not (self.accepting or (internal and self.live)):
            raise unavailable(_SHUTTING_DOWN)
        request.arrival_ns = request.arrival_ns or time.perf_counter_ns()
        model.signature.check(request)
        lock = self._in_flight_lock
        lock.acquire()  # not ``with``: half the cost, and this runs for every request
        self.in_flight += 1
        lock.release()
        if not (self.accepting or internal):  # shutdown began meanwhile (another thread)
            self._leave()
            raise unavailable(_SHUTTING_DOWN)
        tracer = self.tracer
        return None if tracer is None else tracer.admit(model, request, internal)

    def _leave(self) -> None:
        with self._in_flight_lock:
            self.in_flight -= 1

    def _left(self, gate: VersionGate, future: Future[InferenceResponse]) -> None:
        """A request's future is done, on whichever thread finished it: it leaves the
        server's count and its version's gate (one callback: these run for every request)."""
        self._flying.discard(future)  # atomic under the GIL, as add
        lock = self._in_flight_lock
        lock.acquire()
        self.in_flight -= 1
        lock.release()
        gate.leave()

def answer(request: InferenceRequest, response: InferenceResponse) -> InferenceResponse:
    """What the client of ``request`` gets: ``response`` with only the outputs it asked for;
    an error response raised as its :class:`InferenceServerError`."""
    if response.error is not None:
        raise response.error
    return _pruned(request, response)


def _pruned(request: InferenceRequest, response: InferenceResponse) -> InferenceResponse:
    requested = request.requested_outputs
    if requested is not None:
        outputs = response.outputs
        if (len(requested) == 1 and len(outputs) == 1
                and requested[0].name == outputs[0].name):
            return response  # the usual one output, asked for and given: nothing to prune
        wanted = {o.name for o in requested}
        response.outputs = [t for t in outputs if t.name in wanted]
    return response


def _cancelled(request: InferenceRequest) -> InferenceServerError:
    return InferenceServerError(f"model '{request.model_name}': the request was cancelled",
                                Status.CANCELLED)


def _outcome(request: InferenceRequest, done: Future[InferenceResponse]) -> InferenceResponse:
    """The response an ordinary model's finished future stands for, pruned; an error
    response when it failed or was cancelled."""
    if done.cancelled():
        return InferenceResponse(error=_cancelled(request))
    try:
        response = done.result()
    except InferenceServerError as exc:
        return InferenceResponse(error=exc)
    except Exception as exc:  # a scheduler bug: the stream still ends
        return InferenceResponse(error=InferenceServerError(
            f"model '{request.model_name}': internal error: {type(exc).__name__}: {exc}",
            Status.INTERNAL))
    return response if response.error is not None else _pruned(request, response)


def _timing_first_response(histogram: Histogram, request: InferenceRequest,
                           on_response: ResponseCallback) -> ResponseCallback:
    """``on_response`` that first records the milliseconds from the request's arrival to
    its first response (whole milliseconds, as Triton counts them; the final flag alone is
    no response)."""
    waiting = True

    def timed(response: InferenceResponse | None, final: bool) -> object:
        nonlocal waiting
        if waiting and response is not None:  # the sender's lock orders the calls
            waiting = False
            histogram.observe((time.perf_counter_ns() - request.arrival_ns) // NS_PER_MS)
        return on_response(response, final)

    return timed


def _end_stream(request: InferenceRequest, sender: ResponseSender,
                done: Future[InferenceResponse]) -> None:
    """A decoupled model finished executing a request: if that failed (or the request was
    withdrawn before it ran), the error ends its stream unless the model ended it. A
    success leaves the stream to the model, which may go on sending from other threads."""
    request_error = _outcome(request, done).error
    if request_error is not None:
        sender.fail(request_error)

