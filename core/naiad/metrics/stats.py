"""Inference statistics per model version, recorded once and read by every view.

The statistics extension (HTTP and gRPC) and the Prometheus endpoint read these counters.
The hot path only adds integers: durations are nanoseconds from ``time.perf_counter_ns``.
Requests are recorded from the event loop and from frontend threads (gRPC), so each record
takes the version's lock: one uncontended acquire, well under a microsecond.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from naiad.metrics.latency_histograms import Distributions, DistributionsSnapshot

#: Triton's failure reasons (``nv_inference_request_failure{reason}``): the model failed
#: the request, the request was rejected before it ran (a queue policy's timeout), ...
BACKEND, CANCELED, OTHER, REJECTED = "BACKEND", "CANCELED", "OTHER", "REJECTED"
FAILURE_REASONS = (BACKEND, CANCELED, OTHER, REJECTED)


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


@dataclass(slots=True)
class ModelStats:
    """Counters of one model version (Triton's ``ModelStatistics``)."""

    name: str
    version: int
    last_inference_ms: int = 0
    inference_count: int = 0
    execution_count: int = 0
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    cache_hit: Duration = field(default_factory=Duration)
    cache_miss: Duration = field(default_factory=Duration)
    batches: dict[int, BatchStats] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    #: latency and batch-size histograms and summaries (``--metrics-config``); None: none
    distributions: Distributions | None = field(default=None, repr=False, compare=False)
    #: dynamic batches cut, by reason (naiad.scheduling.batch_policy.CutReason values)
    batch_cuts: dict[str, int] = field(default_factory=dict)
    #: failed requests by Triton's reason (:data:`FAILURE_REASONS`); they add up to ``fail``
    failures: dict[str, int] = field(default_factory=dict)

    def record_execution(self, batch_size: int, input_ns: int, infer_ns: int,
                         output_ns: int) -> None:
        """One backend execution of a batch holding ``batch_size`` inferences."""
        with self._lock:
            self._executed(batch_size, input_ns, infer_ns, output_ns)

    def _executed(self, batch_size: int, input_ns: int, infer_ns: int, output_ns: int
                  ) -> None:
        self.execution_count += 1
        batch = self.batches.get(batch_size)
        if batch is None:
            batch = self.batches[batch_size] = BatchStats()
        batch.compute_input.add(input_ns)
        batch.compute_infer.add(infer_ns)
        batch.compute_output.add(output_ns)
        if self.distributions is not None:
            self.distributions.execution(batch_size)

    def record_executed_request(self, ok: bool, batch_size: int, total_ns: int,
                                queue_ns: int, input_ns: int, infer_ns: int,
                                output_ns: int) -> None:
        """One request that ran alone in an execution: :meth:`record_execution` and
        :meth:`record_request` together, under one acquisition of the lock."""
        now_ms = time.time_ns() // 1_000_000
        with self._lock:
            self._executed(batch_size, input_ns, infer_ns, output_ns)
            self._finished(ok, batch_size, total_ns, queue_ns, input_ns, infer_ns, output_ns,
                           BACKEND, now_ms)

    def record_request(self, ok: bool, batch_size: int, total_ns: int, queue_ns: int,
                       input_ns: int, infer_ns: int, output_ns: int,
                       failure: str = BACKEND) -> None:
        """One finished request. As in Triton, a failed request counts only as a failure
        (for ``failure``, one of :data:`FAILURE_REASONS`): its inferences, queue and
        compute times are not added."""
        now_ms = time.time_ns() // 1_000_000
        with self._lock:
            self._finished(ok, batch_size, total_ns, queue_ns, input_ns, infer_ns, output_ns,
                           failure, now_ms)

    def _finished(self, ok: bool, batch_size: int, total_ns: int, queue_ns: int,
                  input_ns: int, infer_ns: int, output_ns: int, failure: str, now_ms: int
                  ) -> None:
        if ok:
            self.inference_count += batch_size
            self.success.add(total_ns)
            self.queue.add(queue_ns)
            self.compute_input.add(input_ns)
            self.compute_infer.add(infer_ns)
            self.compute_output.add(output_ns)
            if self.distributions is not None:
                self.distributions.request(total_ns, queue_ns, input_ns, infer_ns, output_ns)
        else:
            self.fail.add(total_ns)
            self.failures[failure] = self.failures.get(failure, 0) + 1
        self.last_inference_ms = now_ms

    def record_cancelled(self, batch_size: int, arrival_ns: int) -> None:
        """A request that never ran because its client cancelled it (withdrawn from a queue,
        or refused by the instance before it ran): as Triton counts it, a failure for reason
        CANCELED, so every request a model took is a success or a failure."""
        self.record_request(False, batch_size, time.perf_counter_ns() - arrival_ns, 0, 0, 0,
                            0, CANCELED)

    def record_cache_hit(self, total_ns: int, queue_ns: int, lookup_ns: int) -> None:
        """A request answered from the response cache. As Triton counts it: a success and
        a queue entry, ``lookup_ns`` as a cache hit; no inference, no execution."""
        now_ms = time.time_ns() // 1_000_000
        with self._lock:
            self.success.add(total_ns)
            self.queue.add(queue_ns)
            self.cache_hit.add(lookup_ns)
            self.last_inference_ms = now_ms
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

    def distributions_snapshot(self) -> DistributionsSnapshot | None:
        """What the histograms and summaries hold now (None when there are none)."""
        if self.distributions is None:
            return None
        with self._lock:
            return self.distributions.snapshot()

    def as_dict(self) -> dict:
        """The statistics extension's JSON form of this model version."""
        d = _duration
        with self._lock:
            return {
                "name": self.name,
                "version": str(self.version),
                "last_inference": self.last_inference_ms,
                "inference_count": self.inference_count,
                "execution_count": self.execution_count,
                "inference_stats": {
                    "success": d(self.success),
                    "fail": d(self.fail),
                    "queue": d(self.queue),
                    "compute_input": d(self.compute_input),
                    "compute_infer": d(self.compute_infer),
                    "compute_output": d(self.compute_output),
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
                    for size, b in sorted(self.batches.items())
                ],
                "memory_usage": [],
            }


def _duration(x: Duration) -> dict[str, int]:
    return {"count": x.count, "ns": x.ns}
