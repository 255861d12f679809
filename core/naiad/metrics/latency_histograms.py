"""Latency and batch-size distributions of one model version: naiad's histograms and
Triton's summaries.

Counters (naiad.metrics.stats) say how much time went where in total; these say how it was spread.
Two kinds, each switched by ``--metrics-config`` (naiad.metrics.config):

- naiad's **histograms** (``naiad_histograms``, on by default): request, queue and compute
  (infer) durations of each successful request, and the batch size of each execution.
  Durations are counted in nanoseconds against bounds converted once, at load, from the
  configured milliseconds, so recording one request is three binary searches into lists of
  under twenty integers and an integer addition each; the sums are added once per fold
  (:meth:`Distributions.requests` takes a fold's requests as columns).
- Triton's **summaries** (``summary_latencies``, off by default): the request, queue and
  compute input/infer/output durations in whole microseconds, as Triton observes them,
  over a sliding window (naiad.metrics.quantiles). As in Triton 2.51, a version with a response
  cache has no request summary, and has cache hit and miss summaries instead.

Nothing here takes a lock: every method runs under the version's statistics lock, which
the caller (:class:`naiad.metrics.stats.ModelStats`) holds while it folds its pending records
into the histograms, or while it hands a request that just ended to the summaries (a
summary's window needs the time of each observation).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import NamedTuple

from naiad.metrics.config import MetricsConfig
from naiad.metrics.histogram import BucketCounts, HistogramSnapshot
from naiad.metrics.quantiles import QuantileSample, WindowQuantiles

NS_PER_MS = 1_000_000
NS_PER_US = 1_000
NS_PER_S = 1_000_000_000

#: The histograms, by key: request, queue and compute (infer) durations, executed batches.
HISTOGRAMS = ("request", "queue", "compute_infer", "batch_size")
#: The summaries, by key, in Triton's order.
SUMMARIES = ("request", "queue", "compute_input", "compute_infer", "compute_output",
             "cache_hit", "cache_miss")


class DistributionsSnapshot(NamedTuple):
    """A version's distributions at one moment: histograms ready to print, and the
    summaries' samples (their quantiles are computed outside the statistics lock)."""

    histograms: dict[str, HistogramSnapshot]
    summaries: dict[str, QuantileSample]


class Distributions:
    """The histograms and summaries of one model version, as ``config`` asks.
    ``response_cache``: the version has ``response_cache { enable: true }``."""

    __slots__ = ("_batch_size", "_compute_infer", "_queue", "_request", "_request_summaries",
                 "_summaries", "quantiles", "summarized")

    def __init__(self, config: MetricsConfig, response_cache: bool = False) -> None:
        self._request = self._queue = self._compute_infer = self._batch_size = None
        if config.naiad_histograms:
            shown = config.latency_buckets_ms
            bounds_ns = [round(bound * NS_PER_MS) for bound in shown]
            self._request = BucketCounts(bounds_ns, shown, NS_PER_MS)
            self._queue = BucketCounts(bounds_ns, shown, NS_PER_MS)
            self._compute_infer = BucketCounts(bounds_ns, shown, NS_PER_MS)
            self._batch_size = BucketCounts(config.batch_size_buckets)
        #: the quantiles the summaries report
        self.quantiles = tuple(q for q, _ in config.summary_quantiles)
        self._summaries: dict[str, WindowQuantiles] = {}
        if config.summary_latencies:
            max_age_ns = round(config.summary_max_age_s * NS_PER_S)
            # Triton 2.51 leaves the request summary out for a cached model (a hit's
            # duration would mislead) and has cache summaries only for cached models.
            left_out = {"request"} if response_cache else {"cache_hit", "cache_miss"}
            for key in SUMMARIES:
                if key not in left_out:
                    self._summaries[key] = WindowQuantiles(max_age_ns,
                                                           config.summary_max_samples)
        #: True with summaries (their windows need each observation as it is made)
        self.summarized = bool(self._summaries)
        # what summarize_request() observes, in its order (looked up once, here)
        self._request_summaries = tuple(self._summaries.get(key) for key in SUMMARIES[:5])

    def requests(self, totals: Sequence[int], queues: Sequence[int], infers: Sequence[int]
                 ) -> None:
        """Successful requests that ran their model into the histograms, as columns:
        request i took ``totals[i]``, of which ``queues[i]`` queued and ``infers[i]``
        computed (a fold counts many at once; the summaries took them as they ended)."""
        if self._request is not None:
            self._request.add_all(totals)
            self._queue.add_all(queues)  # type: ignore[union-attr]
            self._compute_infer.add_all(infers)  # type: ignore[union-attr]

    def summarize_request(self, total_ns: int, queue_ns: int, input_ns: int, infer_ns: int,
                          output_ns: int) -> None:
        """One successful request that ran its model into the summaries, as it ends (their
        sliding windows need the time of each observation)."""
        now = time.monotonic_ns()
        request_us, queue_us, input_us, infer_us, output_us = self._request_summaries
        if request_us is not None:  # None for a cached model, as in Triton
            request_us.observe(total_ns // NS_PER_US, now)
        queue_us.observe(queue_ns // NS_PER_US, now)  # type: ignore[union-attr]
        input_us.observe(input_ns // NS_PER_US, now)  # type: ignore[union-attr]
        infer_us.observe(infer_ns // NS_PER_US, now)  # type: ignore[union-attr]
        output_us.observe(output_ns // NS_PER_US, now)  # type: ignore[union-attr]

    def execution(self, batch_size: int, count: int = 1) -> None:
        """``count`` executions of a batch of ``batch_size`` inferences."""
        if self._batch_size is not None:
            self._batch_size.add(batch_size, count)

    def cache_hit(self, total_ns: int, queue_ns: int, lookup_ns: int) -> None:
        """A request answered from the response cache: a request with its duration and
        queue time (as Triton counts it, it includes cached requests), no compute."""
        if self._request is not None:
            self._request.add(total_ns)
            self._queue.add(queue_ns)  # type: ignore[union-attr]
        if self.summarized:
            now = time.monotonic_ns()
            self._summaries["queue"].observe(queue_ns // NS_PER_US, now)
            hit = self._summaries.get("cache_hit")
            if hit is not None:
                hit.observe(lookup_ns // NS_PER_US, now)

    def cache_miss(self, ns: int) -> None:
        """A request the cache did not hold: ``ns`` of lookup and insert."""
        miss = self._summaries.get("cache_miss")
        if miss is not None:
            miss.observe(ns // NS_PER_US, time.monotonic_ns())

    def snapshot(self) -> DistributionsSnapshot:
        """Copies of everything recorded (the caller holds the statistics lock)."""
        histograms = {}
        for key, counts in (("request", self._request), ("queue", self._queue),
                            ("compute_infer", self._compute_infer),
                            ("batch_size", self._batch_size)):
            if counts is not None:
                histograms[key] = counts.snapshot(counts.copy())
        now = time.monotonic_ns()
        summaries = {key: summary.snapshot(now) for key, summary in self._summaries.items()}
        return DistributionsSnapshot(histograms, summaries)


def distributions_for(config: MetricsConfig, response_cache: bool = False
                      ) -> Distributions | None:
    """What a model version records beyond its counters; None when ``config`` asks for
    neither histograms nor summaries (then recording costs nothing at all)."""
    if not (config.naiad_histograms or config.summary_latencies):
        return None
    return Distributions(config, response_cache)
