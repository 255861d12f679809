"""The server's tracing: settings (global and per model), sampling, and the tracing thread.

:class:`TraceManager` is what :class:`naiad.server.InferenceServer` holds. The server keeps
it in ``server.tracer`` only while some setting traces (:attr:`TraceManager.active`), so a
request costs one attribute check when tracing is off. While it is on, the core calls
:meth:`TraceManager.admit` for each request a client sends (never for a model's own calls):
the request's setting (its model's, else the global one) samples it, and a traced request
gets ``request.trace``.

Settings follow Triton's trace extension: a model's setting holds the values given for it
and copies the others from the global setting, following the global changes; clearing a
value (null, or an empty list over gRPC) makes it fall back again, and a model with no
value of its own reads the global setting.

Finished families of traces go through a queue to one thread, which writes them (the
trace file, :mod:`.triton_file`) or turns them into spans (:mod:`.otel`); :meth:`close`
(at shutdown) drains it and closes the file or flushes the exporter.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Protocol

from naiad.tracing.exchange import CURRENT
from naiad.tracing.sampler import SettingState
from naiad.tracing.settings import (
    OPENTELEMETRY,
    TRITON,
    TraceConfig,
    TraceValues,
    Update,
    check_valid,
    level_names,
    parse_update,
)
from naiad.tracing.trace import RequestTrace, TraceFamily

if TYPE_CHECKING:
    from naiad.models.records import ModelVersion
    from naiad.types import InferenceRequest

log = logging.getLogger("naiad.tracing")

#: How long shutdown waits for the tracing thread to write what it was given, in seconds.
CLOSE_TIMEOUT_S = 30.0
_KEYS = ("level", "rate", "count", "log_frequency")
_STOP = object()


class TraceSink(Protocol):
    """Where complete families of traces go (on the tracing thread only)."""

    def write(self, family: TraceFamily) -> None: ...

    def retire(self, state: SettingState) -> None: ...

    def idle(self) -> None: ...

    def close(self, states: Iterable[SettingState]) -> None: ...


def _sink(config: TraceConfig) -> TraceSink | None:
    if config.mode == OPENTELEMETRY:
        from naiad.tracing.otel import OpenTelemetryExporter  # imports the SDK

        return OpenTelemetryExporter(config.opentelemetry)
    if config.file:
        from naiad.tracing.triton_file import TraceFileWriter

        return TraceFileWriter(config.file)
    return None  # triton mode without a file: nothing can be traced, at start or later


class TraceManager:
    """Trace settings, sampling and the tracing thread. ``sink``: where traces go instead
    of what ``config`` says (a test's)."""

    def __init__(self, config: TraceConfig, sink: TraceSink | None = None) -> None:
        self.config = config
        self.sink = sink if sink is not None else _sink(config)
        # Triton's global default (what clearing a global value returns to) and setting.
        self._default = SettingState(config.values)
        self._global = SettingState(config.values)
        self._models: dict[str, SettingState] = {}
        # models whose setting copies some global values (rebuilt on global changes)
        self._fallback: set[str] = set()
        self._lock = threading.Lock()  # updates, one at a time
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._thread_lock = threading.Lock()
        self._closed = False
        if self.active:
            where = (config.file if config.mode == TRITON else config.opentelemetry.url)
            log.info("tracing at level %s, 1 request in %d, in %s mode, to %s",
                     "+".join(level_names(config.values.level)), config.values.rate,
                     config.mode, where)

    @property
    def active(self) -> bool:
        """Whether any setting traces (the server then keeps this manager in its
        ``tracer``)."""
        if self.sink is None:
            return False
        return self._global.active or any(s.active for s in list(self._models.values()))

    # --- the trace extension ----------------------------------------------------------

    def view(self, model: str = "") -> list[tuple[str, list[str]]]:
        """The settings of ``model`` ("" for the global ones) as the trace extension lists
        them, in Triton's order; every value a list (gRPC's form)."""
        state = self._models.get(model, self._global) if model else self._global
        values = state.values
        view = [("trace_level", level_names(values.level)),
                ("trace_rate", [str(values.rate)]),
                ("trace_count", [str(state.remaining)])]
        if self.config.mode == TRITON:
            return [*view, ("log_frequency", [str(values.log_frequency)]),
                    ("trace_file", [self.config.file]), ("trace_mode", [TRITON])]
        return [*view, ("trace_mode", [OPENTELEMETRY]),
                *self.config.opentelemetry.settings_view()]

    def update(self, model: str, changes: Mapping[str, object]) -> list[tuple[str, list[str]]]:
        """Apply a trace extension request to ``model``'s settings ("" for the global ones)
        and return them. Raises :class:`~naiad.errors.InferenceServerError` (nothing
        changes) for a value that does not parse or a setting that would trace nothing."""
        update = parse_update(changes, self.config)
        with self._lock:
            planned = {model: self._rebuilt(model, update)}
            if not model:
                for name in sorted(self._fallback):
                    planned[name] = self._rebuilt(name, {}, planned[""])
            for state in planned.values():
                if state is not None:
                    check_valid(state.values, self.config)
            for name, state in planned.items():
                self._replace(name, state)
        return self.view(model)

    def _rebuilt(self, model: str, update: Update, new_global: SettingState | None = None
                 ) -> SettingState | None:
        """The setting ``model`` gets from ``update`` (Triton's UpdateTraceSettingInternal);
        None: the model has no value of its own left and reads the global setting."""
        current = self._models.get(model) if model else self._global
        fallback = (new_global or self._global) if model else self._default
        specified = set(current.specified) if current is not None else set()
        values = {}
        for key in _KEYS:
            if key in update:
                if update[key] is None:
                    specified.discard(key)
                else:
                    specified.add(key)
                    values[key] = update[key]
            elif key in specified and current is not None:
                values[key] = _value(current, key)
            if key not in specified:
                values[key] = _value(fallback, key)
        if model and not specified:
            return None
        return SettingState(TraceValues(**values), frozenset(specified))  # type: ignore[arg-type]

    def _replace(self, model: str, state: SettingState | None) -> None:
        old = self._models.get(model) if model else self._global
        if not model:
            assert state is not None
            self._global = state
        elif state is None:
            self._models.pop(model, None)
            self._fallback.discard(model)
        else:
            self._models[model] = state
            self._fallback.add(model)  # a model never gives every value (not the file)
        if old is not None and old is not state:
            self._submit(("retire", old))

    # --- the request path -------------------------------------------------------------

    def admit(self, model: ModelVersion, request: InferenceRequest, internal: bool
              ) -> RequestTrace | None:
        """Sample a client's ``request`` (called by the core right before its scheduler
        gets it): its trace, which the core watches, or None. A model's own calls
        (``internal``) and requests that already carry a trace (made and watched by
        their caller) are left alone."""
        if internal or request.trace is not None:
            return None
        state = self._models.get(model.name, self._global)
        exchange = CURRENT.get()
        forced = (self.config.mode == OPENTELEMETRY and exchange is not None
                  and bool(exchange.context_carrier()))
        if not (state.force() if forced else state.sample()):
            return None
        family = TraceFamily(state, self._finished)
        family.hold()  # for the trace, until the core's watch ends it
        if exchange is not None:
            exchange.adopt(family)
        trace = request.trace = RequestTrace(family, model, request)
        return trace

    def _finished(self, family: TraceFamily) -> None:
        self._submit(family)

    # --- the tracing thread -----------------------------------------------------------

    def _submit(self, item: object) -> None:
        if self.sink is None or self._closed:
            return  # after shutdown, a request that still ends is not written
        if self._thread is None:
            with self._thread_lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="naiad-tracing",
                                                    daemon=True)
                    self._thread.start()
        self._queue.put(item)

    def _run(self) -> None:
        sink = self.sink
        assert sink is not None
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            try:
                if isinstance(item, TraceFamily):
                    sink.write(item)
                elif isinstance(item, threading.Event):  # flush(): what came is in the file
                    sink.idle()
                    item.set()
                else:
                    _, state = item  # type: ignore[misc]
                    sink.retire(state)
                if self._queue.empty():
                    sink.idle()
            except Exception:  # a bug in a sink must not stop tracing
                log.exception("writing a trace failed")

    def flush(self, timeout: float = CLOSE_TIMEOUT_S) -> bool:
        """Wait until the tracing thread has handled everything handed to it so far (what
        has ended is written); False if it did not within ``timeout`` seconds."""
        if self.sink is None or self._closed:
            return True
        done = threading.Event()
        self._submit(done)
        return done.wait(timeout)

    def close(self) -> None:
        """Shutdown: write every trace handed over, then close the file or flush the
        exporter."""
        if self.sink is None or self._closed:
            return
        with self._thread_lock:
            self._closed = True
            thread = self._thread
        if thread is not None:
            self._queue.put(_STOP)
            thread.join(CLOSE_TIMEOUT_S)
            if thread.is_alive():
                log.warning("the tracing thread did not finish within %s s", CLOSE_TIMEOUT_S)
        self.sink.close([self._global, *self._models.values()])


def _value(state: SettingState, key: str) -> int:
    """A setting's current value (the count: the traces it has left)."""
    if key == "count":
        return state.remaining
    return int(getattr(state.values, key))
