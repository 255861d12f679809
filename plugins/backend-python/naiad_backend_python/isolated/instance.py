"""A model instance whose model runs in a worker process, supervised.

The core hands batches over with ``execute_async`` from whichever thread submits them (the
event loop, a gRPC thread, a batcher): they go to the worker at once and a reader thread
completes them (``channel.py``); N instances are N processes running at once, each with its
own GIL. ``execute`` (the same, waited for) serves callers that want an answer on the spot.

A watcher thread per instance waits for the worker to end. When it ends while the instance
is serving (killed, segfault, ``os._exit``, out of memory), the batches in flight fail at
once with UNAVAILABLE naming the model and how the worker ended, the instance reads not
ready, and the watcher starts a new worker (and runs ``initialize`` again) after a delay
that doubles with each quick crash. Ending an instance (unload, shutdown) runs ``finalize``
and never restarts it; :meth:`abort` kills the worker at once (shutdown past
``--exit-timeout-secs``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence

from naiad.backend_utils import on_log_level_change
from naiad.errors import InferenceServerError, unavailable
from naiad.types import (
    InferenceClient,
    InferenceRequest,
    InferenceResponse,
    InstanceHealth,
    ModelInstance,
)
from naiad_backend_python.isolated.calls import Handler
from naiad_backend_python.isolated.channel import Done, WorkerDied
from naiad_backend_python.isolated.initialize_deadline import InitializeDeadline
from naiad_backend_python.isolated.process import (
    Launch,
    WorkerProcess,
    ended_message,
)
from naiad_backend_python.isolated.regions import RegionPolicy
from naiad_backend_python.settings import PythonBackendSettings
from naiad_backend_python.stub import naiad_stub_wire as wire

log = logging.getLogger("naiad.backend.python")
# The worker sends the model's records at INFO and above (DEBUG too with --log-verbose);
# the server's handlers and their filters decide what is written.
model_log = logging.getLogger("naiad.model")

# How long a call that saw the socket close waits for the process's exit status.
EXIT_STATUS_WAIT_S = 1.0


class IsolatedInstance(ModelInstance):
    """One model instance in a supervised worker process."""

    # Batches go to the worker from the thread that submits them (see channel.py).
    asynchronous = True

    def __init__(self, launch: Launch, init: dict, model_name: str, instance_name: str,
                 settings: PythonBackendSettings,
                 loop: asyncio.AbstractEventLoop | None = None,
                 server: InferenceClient | None = None,
                 handlers: dict[str, Handler] | None = None) -> None:
        """Start the worker and initialize the model in it. Raises
        :class:`InferenceServerError` (UNAVAILABLE) when either fails. ``loop``: the
        server's event loop, where the worker's answers are read (else a thread reads).
        ``server``: what the model's BLS calls reach; ``handlers``: further questions its
        worker may ask, by ``op`` (see ``calls.py``)."""
        self.launch = launch
        self.loop = loop
        self.server = server
        self.handlers = handlers
        self.init_message = init
        self.model_name = model_name
        self.instance_name = instance_name
        self.settings = settings
        self.regions = RegionPolicy(settings.shm_region_dir, settings.shm_default_byte_size,
                                    settings.shm_growth_byte_size, settings.shm_max_byte_size,
                                    settings.shm_inline_max_byte_size)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._restarts = 0
        self._reason = ""
        self.worker: WorkerProcess | None = self._start()
        self.started_at = time.monotonic()
        self._watcher = threading.Thread(target=self._watch, daemon=True,
                                         name=f"naiad-watch-{instance_name}")
        self._watcher.start()
        # POST /v2/logging log_verbose_level reaches the running worker (a new one starts
        # with the level of the moment)
        self._unlisten = on_log_level_change(self._log_level_changed)

    def _log_level_changed(self, level: int) -> None:
        worker = self.worker
        if worker is not None:
            worker.channel.set_log_level(min(logging.INFO, level))

    # --- the contract -------------------------------------------------------------------

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        result = _Outcome()
        self.execute_async(requests, result.set)
        return result.get()

    def execute_async(self, requests: Sequence[InferenceRequest], done: Done) -> None:
        """Send a batch to the worker from this thread; ``done`` gets the responses or an
        :class:`InferenceServerError`, from the thread that reads the worker's answers."""
        worker = self.worker
        if worker is None:
            done(unavailable(self._not_serving()))
            return

        def finished(result: object) -> None:
            if isinstance(result, WorkerDied):
                result = self._died(worker)
            done(result)

        worker.channel.submit(requests, finished)

    def _died(self, worker: WorkerProcess) -> InferenceServerError:
        """The error of a batch the worker took down with it; the instance is not ready
        from now on, before the client hears of it."""
        returncode = worker.wait(EXIT_STATUS_WAIT_S)
        with self._lock:
            if self.worker is worker:
                self.worker = None
                self._reason = (f"its worker process (pid {worker.pid}) "
                                f"{worker.describe_end(returncode)}; restarting")
        return unavailable(ended_message(
            self.model_name, self.instance_name, worker.pid, returncode,
            "while executing the batch; " + ("the server is stopping it" if
                                             self._stopping.is_set() else
                                             "the instance restarts"), worker.fault))

    def health(self) -> InstanceHealth:
        return InstanceHealth(ready=self.worker is not None and not self._stopping.is_set(),
                              reason=self._reason, restarts=self._restarts)

    def close(self) -> None:
        self._unlisten()
        with self._lock:
            self._stopping.set()
            worker, self.worker = self.worker, None
        if worker is not None:
            worker.finalize(self.settings.worker_finalize_timeout_seconds)
        self._watcher.join()

    def abort(self) -> None:
        self._unlisten()
        with self._lock:
            self._stopping.set()
            worker = self.worker
        if worker is not None:
            log.warning("model '%s' instance '%s': killing its worker process (pid %d)",
                        self.model_name, self.instance_name, worker.pid)
            worker.kill()

    @property
    def pid(self) -> int | None:
        """The worker's process id (None while it restarts)."""
        worker = self.worker
        return worker.pid if worker is not None else None

    # --- starting and supervising -------------------------------------------------------

    def _start(self) -> WorkerProcess:
        """A new worker with the model initialized in it."""
        worker = WorkerProcess(self.launch, self.model_name, self.instance_name, self.regions)
        worker.channel.serve_calls(self.server, self.handlers)
        deadline = InitializeDeadline(worker, self.settings.initialize_timeout_seconds)
        try:
            reply = worker.channel.call({**self.init_message, "protocol": wire.PROTOCOL_VERSION,
                                         "log_level": min(logging.INFO,
                                                          model_log.getEffectiveLevel()),
                                         "region_dir": self.regions.directory,
                                         "inline_max": self.regions.inline_max})
        except WorkerDied:
            worker.reap()
            if deadline.passed():
                raise unavailable(deadline.message(self.model_name, self.instance_name)
                                  ) from None
            raise unavailable(ended_message(
                self.model_name, self.instance_name, worker.pid, worker.process.returncode,
                f"while starting (interpreter {self.launch.python}, "
                f"{self.launch.description})", worker.fault)) from None
        except BaseException:
            worker.kill()
            worker.reap()
            raise
        finally:
            deadline.cancel()
        if deadline.passed():  # it answered as the timer fired: killed all the same
            worker.reap()
            raise unavailable(deadline.message(self.model_name, self.instance_name))
        if reply.get("op") != "ready":
            worker.kill()
            worker.reap()
            raise unavailable(str(reply.get("message", reply)))
        log.info("model '%s' instance '%s': worker process %d runs Python %s (%s)",
                 self.model_name, self.instance_name, worker.pid, reply.get("python_version"),
                 reply.get("python"))
        worker.channel.execute_timeout_s = self.settings.execute_timeout_seconds
        worker.channel.start_reading(self.loop)
        if worker.channel.execute_timeout_s:
            threading.Thread(target=worker.channel.watch_execute_time, args=(self._stopping,),
                             daemon=True, name=f"naiad-timeout-{self.instance_name}").start()
        return worker

    def _watch(self) -> None:
        """Wait for each worker to end; start the next one unless the instance is ending."""
        delay = self.settings.worker_restart_delay_min_seconds
        worker = self.worker
        while worker is not None:
            returncode = worker.wait()
            worker.mark_gone()  # a call waiting on its socket returns now
            if self._stopping.is_set():
                return
            lived = time.monotonic() - self.started_at
            if lived >= self.settings.worker_restart_stable_seconds:
                delay = self.settings.worker_restart_delay_min_seconds
            with self._lock:
                if self.worker is worker:
                    self.worker = None
                self._reason = (f"its worker process (pid {worker.pid}) "
                                f"{worker.describe_end(returncode)}; restarting")
            log.error("model '%s' instance '%s': the worker process (pid %d) %s after %.1f s; "
                      "restarting it in %.2f s", self.model_name, self.instance_name,
                      worker.pid, worker.describe_end(returncode), lived, delay)
            worker.reap()
            worker = self._restart(delay)
            delay = min(delay * 2, self.settings.worker_restart_delay_max_seconds)

    def _restart(self, delay: float) -> WorkerProcess | None:
        """Start workers until one initializes (waiting ``delay`` before each try, doubling);
        None when the instance is ending meanwhile."""
        while not self._stopping.wait(delay):
            try:
                worker = self._start()
            except InferenceServerError as exc:
                self._reason = f"restarting its worker process failed: {exc.message}"
                log.error("model '%s' instance '%s': %s", self.model_name, self.instance_name,
                          self._reason)
                delay = min(delay * 2, self.settings.worker_restart_delay_max_seconds)
                continue
            with self._lock:
                if self._stopping.is_set():
                    stale = worker
                else:
                    stale = None
                    self.worker = worker
                    self.started_at = time.monotonic()
                    self._restarts += 1
                    self._reason = ""
            if stale is not None:
                stale.finalize(self.settings.worker_finalize_timeout_seconds)
                return None
            log.info("model '%s' instance '%s' is ready again (restart %d)", self.model_name,
                     self.instance_name, self._restarts)
            return worker
        return None

    @property
    def in_flight(self) -> int:
        """Batches sent to the worker (or waiting for its region) and not answered yet."""
        worker = self.worker
        return worker.channel.in_flight if worker is not None else 0

    def _not_serving(self) -> str:
        if self._stopping.is_set():
            return (f"model '{self.model_name}' instance '{self.instance_name}' is being "
                    f"unloaded")
        return (f"model '{self.model_name}' instance '{self.instance_name}' is not ready: "
                f"{self._reason or 'its worker process is starting'}")


class _Outcome:
    """Waits for one ``execute_async`` result on the calling thread."""

    __slots__ = ("_done", "_result")

    def __init__(self) -> None:
        self._result: object = None
        self._done = threading.Lock()
        self._done.acquire()

    def set(self, result: object) -> None:
        self._result = result
        self._done.release()

    def get(self) -> list[InferenceResponse]:
        self._done.acquire()
        if isinstance(self._result, BaseException):
            raise self._result
        return self._result  # type: ignore[return-value]
