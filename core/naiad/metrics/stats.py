"""Inference statistics per model version, recorded once and read by every view.

The statistics extension (HTTP and gRPC) and the Prometheus endpoint read these counters.
Durations are integer nanoseconds from ``time.perf_counter_ns``.

Recording is deferred. A request's records (its execution, its end, or both at once) append
one tuple to the version's list of pending records and return: no lock, no arithmetic.
``list.append`` is atomic, and requests are recorded from the event loop, frontend threads
(gRPC) and instance threads. The pending records are folded into the counters under the
version's lock, in one loop, when :data:`FOLD_BOUND` of them wait or when anything reads
the statistics: each counter a pending record adds to is an attribute that folds before it
answers (:class:`_Folded`), and :meth:`ModelStats.as_dict` and
:meth:`ModelStats.distributions_snapshot` fold first, so no reader sees a number that a
record has not reached yet. The rarer records (cache hits and misses, batch cuts) take the
lock at once; a cache hit folds first, so that ``last_inference_ms`` ends at the latest
record. With summaries on (``summary_latencies``), a successful request also goes into the
summaries as it is recorded, under the lock: their sliding windows need the time of each
observation.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from naiad.metrics.latency_histograms import Distributions, DistributionsSnapshot

#: Triton's failure reasons (``nv_inference_request_failure{reason}``): the model failed
#: the request, the request was rejected before it ran (a queue policy's timeout), ...
BACKEND, CANCELED, OTHER, REJECTED = "BACKEND", "CANCELED", "OTHER", "REJECTED"
FAILURE_REASONS = (BACKEND, CANCELED, OTHER, REJECTED)

#: Pending records that make the recording thread fold them. Folding costs a lock and a
#: call per fold, shared by every record it folds: past a few dozen records that share is
#: small, and a longer list only holds more memory (about 150 bytes a record) and keeps
#: the lock longer (tens of microseconds at this bound) for whoever folds. Readers fold
#: whatever waits, so the bound never delays what they see.
FOLD_BOUND = 256

NS_PER_MS = 1_000_000

# time.time_ns, looked up once: it runs for every request
_wall_clock_ns = time.time_ns


@dataclass(slots=True)
class Duration:
    """A count and a cumulative duration in nanoseconds (Triton's ``StatisticDuration``)."""

    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns


@dataclass(slots=True)
class BatchStats:
    """Executions of one batch size (Triton's ``InferBatchStatistics``)."""

    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


class _Folded:
    """A counter that pending records add to, kept in the slot of the same name with a
    leading underscore. Reading it folds the pending records first, so every reader (the
    metrics endpoint's lambdas, tests, code yet to be written) sees every record made."""

    __slots__ = ("_slot",)

    def __set_name__(self, owner: type, name: str) -> None:
        self._slot = "_" + name

    def __get__(self, stats: ModelStats | None, owner: type | None = None) -> Any:
        if stats is None:
            return self
        if stats._pending:
            stats.fold()
        return getattr(stats, self._slot)


class ModelStats:
    """Counters of one model version (Triton's ``ModelStatistics``).

    A pending record is one tuple, in this order: ``executed`` (it counts an execution of
    ``batch_size``), ``requested`` (it counts a finished request), ``ok``, ``batch_size``,
    ``total_ns``, ``queue_ns``, ``input_ns``, ``infer_ns``, ``output_ns``, ``failure`` (a
    failed request's reason) and ``wall_ns``: ``time.time_ns()`` when it was recorded,
    for ``last_inference_ms``. The clock is read per record, not at the fold, because the
    last inference is the last record's time; the caller's own clock reading cannot come
    here (the ``record_*`` signatures stay), and reading a monotonic clock instead would
    cost the same call and need an anchor to convert it.
    """

    __slots__ = ("_batches", "_compute_infer", "_compute_input", "_compute_output",
                 "_execution_count", "_fail", "_failures", "_inference_count",
                 "_last_inference_ms", "_lock", "_pending", "_queue", "_success", "_summarized",
                 "batch_cuts", "cache_hit", "cache_miss", "distributions", "name",
                 "version")

    # What the pending records add to: read through the fold.
    last_inference_ms = _Folded()
    inference_count = _Folded()
    execution_count = _Folded()
    success = _Folded()
    fail = _Folded()
    queue = _Folded()
    compute_input = _Folded()
    compute_infer = _Folded()
    compute_output = _Folded()
    #: executions by batch size
    batches = _Folded()
    #: failed requests by Triton's reason (:data:`FAILURE_REASONS`); they add up to ``fail``
    failures = _Folded()

    def __init__(self, name: str, version: int,
                 distributions: Distributions | None = None) -> None:
        self.name = name
        self.version = version
        #: latency and batch-size histograms and summaries (``--metrics-config``); None: none
        self.distributions = distributions
        self._last_inference_ms = 0
        self._inference_count = 0
        self._execution_count = 0
        self._success, self._fail, self._queue = Duration(), Duration(), Duration()
        self._compute_input, self._compute_infer = Duration(), Duration()
        self._compute_output = Duration()
        self._batches: dict[int, BatchStats] = {}
        self._failures: dict[str, int] = {}
        # recorded at once, under the lock (rarer than requests)
        self.cache_hit, self.cache_miss = Duration(), Duration()
        #: dynamic batches cut, by reason (naiad.scheduling.batch_policy.CutReason values)
        self.batch_cuts: dict[str, int] = {}
        self._lock = threading.Lock()
        self._pending: list[tuple] = []
        # Summaries observe each duration at the time it is made (a sliding window): with
        # summaries on, a successful request is observed there at once, under the lock
        # (:meth:`_summarize`); the counters and histograms still fold in batches.
        self._summarized = distributions is not None and distributions.summarized

    def record_execution(self, batch_size: int, input_ns: int, infer_ns: int,
                         output_ns: int) -> None:
        """One backend execution of a batch holding ``batch_size`` inferences."""
        pending = self._pending
        pending.append((True, False, True, batch_size, 0, 0, input_ns, infer_ns, output_ns,
                        None, 0))
        if len(pending) >= FOLD_BOUND:
            self.fold()

    def record_executed_request(self, ok: bool, batch_size: int, total_ns: int,
                                queue_ns: int, input_ns: int, infer_ns: int,
                                output_ns: int) -> None:
        """One request that ran alone in an execution: :meth:`record_execution` and
        :meth:`record_request` together, as one pending record."""
        pending = self._pending
        pending.append((True, True, ok, batch_size, total_ns, queue_ns, input_ns, infer_ns,
                        output_ns, BACKEND, _wall_clock_ns()))
        if ok and self._summarized:
            self._summarize(total_ns, queue_ns, input_ns, infer_ns, output_ns)
        if len(pending) >= FOLD_BOUND:
            self.fold()

    def record_request(self, ok: bool, batch_size: int, total_ns: int, queue_ns: int,
                       input_ns: int, infer_ns: int, output_ns: int,
                       failure: str = BACKEND) -> None:
        """One finished request. As in Triton, a failed request counts only as a failure
        (for ``failure``, one of :data:`FAILURE_REASONS`): its inferences, queue and
        compute times are not added."""
        pending = self._pending
        pending.append((False, True, ok, batch_size, total_ns, queue_ns, input_ns, infer_ns,
                        output_ns, failure, _wall_clock_ns()))
        if ok and self._summarized:
            self._summarize(total_ns, queue_ns, input_ns, infer_ns, output_ns)
        if len(pending) >= FOLD_BOUND:
            self.fold()

    def _summarize(self, total_ns: int, queue_ns: int, input_ns: int, infer_ns: int,
                   output_ns: int) -> None:
        """A successful request's durations into the summaries, now: their windows need
        the time of each observation, which a later fold would not have."""
        with self._lock:
            self.distributions.summarize_request(  # type: ignore[union-attr]
                total_ns, queue_ns, input_ns, infer_ns, output_ns)

    def record_cancelled(self, batch_size: int, arrival_ns: int) -> None:
        """A request that never ran because its client cancelled it (withdrawn from a queue,
        or refused by the instance before it ran): as Triton counts it, a failure for reason
        CANCELED, so every request a model took is a success or a failure."""
        self.record_request(False, batch_size, time.perf_counter_ns() - arrival_ns, 0, 0, 0,
                            0, CANCELED)

    def record_cache_hit(self, total_ns: int, queue_ns: int, lookup_ns: int) -> None:
        """A request answered from the response cache. As Triton counts it: a success and
        a queue entry, ``lookup_ns`` as a cache hit; no inference, no execution."""
        now_ms = _wall_clock_ns() // NS_PER_MS
        with self._lock:
            self._fold()  # first: last_inference_ms must end at this, the latest record
            self._success.add(total_ns)
            self._queue.add(queue_ns)
            self.cache_hit.add(lookup_ns)
            self._last_inference_ms = now_ms
            if self.distributions is not None:
                self.distributions.cache_hit(total_ns, queue_ns, lookup_ns)

    def record_cache_miss(self, ns: int) -> None:
        """A request the response cache did not hold: ``ns`` of lookup and insert."""
        with self._lock:
            self.cache_miss.add(ns)
            if self.distributions is not None:
                self.distributions.cache_miss(ns)

    def record_batch_cut(self, reason: str) -> None:
        """The dynamic batcher cut a batch, for ``reason`` (a ``CutReason`` value)."""
        with self._lock:
            self.batch_cuts[reason] = self.batch_cuts.get(reason, 0) + 1

    def fold(self) -> None:
        """Add the pending records to the counters now (readers need not call it: the
        counters' attributes, :meth:`as_dict` and :meth:`distributions_snapshot` do)."""
        with self._lock:
            self._fold()

    def _fold(self) -> None:
        """:meth:`fold`, for a caller that holds the lock."""
        pending = self._pending
        n = len(pending)
        if n == 0:
            return
        records = pending[:n]
        # Threads go on appending meanwhile, but only at the end, and only a fold deletes
        # (under the lock): the first n records are exactly the ones copied above.
        del pending[:n]
        self._count(records)

    def _count(self, records: list[tuple]) -> None:
        """Add ``records`` (pending records, in the order they were made) to the counters:
        one loop sorts them into successes, failures and executions by batch size, then
        each counter adds the sum of a column (``zip`` and ``sum`` do the per-record work
        in C: fewer interpreted instructions than an addition per record and counter)."""
        succeeded: list[tuple] = []
        failed: list[tuple] = []
        executed_by_size: dict[int, list[tuple]] = {}
        last_wall_ns = None
        for record in records:
            executed, requested, ok, batch_size, _, _, _, _, _, _, wall_ns = record
            if executed:
                same_size = executed_by_size.get(batch_size)
                if same_size is None:
                    executed_by_size[batch_size] = [record]
                else:
                    same_size.append(record)
            if requested:
                last_wall_ns = wall_ns
                if ok:
                    succeeded.append(record)
                else:
                    failed.append(record)
        if succeeded:
            self._count_successes(succeeded)
        if failed:
            self._count_failures(failed)
        if executed_by_size:
            self._count_executions(executed_by_size)
        if last_wall_ns is not None:
            self._last_inference_ms = last_wall_ns // NS_PER_MS

    def _count_successes(self, records: list[tuple]) -> None:
        """Successful requests: their inferences, durations and histograms."""
        n = len(records)
        _, _, _, batch_sizes, totals, queues, inputs, infers, outputs, _, _ = zip(
            *records, strict=True)
        self._inference_count += sum(batch_sizes)
        self._success.add(sum(totals), n)
        self._queue.add(sum(queues), n)
        self._compute_input.add(sum(inputs), n)
        self._compute_infer.add(sum(infers), n)
        self._compute_output.add(sum(outputs), n)
        if self.distributions is not None:
            self.distributions.requests(totals, queues, infers)

    def _count_failures(self, records: list[tuple]) -> None:
        """Failed requests (rarer): only their count, total duration and reasons."""
        failures = self._failures
        fail_ns = 0
        for _, _, _, _, total_ns, _, _, _, _, reason, _ in records:
            failures[reason] = failures.get(reason, 0) + 1
            fail_ns += total_ns
        self._fail.add(fail_ns, len(records))

    def _count_executions(self, executed_by_size: dict[int, list[tuple]]) -> None:
        """Executions, by batch size: their compute durations and the batch histogram."""
        batches = self._batches
        for batch_size, records in executed_by_size.items():
            n = len(records)
            _, _, _, _, _, _, inputs, infers, outputs, _, _ = zip(*records, strict=True)
            self._execution_count += n
            batch = batches.get(batch_size)
            if batch is None:
                batch = batches[batch_size] = BatchStats()
            batch.compute_input.add(sum(inputs), n)
            batch.compute_infer.add(sum(infers), n)
            batch.compute_output.add(sum(outputs), n)
            if self.distributions is not None:
                self.distributions.execution(batch_size, n)

    def distributions_snapshot(self) -> DistributionsSnapshot | None:
        """What the histograms and summaries hold now (None when there are none)."""
        if self.distributions is None:
            return None
        with self._lock:
            self._fold()
            return self.distributions.snapshot()

    def as_dict(self) -> dict:
        """The statistics extension's JSON form of this model version."""
        d = _duration
        with self._lock:
            self._fold()
            return {
                "name": self.name,
                "version": str(self.version),
                "last_inference": self._last_inference_ms,
                "inference_count": self._inference_count,
                "execution_count": self._execution_count,
                "inference_stats": {
                    "success": d(self._success),
                    "fail": d(self._fail),
                    "queue": d(self._queue),
                    "compute_input": d(self._compute_input),
                    "compute_infer": d(self._compute_infer),
                    "compute_output": d(self._compute_output),
                    "cache_hit": d(self.cache_hit),
                    "cache_miss": d(self.cache_miss),
                },
                "response_stats": {},
                "batch_stats": [
                    {
                        "batch_size": size,
                        "compute_input": d(b.compute_input),
                        "compute_infer": d(b.compute_infer),
                        "compute_output": d(b.compute_output),
                    }
                    for size, b in sorted(self._batches.items())
                ],
                "memory_usage": [],
            }


def _duration(x: Duration) -> dict[str, int]:
    return {"count": x.count, "ns": x.ns}
