"""``--trace-config triton,file=PATH``: Triton's JSON trace file.

The file is one JSON list of records, compact, as tritonserver writes it::

    [{"id":1,"timestamps":[{"name":"HTTP_RECV_START","ns":19938885263685}]},
     {"id":1,"model_name":"add_sub","model_version":1,"request_id":"r1"},
     {"id":1,"timestamps":[{"name":"REQUEST_START","ns":19938885370143}]}, ...,
     {"id":3,"model_name":"mul","model_version":1,"parent_id":2}, ...]

``ns`` is the steady clock (``time.perf_counter_ns``, CLOCK_MONOTONIC: Triton's
``steady_clock``). Each record holds one timestamp; a trace's records come in the order of
the request's life, its model record just before REQUEST_START; a request's traces (its
ensemble steps, its BLS calls) are written together, the top one first.

When it is written, as Triton does:

- ``log-frequency`` N > 0: every N traces of a setting go to ``PATH.0``, ``PATH.1``... (a
  complete list each), the rest at shutdown.
- ``count`` N > 0: once the N traces are made and written, they go to the next indexed
  file at once.
- otherwise ``PATH`` gets every trace, the list closed at shutdown. (Triton keeps them in
  memory until then; naiad appends each as it ends, so memory stays flat. The file holds
  the same list once the server stops.)

All of it runs on the tracing thread (:class:`naiad.tracing.manager.TraceManager`), never on
a request's thread. A file that cannot be written is logged, and tracing goes on.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from typing import IO

import orjson

from naiad.tracing.sampler import SettingState
from naiad.tracing.settings import TIMESTAMPS
from naiad.tracing.trace import RequestTrace, TraceFamily

log = logging.getLogger("naiad.tracing")

_RECEIVING = frozenset(("HTTP_RECV_START", "HTTP_RECV_END", "GRPC_WAITREAD_START",
                        "GRPC_WAITREAD_END"))
# The output tensors are written before the first of these.
_AFTER_OUTPUTS = frozenset(("COMPUTE_END", "INFER_RESPONSE_COMPLETE", "REQUEST_END"))


def _stamp(trace_id: int, name: str, ns: int) -> bytes:
    return orjson.dumps({"id": trace_id, "timestamps": [{"name": name, "ns": ns}]})


def _info(trace: RequestTrace) -> bytes:
    record: dict[str, object] = {"id": trace.id, "model_name": trace.model_name,
                                 "model_version": trace.model_version}
    if trace.request_id:
        record["request_id"] = trace.request_id
    if trace.parent_id:
        record["parent_id"] = trace.parent_id
    return orjson.dumps(record)


def _trace_records(trace: RequestTrace, frontend: list[tuple[str, int]]) -> list[bytes]:
    """One trace's records in the order of a request's life: the frontend's receiving, the
    model record, REQUEST_START, QUEUE_START, the input tensors, the compute timestamps
    (the output tensors before COMPUTE_END), INFER_RESPONSE_COMPLETE, REQUEST_END, the
    frontend's sending. (Triton writes them as its threads capture them: the same records,
    some in another order.)"""
    inputs = [_tensor(trace.id, activity, tensor) for activity, tensor in trace.tensors
              if activity == "TENSOR_QUEUE_INPUT"]
    outputs = [_tensor(trace.id, activity, tensor) for activity, tensor in trace.tensors
               if activity != "TENSOR_QUEUE_INPUT"]
    records = [_stamp(trace.id, name, ns) for name, ns in frontend if name in _RECEIVING]
    if trace.timestamps:
        records.append(_info(trace))
    for name, ns in trace.timestamps:
        if outputs and name in _AFTER_OUTPUTS:
            records += outputs
            outputs = []
        records.append(_stamp(trace.id, name, ns))
        if name == "QUEUE_START":
            records += inputs
            inputs = []
    records += inputs + outputs  # level TENSORS alone: no timestamps to place them by
    records += [_stamp(trace.id, name, ns) for name, ns in frontend if name not in _RECEIVING]
    return records


def _tensor(trace_id: int, activity: str, tensor: dict[str, str]) -> bytes:
    return orjson.dumps({"id": trace_id, "activity": activity, "tensor": tensor})


def render_family(family: TraceFamily) -> bytes:
    """A request's traces as comma-separated records (no brackets)."""
    records: list[bytes] = []
    exchange = family.exchange
    for trace in sorted(family.traces, key=lambda t: t.id):
        frontend = (exchange.timestamps if exchange is not None and trace.parent_id == 0
                    and family.level & TIMESTAMPS else [])
        records += _trace_records(trace, frontend)
    return b",".join(records)


class TraceFileWriter:
    """Writes families of traces to ``path`` and its indexed files (one thread only)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._index = 0
        self._main: IO[bytes] | None = None

    def write(self, family: TraceFamily) -> None:
        state = family.state
        chunk = render_family(family)
        if not chunk:
            return
        state.buffer.append(chunk)
        state.collected += 1
        frequency = state.values.log_frequency
        count_done = state.values.count > 0 and state.remaining == 0 and \
            state.collected >= state.created
        if count_done or (frequency and len(state.buffer) >= frequency):
            self._save(state, indexed=True)
        elif state.retired or (not frequency and state.values.count < 0):
            self._save(state, indexed=bool(frequency))

    def retire(self, state: SettingState) -> None:
        """``state`` was replaced by an update: write what it holds now, as Triton does
        when the old setting goes."""
        state.retired = True
        if state.buffer:
            self._save(state, indexed=bool(state.values.log_frequency))

    def idle(self) -> None:
        """Nothing else to write for now: let the file catch up (under load, traces reach it
        in blocks)."""
        if self._main is not None:
            try:
                self._main.flush()
            except OSError as exc:
                log.error("failed writing trace file %s: %s", self.path, exc)

    def close(self, states: Iterable[SettingState]) -> None:
        """Shutdown: write what every setting holds and close the list."""
        for state in states:
            if state.buffer:
                self._save(state, indexed=bool(state.values.log_frequency))
        if self._main is not None:
            try:
                self._main.write(b"]")
                self._main.close()
            except OSError as exc:
                log.error("failed writing trace file %s: %s", self.path, exc)
            self._main = None

    def _save(self, state: SettingState, indexed: bool) -> None:
        text = b",".join(state.buffer)
        state.buffer.clear()
        try:
            if indexed:
                name = f"{self.path}.{self._index}"
                self._index += 1
                # Whole or not at all: a reader never sees a file half written.
                with open(f"{name}.partial", "wb") as file:
                    file.write(b"[" + text + b"]")
                os.replace(f"{name}.partial", name)
            elif self._main is None:
                self._main = open(self.path, "wb")  # noqa: SIM115 - open until shutdown
                self._main.write(b"[" + text)
            else:
                self._main.write(b"," + text)
        except OSError as exc:
            log.error("failed writing trace file %s: %s", self.path, exc)
