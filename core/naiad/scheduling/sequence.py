"""The sequence batcher (``sequence_batching``) for stateful models, Triton's semantics.

Every request names its sequence with the ``sequence_id`` parameter (the correlation ID) and
marks the first and last request with ``sequence_start`` / ``sequence_end``. A sequence is
pinned to one instance for its whole life, so state the model keeps per sequence stays in one
place, and its requests run one at a time, in order. One execution takes the next request of
up to ``max_batch_size`` sequences of that instance:

- **direct**: each instance has ``max_batch_size`` slots (one for a model that does not
  batch); a sequence holds a slot until it ends and the batch lists the slots in order.
  A new sequence with every slot taken waits in the backlog for a free one.
- **oldest**: each instance keeps up to ``max_candidate_sequences`` sequences and batches the
  oldest waiting requests among them (``preferred_batch_size``).

Either strategy may wait up to ``max_queue_delay_microseconds`` for a fuller batch. The
control tensors and implicit state (``sequence_controls.py``) are added to each request. A
sequence with no request for ``max_sequence_idle_microseconds`` is released, and so is its
slot; a later request without START is then refused.

Differences from Triton: a direct batch has no empty slots ("null requests" with READY
false): only sequences that have a request waiting are in it.

The batcher's state belongs to the event loop: :meth:`SequenceBatcher.submit` from another
thread (gRPC) and the end of an execution (on the instance's thread) reach it with one
``call_soon_threadsafe`` each; the answer's future is completed on the loop.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial

import numpy as np
from tritonclient.grpc.model_config_pb2 import ModelConfig

from naiad.batching import shape_key
from naiad.errors import InferenceServerError, invalid_arg, unavailable
from naiad.futures import Withdrawable
from naiad.hookspecs import hookimpl
from naiad.scheduling.base import Scheduler, SchedulerFactory, SchedulingContext
from naiad.scheduling.default import batch_size_of
from naiad.scheduling.sequence_controls import SequenceControls, SequenceId
from naiad.scheduling.worker import Execution, InstanceWorker, refused_as_cancelled
from naiad.types import InferenceRequest, InferenceResponse, RequestedOutput

log = logging.getLogger("naiad.scheduling.sequence")

NS_PER_US = 1000
# The loop running on the calling thread, or None (C-fast; no exception when there is none).
_running_loop = asyncio._get_running_loop


class _Waiting(Withdrawable[InferenceResponse]):
    """One request of a sequence, and the future its client holds."""

    __slots__ = ("end", "request", "sequence", "start")

    def __init__(self, request: InferenceRequest, withdraw: Callable[[_Waiting], object]
                 ) -> None:
        super().__init__(withdraw)
        self.request = request
        self.sequence: _Sequence | None = None  # set once the loop has accepted it
        self.start = False
        self.end = False


@dataclass(slots=True, eq=False)
class _Sequence:
    id: SequenceId
    pending: collections.deque[_Waiting] = field(default_factory=collections.deque)
    lane: _Lane | None = None  # None while in the backlog
    slot: int = -1  # direct strategy only
    state: dict[str, np.ndarray] = field(default_factory=dict)
    last_seen_ns: int = 0
    running: bool = False


@dataclass(slots=True, eq=False)
class _Lane:
    """One instance and the sequences pinned to it."""

    worker: InstanceWorker
    capacity: int
    sequences: list[_Sequence] = field(default_factory=list)
    executing: bool = False
    timer: asyncio.TimerHandle | None = None


class SequenceBatcher(Scheduler):
    """Routes each sequence to one instance and batches across sequences."""

    holds_requests = True

    def __init__(self, context: SchedulingContext) -> None:
        config = context.config
        sequence = config.sequence_batching
        self.name = context.name
        self.stats = context.stats
        self.batching = config.max_batch_size > 0
        self.max_batch_size = max(config.max_batch_size, 1)
        self.controls = SequenceControls(context.name, config, context.model_dir)
        self.oldest = sequence.HasField("oldest")
        if self.oldest:
            strategy = sequence.oldest
            capacity = max(strategy.max_candidate_sequences, 1)
            preferred = [s for s in strategy.preferred_batch_size if s <= self.max_batch_size]
            self.target = max(preferred, default=self.max_batch_size)
        else:
            strategy = sequence.direct  # type: ignore[assignment]
            capacity = self.max_batch_size
            self.target = self.max_batch_size
        self.delay_ns = strategy.max_queue_delay_microseconds * NS_PER_US
        self.idle_ns = sequence.max_sequence_idle_microseconds * NS_PER_US
        self.lanes = [_Lane(worker, capacity) for worker in context.workers]
        self.live: dict[SequenceId, _Sequence] = {}
        # iterative_sequence: a request without a correlation ID is a sequence of its own,
        # which its model reschedules until it is done (Triton's iterative sequences); such
        # sequences get negative IDs, which no client can send
        self.iterative = config.sequence_batching.iterative_sequence
        self._iterative_ids = 0
        self.backlog: collections.deque[_Sequence] = collections.deque()
        self.output_names = [output.name for output in config.output]
        self._reaper: asyncio.TimerHandle | None = None
        self._drained: asyncio.Event | None = None
        self._loop = asyncio.get_running_loop()

    # --- the request side ---------------------------------------------------------------

    def submit(self, request: InferenceRequest) -> Future[InferenceResponse]:
        waiting = _Waiting(request, self._withdraw)
        self._on_loop(self._accept, waiting)
        return waiting

    def _on_loop(self, fn: Callable[..., object], *args: object) -> None:
        """Run ``fn(*args)`` on the loop: now when this is the loop's thread, else soon."""
        if _running_loop() is self._loop:
            fn(*args)
            return
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed: the server is gone
            raise unavailable(f"model '{self.name}' is unloading") from None

    def _accept(self, waiting: _Waiting) -> None:
        """Queue a request on its sequence (on the loop)."""
        if waiting.done():  # cancelled on its way to the loop
            self.stats.record_cancelled(batch_size_of(waiting.request, self.batching),
                                        waiting.request.arrival_ns)
            return
        try:
            sequence = self._sequence_of(waiting)
        except InferenceServerError as exc:
            if waiting.set_running_or_notify_cancel():
                waiting.set_result(InferenceResponse(error=exc))
            return
        waiting.sequence = sequence
        sequence.pending.append(waiting)
        sequence.last_seen_ns = time.perf_counter_ns()
        self._arm_reaper()
        if sequence.lane is not None:
            self._pump(sequence.lane)

    def _sequence_of(self, waiting: _Waiting) -> _Sequence:
        """The live sequence a request belongs to, started by it when it carries START."""
        params = waiting.request.parameters
        if self.iterative and params.get("sequence_id") in (None, 0, ""):
            self._iterative_ids += 1
            params = {**params, "sequence_id": -self._iterative_ids, "sequence_start": True,
                      "sequence_end": True}
            sequence_id: SequenceId = params["sequence_id"]
        else:
            sequence_id = self.controls.sequence_id(params)
        waiting.start = bool(params.get("sequence_start", False))
        waiting.end = bool(params.get("sequence_end", False))
        sequence = self.live.get(sequence_id)
        if sequence is None:
            if not waiting.start:
                raise invalid_arg(
                    f"inference request for sequence {sequence_id!r} to model '{self.name}' "
                    f"must specify the START flag on the first request of the sequence (the "
                    f"sequence is not active: never started, ended, or idle longer than "
                    f"{self.idle_ns // 1_000_000} ms)")
            sequence = self.live[sequence_id] = _Sequence(sequence_id)
            self._assign(sequence)
        return sequence

    def _withdraw(self, waiting: _Waiting) -> None:
        """``waiting.cancel()`` was called (any thread): a request still queued is dropped
        and never runs."""
        try:
            self._on_loop(self._drop, waiting)
        except InferenceServerError:
            pass  # the loop is gone, and the request with it

    def _drop(self, waiting: _Waiting) -> None:
        sequence = waiting.sequence
        if sequence is not None and waiting in sequence.pending:
            sequence.pending.remove(waiting)
            self.stats.record_cancelled(batch_size_of(waiting.request, self.batching),
                                        waiting.request.arrival_ns)
            self._wake_drain()

    def pending(self) -> int:
        return sum(len(s.pending) for s in self.live.values())

    async def drain(self) -> None:
        while any(s.pending or s.running for s in self.live.values()):
            self._drained = asyncio.Event()
            await self._drained.wait()

    # --- sequences and lanes ------------------------------------------------------------

    def _assign(self, sequence: _Sequence) -> None:
        """Pin a new sequence to the instance with the most room, or put it in the backlog."""
        lane = max(self.lanes, key=lambda lane: lane.capacity - len(lane.sequences))
        if len(lane.sequences) >= lane.capacity:
            self.backlog.append(sequence)
            return
        used = {s.slot for s in lane.sequences}
        sequence.slot = next(i for i in range(lane.capacity) if i not in used)
        sequence.lane = lane
        sequence.state = self.controls.initial_state()
        lane.sequences.append(sequence)
        lane.sequences.sort(key=lambda s: s.slot)

    def _release(self, sequence: _Sequence) -> None:
        """End a sequence: free its slot and give it to the oldest backlogged sequence."""
        if self.live.get(sequence.id) is sequence:
            del self.live[sequence.id]
        lane = sequence.lane
        if lane is None:
            if sequence in self.backlog:
                self.backlog.remove(sequence)
            return
        lane.sequences.remove(sequence)
        sequence.lane = None
        while self.backlog and len(lane.sequences) < lane.capacity:
            waiting = self.backlog.popleft()
            self._assign(waiting)
            if waiting.lane is not None and waiting.lane is not lane:
                self._pump(waiting.lane)
        self._pump(lane)

    # --- batches ------------------------------------------------------------------------

    def _pump(self, lane: _Lane, delay_expired: bool = False) -> None:
        """Send the lane's next batch if it is idle and a batch is due."""
        if lane.executing:
            return
        while True:
            heads = [s for s in lane.sequences if s.pending]
            if not heads:
                self._wake_drain()
                return
            if self.oldest:
                heads.sort(key=lambda s: s.pending[0].request.arrival_ns)
            # Requests share a batch only when their inputs agree past the batch dimension.
            first = shape_key(heads[0].pending[0].request)
            heads = [s for s in heads if shape_key(s.pending[0].request) == first]
            heads = heads[:self.max_batch_size]
            if self.delay_ns and len(heads) < self.target and not delay_expired:
                due = min(s.pending[0].request.arrival_ns for s in heads) + self.delay_ns
                now = time.perf_counter_ns()
                if now < due:
                    if lane.timer is None:
                        lane.timer = self._loop.call_later((due - now) / 1e9,
                                                           self._delay_expired, lane)
                    return
            if lane.timer is not None:
                lane.timer.cancel()
                lane.timer = None
            # From here on a request runs: cancel() returns False. One cancelled meanwhile
            # (its withdrawal is on its way to the loop) is left out.
            started: list[_Sequence] = []
            batch: list[_Waiting] = []
            for sequence in heads:
                waiting = sequence.pending.popleft()
                if waiting.set_running_or_notify_cancel():
                    started.append(sequence)
                    batch.append(waiting)
                else:
                    self.stats.record_cancelled(batch_size_of(waiting.request, self.batching),
                                                waiting.request.arrival_ns)
            if batch:
                break
        for sequence in started:
            sequence.running = True
        lane.executing = True
        requests = [self._prepared(s, w) for s, w in zip(started, batch, strict=True)]
        lane.worker.submit(requests).add_done_callback(
            partial(self._execution_done, lane, started, batch))

    def _delay_expired(self, lane: _Lane) -> None:
        lane.timer = None
        # Dispatch what is there: the oldest request has waited long enough.
        self._pump(lane, delay_expired=True)

    def _prepared(self, sequence: _Sequence, waiting: _Waiting) -> InferenceRequest:
        """The request the model sees: the client's inputs plus controls and state."""
        request = waiting.request
        if waiting.start:
            sequence.state = self.controls.initial_state()  # a START restarts the state
        inputs = dict(request.inputs)
        inputs.update(self.controls.control_inputs(sequence.id, waiting.start, waiting.end))
        if self.controls.states:
            inputs.update(self.controls.state_inputs(sequence.state))
            wanted = ([o.name for o in request.requested_outputs]
                      if request.requested_outputs is not None else self.output_names)
            names = dict.fromkeys([*wanted, *self.controls.state_outputs])
            requested = [RequestedOutput(name) for name in names]
            return dataclasses.replace(request, inputs=inputs, requested_outputs=requested)
        return dataclasses.replace(request, inputs=inputs)

    def _execution_done(self, lane: _Lane, heads: list[_Sequence], batch: list[_Waiting],
                        done: Future[Execution]) -> None:
        """On the instance's thread (or at once, when a closing instance refused the
        batch): the rest happens on the loop, always as a new callback, so refusing a
        lane's queue does not recurse."""
        try:
            self._loop.call_soon_threadsafe(self._finished, lane, heads, batch, done)
        except RuntimeError:  # the loop is closed: the server is gone, and the requests
            pass

    def _finished(self, lane: _Lane, heads: list[_Sequence], batch: list[_Waiting],
                  done: Future[Execution]) -> None:
        lane.executing = False
        execution = done.result()
        finished = time.perf_counter_ns()
        start, end = execution.start_ns, execution.end_ns
        rows = sum(batch_size_of(w.request, self.batching) for w in batch)
        if not all(map(refused_as_cancelled, execution.responses)):  # the model ran
            self.stats.record_execution(rows, 0, end - start, finished - end)
        ok = not execution.failed
        ended = []
        for sequence, waiting, response in zip(heads, batch, execution.responses, strict=True):
            sequence.running = False
            sequence.last_seen_ns = finished
            request = waiting.request
            queued = max(start - request.arrival_ns, 0)
            if refused_as_cancelled(response):
                self.stats.record_cancelled(batch_size_of(request, self.batching),
                                            request.arrival_ns)
            else:
                self.stats.record_request(ok, batch_size_of(request, self.batching),
                                          finished - request.arrival_ns, queued, 0,
                                          end - start, finished - end)
            request.durations = (queued, 0, end - start, finished - end)
            if response.error is None:
                response.outputs = self.controls.take_state(response.outputs, sequence.state)
            waiting.set_result(response)
            if waiting.end:
                ended.append(sequence)
        for sequence in ended:
            if not sequence.pending:
                self._release(sequence)
        self._pump(lane)

    # --- idle sequences -----------------------------------------------------------------

    def _arm_reaper(self) -> None:
        if self._reaper is None and self.live:
            self._reaper = self._loop.call_later(self.idle_ns / 1e9, self._reap)

    def _reap(self) -> None:
        """Release sequences idle longer than ``max_sequence_idle_microseconds``."""
        self._reaper = None
        now = time.perf_counter_ns()
        for sequence in list(self.live.values()):
            if (not sequence.pending and not sequence.running
                    and now - sequence.last_seen_ns >= self.idle_ns):
                log.info("model '%s': sequence %r idle for %d ms, released", self.name,
                         sequence.id, (now - sequence.last_seen_ns) // 1_000_000)
                self._release(sequence)
        self._arm_reaper()

    def _wake_drain(self) -> None:
        if self._drained is not None and not any(s.pending or s.running
                                                 for s in self.live.values()):
            self._drained.set()


@hookimpl
def naiad_scheduler(config: ModelConfig) -> SchedulerFactory | None:
    if config.HasField("sequence_batching"):
        return SequenceBatcher
    return None
