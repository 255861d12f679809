"""A Prometheus histogram: counts of observations per upper bound, their sum and count.

The one histogram type of the server: custom metrics of Python models
(:mod:`naiad.metrics.custom_metrics`) and the server's own latency histograms
(``nv_inference_first_response_histogram_ms``, ``--metrics-config histogram_latencies=true``)
record into it, and the metrics endpoint renders its :class:`HistogramSnapshot`. Observing
is a binary search and one uncontended lock; reading copies the counts under the lock and
does the rest outside it, so a scrape never holds up the threads that observe.

:class:`BucketCounts` is the same count without a lock of its own, for naiad's per-version
histograms (naiad.metrics.latency_histograms): they are recorded under the version's
statistics lock, which the caller already holds, in integer units (nanoseconds, rows) and
shown in others (milliseconds).
"""

from __future__ import annotations

import bisect
import itertools
import math
import threading
from collections.abc import Sequence
from typing import NamedTuple

#: What Triton's core answers for bounds that are not strictly increasing.
UNSORTED_BOUNDS = "Bucket Boundaries must be strictly sorted"


class HistogramSnapshot(NamedTuple):
    """A histogram at one moment: ``cumulative[i]`` observations were at most
    ``bounds[i]``; the last entry of ``cumulative`` (the ``+Inf`` bucket) is ``count``."""

    bounds: tuple[float, ...]
    cumulative: tuple[int, ...]
    sum: float
    count: int


def check_bounds(bounds: Sequence[float]) -> tuple[float, ...]:
    """``bounds`` as floats, checked strictly increasing (ValueError with Triton's message
    otherwise). A last bound of +Inf is dropped: every histogram has that bucket already,
    and listing it twice would print two ``le="+Inf"`` lines (Triton 2.51 does)."""
    values = tuple(float(bound) for bound in bounds)
    if any(not lower < upper for lower, upper in itertools.pairwise(values)):
        raise ValueError(UNSORTED_BOUNDS)
    if values and values[-1] == math.inf:
        values = values[:-1]
    return values


class Histogram:
    """Observations counted in buckets with the given upper bounds (inclusive, as
    Prometheus' ``le``) and one ``+Inf`` bucket. Thread-safe."""

    __slots__ = ("_buckets", "_lock", "_sum", "bounds")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = check_bounds(bounds)
        self._buckets = [0] * (len(self.bounds) + 1)
        # Stays an int while only ints are observed (millisecond latencies print as Triton's).
        self._sum: float = 0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        """Count ``value`` (NaN goes to the ``+Inf`` bucket, as in prometheus-cpp)."""
        index = bisect.bisect_left(self.bounds, value) if value == value else len(self.bounds)
        lock = self._lock
        lock.acquire()  # not ``with``: this runs once per response when latencies are on
        self._buckets[index] += 1
        self._sum += value
        lock.release()

    def snapshot(self) -> HistogramSnapshot:
        with self._lock:
            buckets = list(self._buckets)
            total = self._sum
        cumulative = tuple(itertools.accumulate(buckets))
        return HistogramSnapshot(self.bounds, cumulative, total, cumulative[-1])


class BucketCounts:
    """Histogram counts for a caller that holds a lock of its own: ``add`` is one binary
    search and two integer additions, nothing allocated. Values are recorded in integer
    units (``bounds``, inclusive upper bounds) and shown in others: ``shown_bounds`` are
    the same bounds as the exposition prints them, and the sum is divided by ``unit``."""

    __slots__ = ("bounds", "counts", "shown_bounds", "total", "unit")

    def __init__(self, bounds: Sequence[int], shown_bounds: Sequence[float] | None = None,
                 unit: int = 1) -> None:
        self.bounds = tuple(int(bound) for bound in bounds)
        if any(not lower < upper for lower, upper in itertools.pairwise(self.bounds)):
            raise ValueError(UNSORTED_BOUNDS)
        self.shown_bounds = tuple(shown_bounds) if shown_bounds is not None else self.bounds
        if len(self.shown_bounds) != len(self.bounds):
            raise ValueError("every bound needs the value it is shown as")
        self.unit = unit
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0

    def add(self, value: int, count: int = 1) -> None:
        """Count ``count`` observations of ``value`` (the caller holds the lock)."""
        self.counts[bisect.bisect_left(self.bounds, value)] += count
        self.total += value * count

    def add_all(self, values: Sequence[int]) -> None:
        """Count each of ``values`` (the caller holds the lock): :meth:`add` for many."""
        counts, bounds, find = self.counts, self.bounds, bisect.bisect_left
        for value in values:
            counts[find(bounds, value)] += 1
        self.total += sum(values)

    def copy(self) -> tuple[list[int], int]:
        """The counts and the sum, copied (under the caller's lock) for :meth:`snapshot`."""
        return list(self.counts), self.total

    def snapshot(self, copied: tuple[list[int], int]) -> HistogramSnapshot:
        """What :meth:`copy` took, as the exposition shows it (outside the lock)."""
        counts, total = copied
        cumulative = tuple(itertools.accumulate(counts))
        shown_sum: float = total if self.unit == 1 else total / self.unit
        return HistogramSnapshot(self.shown_bounds, cumulative, shown_sum, cumulative[-1])
