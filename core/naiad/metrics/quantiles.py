"""Quantiles over a sliding time window: the estimator behind Triton's summaries.

``--metrics-config summary_latencies=true`` turns on Triton's ``nv_*_summary_*`` families,
whose ``quantile`` lines describe only the recent past. Triton (prometheus-cpp) keeps five
age buckets that rotate every fifth of the window (60 s) and estimates each quantile with
the CKMS algorithm within a configured error. naiad keeps the same window shape, five age
buckets rotated every ``max_age / 5``, so an observation counts for between four fifths of
the window and the whole of it, and answers **exact** quantiles of the values it holds.

Memory is bounded by ``max_samples`` values per summary (``naiad_summary_max_samples``):
each age bucket holds at most a fifth of them. An age bucket that sees more values than it
may hold keeps a uniform random sample of them (reservoir sampling), and each kept value
then stands for ``seen / kept`` observations; quantiles are exact whenever the window saw
no more values than its buckets hold, and estimated from that uniform sample otherwise.

``_count`` and ``_sum`` count every observation since the start, as Prometheus summaries do
(prometheus-cpp too); only the quantiles are windowed.

Not thread-safe: :meth:`WindowQuantiles.observe` runs under the model version's statistics
lock (naiad.metrics.stats), and a scrape copies the buckets under that lock (:meth:`snapshot`) and
sorts the copy outside it.
"""

from __future__ import annotations

import math
import random
from array import array
from collections import deque
from collections.abc import Sequence
from typing import NamedTuple

#: Age buckets of a window, as prometheus-cpp's summaries (``age_buckets = 5``).
AGE_BUCKETS = 5
#: Relative slack when comparing a cumulative weight with ``q * total`` (float rounding:
#: 0.9 * 10 is 9.000000000000002).
_RANK_SLACK = 1e-9


class _AgeBucket:
    __slots__ = ("seen", "start_ns", "values")

    def __init__(self, start_ns: int) -> None:
        self.start_ns = start_ns
        self.seen = 0
        self.values = array("d")


class QuantileSample(NamedTuple):
    """What a window held at one moment: (values, weight of each) per age bucket, and the
    summary's running count and sum."""

    buckets: tuple[tuple[array, float], ...]
    count: int
    sum: float

    def quantiles(self, qs: Sequence[float]) -> list[float]:
        """The value at each quantile in ``qs`` (nearest rank: the smallest held value
        whose cumulative weight reaches ``q`` of the total; NaN for an empty window)."""
        if not self.buckets:
            return [math.nan] * len(qs)
        if len(self.buckets) == 1 or all(w == 1.0 for _, w in self.buckets):
            values = sorted(v for held, _ in self.buckets for v in held)
            if not values:
                return [math.nan] * len(qs)
            n = len(values)
            return [values[max(0, math.ceil(q * n * (1 - _RANK_SLACK)) - 1)] if q > 0
                    else values[0] for q in qs]
        weighted = sorted((v, w) for held, w in self.buckets for v in held)
        total = sum(w for _, w in weighted)
        answers = []
        for q in qs:
            target = q * total * (1 - _RANK_SLACK)
            cumulative = 0.0
            answer = weighted[-1][0]
            for value, weight in weighted:
                cumulative += weight
                if cumulative >= target:
                    answer = value
                    break
            answers.append(answer)
        return answers


class WindowQuantiles:
    """The values observed over the last ``max_age_ns`` (monotonic clock), at most
    ``max_samples`` of them held, and the running count and sum of every observation."""

    __slots__ = ("_buckets", "_max_age_ns", "_per_bucket", "_random", "_width_ns", "count",
                 "sum")

    def __init__(self, max_age_ns: int, max_samples: int,
                 rng: random.Random | None = None) -> None:
        if max_age_ns <= 0:
            raise ValueError(f"a summary's window must be positive, got {max_age_ns} ns")
        if max_samples < AGE_BUCKETS:
            raise ValueError(f"a summary must hold at least {AGE_BUCKETS} samples (one per "
                             f"age bucket), got {max_samples}")
        self._max_age_ns = max_age_ns
        self._width_ns = max(1, max_age_ns // AGE_BUCKETS)
        self._per_bucket = max_samples // AGE_BUCKETS
        self._buckets: deque[_AgeBucket] = deque()
        self._random = rng or random.Random()
        self.count = 0
        self.sum: float = 0

    def observe(self, value: float, now_ns: int) -> None:
        """Count ``value``, observed at ``now_ns`` (never earlier than the last one)."""
        self.count += 1
        self.sum += value
        buckets = self._buckets
        start = now_ns - now_ns % self._width_ns
        if not buckets or buckets[-1].start_ns < start:
            buckets.append(_AgeBucket(start))
            self._expire(now_ns)
        bucket = buckets[-1]
        bucket.seen += 1
        held = bucket.values
        if len(held) < self._per_bucket:
            held.append(value)
            return
        # Reservoir sampling: the held values stay a uniform sample of the bucket's values.
        slot = self._random.randrange(bucket.seen)
        if slot < self._per_bucket:
            held[slot] = value

    def snapshot(self, now_ns: int) -> QuantileSample:
        """A copy of what the window holds at ``now_ns`` (cheap: no sorting)."""
        self._expire(now_ns)
        held = tuple((array("d", b.values), b.seen / len(b.values))
                     for b in self._buckets if b.values)
        return QuantileSample(held, self.count, self.sum)

    def _expire(self, now_ns: int) -> None:
        buckets = self._buckets
        while buckets and buckets[0].start_ns + self._max_age_ns <= now_ns:
            buckets.popleft()
