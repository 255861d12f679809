"""The traces of requests: Triton's trace objects, and the families they are written in.

A :class:`RequestTrace` is one request to one model: an id, the model, the request id, the
id of its parent (0 at the top) and the timestamps Triton names (REQUEST_START,
QUEUE_START, COMPUTE_START, COMPUTE_INPUT_END, COMPUTE_OUTPUT_START, COMPUTE_END,
REQUEST_END), with the tensors at level TENSORS. The compute timestamps are not taken in
the schedulers: once a request's future is done, its ``arrival_ns`` and the ``durations``
its scheduler recorded (queued, compute input, infer, output, all measured from the
arrival) give them exactly, so the schedulers stay untouched.

A :class:`TraceFamily` holds the traces of one client request (the top one, its ensemble
steps, the BLS calls made with its trace) and the frontend's part of the call
(:class:`naiad.tracing.exchange.Exchange`). Each part holds the family open; when the last
one lets go, the family is handed to the sink (the trace file or the OpenTelemetry
exporter), as Triton writes a trace when its last reference goes.

The rule for who ends what: whoever creates a trace calls :meth:`RequestTrace.watch` with
the future of the request (or :meth:`RequestTrace.abandon` when it could not be
submitted): the core for the requests it samples, the ensemble scheduler for its steps,
the BLS call for its child.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from typing import TYPE_CHECKING, Any

from naiad.tracing.settings import TENSORS, TIMESTAMPS
from naiad.tracing.tensors import tensor_record
from naiad.types import InferenceRequest, InferenceResponse

if TYPE_CHECKING:
    from naiad.models.records import ModelVersion
    from naiad.tracing.exchange import Exchange
    from naiad.tracing.sampler import SettingState

ENSEMBLE = "ensemble"
#: Trace ids, as Triton's: one counter for every trace of the process, from 1.
_ids = itertools.count(1)


class TraceFamily:
    """The traces of one client request, written together once every part has ended."""

    __slots__ = ("_finish", "_finished", "_holds", "_lock", "exchange", "level", "state",
                 "traces")

    def __init__(self, state: SettingState, finish: Callable[[TraceFamily], None]) -> None:
        #: the setting that sampled the request (its counters and its place in the file)
        self.state = state
        self.level = state.values.level
        self.traces: list[RequestTrace] = []
        #: the frontend's part (protocol timestamps, ``traceparent``), None without one
        self.exchange: Exchange | None = None
        self._finish = finish
        self._holds = 0
        self._finished = False
        self._lock = threading.Lock()

    def hold(self) -> bool:
        """Hold the family open; False (nothing held) once it was handed to the sink: a
        BLS call a decoupled model makes after its request ended is not traced."""
        with self._lock:
            if self._finished:
                return False
            self._holds += 1
            return True

    def release(self) -> None:
        """One part has ended; the last one hands the family to the sink."""
        with self._lock:
            self._holds -= 1
            done = self._finished = self._holds == 0
        if done:
            self._finish(self)


class RequestTrace:
    """One traced request to one model (``InferenceRequest.trace``). Its maker holds
    ``family`` open for it (:meth:`TraceFamily.hold`); :meth:`watch` or :meth:`abandon` lets
    go."""

    __slots__ = ("__weakref__", "ensemble", "family", "id", "model_name", "model_version",
                 "parent_id", "request_id", "tensors", "timestamps")

    def __init__(self, family: TraceFamily, model: ModelVersion, request: InferenceRequest,
                 parent_id: int = 0) -> None:
        self.family = family
        self.id = next(_ids)
        self.parent_id = parent_id
        self.model_name = model.name
        self.model_version = model.version
        self.request_id = request.id
        # An ensemble's own trace has no compute timestamps (its durations add up its
        # steps'), as in Triton.
        self.ensemble = model.config.platform == ENSEMBLE
        #: (Triton's name, steady-clock nanoseconds), in the order taken
        self.timestamps: list[tuple[str, int]] = []
        #: level TENSORS: (activity, tensor record) in Triton's form
        self.tensors: list[tuple[str, dict[str, str]]] = []
        if family.level & TIMESTAMPS:
            now = time.perf_counter_ns()
            self.timestamps += [("REQUEST_START", request.arrival_ns or now),
                                ("QUEUE_START", now)]
        if family.level & TENSORS:
            self.tensors += [("TENSOR_QUEUE_INPUT", tensor_record(t.name, t.datatype, t.shape,
                                                                  t.data))
                             for t in request.inputs.values()]
        family.traces.append(self)

    def child(self, model: ModelVersion, request: InferenceRequest) -> RequestTrace | None:
        """The trace of ``request``, made on behalf of this one (an ensemble step, a BLS
        call): written with this trace, ``parent_id`` this trace's id. The caller watches
        it. None when this trace's family was written already (nothing to join)."""
        if not self.family.hold():
            return None
        return RequestTrace(self.family, model, request, self.id)

    def watch(self, request: InferenceRequest, future: Future[Any]) -> None:
        """Take the rest of the timestamps when ``future`` (``request``'s) is done."""
        future.add_done_callback(partial(self._ended, request))

    def abandon(self) -> None:
        """The request was refused before a scheduler took it: end the trace now."""
        if self.family.level & TIMESTAMPS:
            self.timestamps.append(("REQUEST_END", time.perf_counter_ns()))
        self.family.release()

    def _ended(self, request: InferenceRequest, future: Future[Any]) -> None:
        now = time.perf_counter_ns()
        level = self.family.level
        if level & TIMESTAMPS:
            durations = request.durations
            if durations is not None and not self.ensemble:
                queued, compute_input, infer, output = durations
                start = request.arrival_ns + queued
                self.timestamps += [
                    ("COMPUTE_START", start),
                    ("COMPUTE_INPUT_END", start + compute_input),
                    ("COMPUTE_OUTPUT_START", start + compute_input + infer),
                    ("COMPUTE_END", start + compute_input + infer + output)]
            if self.parent_id == 0 and self.family.exchange is not None:
                self.timestamps.append(("INFER_RESPONSE_COMPLETE", now))
            self.timestamps.append(("REQUEST_END", now))
        if level & TENSORS:
            self._record_outputs(future)
        self.family.release()

    def _record_outputs(self, future: Future[Any]) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        response = future.result()
        if isinstance(response, InferenceResponse) and response.error is None:
            self.tensors += [("TENSOR_BACKEND_OUTPUT",
                              tensor_record(t.name, t.datatype, t.shape, t.data))
                             for t in response.outputs]
