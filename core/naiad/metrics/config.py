"""``--metrics-config KEY=VALUE``: which latency metrics the server records, and how.

Triton 2.51's keys, with its defaults and meanings:

- ``counter_latencies`` (true): the cumulative ``nv_inference_*_duration_us`` counters and
  the per-model cache counters (``nv_cache_*_per_model``); false removes them.
- ``summary_latencies`` (false): the ``nv_inference_*_summary_us`` summaries (and
  ``nv_cache_{hit,miss}_summary_per_model`` for models with a response cache).
- ``summary_quantiles`` (``0.5:0.05,0.9:0.01,0.95:0.001,0.99:0.001,0.999:0.001``): the
  quantiles the summaries report, each with the error Triton's estimator may make; naiad's
  quantiles are exact (naiad.metrics.quantiles), so the error is read and checked, and needs no use.
- ``histogram_latencies`` (false): ``nv_inference_first_response_histogram_ms`` for
  decoupled models.

Keys of naiad's own (Triton 2.51 ignores keys it does not know; naiad refuses them, so a
misspelt key never passes unnoticed):

- ``summary_max_age`` (60): seconds of the summaries' sliding window (Triton's is fixed at
  60 s).
- ``naiad_summary_max_samples`` (5000): the most observations one summary holds for its
  quantiles (memory bound; beyond it, a uniform sample of the window).
- ``naiad_histograms`` (true): naiad's latency and batch-size histograms per model version.
- ``naiad_latency_buckets_ms``: their latency buckets' upper bounds, in milliseconds.
- ``naiad_batch_size_buckets``: the batch-size histogram's upper bounds, in inferences.

docs/metrics.md documents every family these keys add or remove.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial

from naiad.metrics.quantiles import AGE_BUCKETS
from naiad.settings import boolean, integer, seconds

#: Triton's default summary quantiles, each with its allowed error.
DEFAULT_QUANTILES: tuple[tuple[float, float], ...] = (
    (0.5, 0.05), (0.9, 0.01), (0.95, 0.001), (0.99, 0.001), (0.999, 0.001))
#: Triton's summary window (prometheus-cpp's default ``max_age``), in seconds.
DEFAULT_SUMMARY_MAX_AGE_S = 60.0
#: Observations one summary holds at most for its quantiles (8 bytes each).
DEFAULT_SUMMARY_MAX_SAMPLES = 5000
#: The largest ``naiad_summary_max_samples`` accepted (80 MB per summary).
MAX_SUMMARY_MAX_SAMPLES = 10_000_000
#: Upper bounds of naiad's latency histograms, in milliseconds: 50 µs to 10 s.
DEFAULT_LATENCY_BUCKETS_MS: tuple[float, ...] = (
    0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)
#: Upper bounds of the executed batch-size histogram, in inferences.
DEFAULT_BATCH_SIZE_BUCKETS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


@dataclass(frozen=True)
class MetricsConfig:
    """The settings ``--metrics-config`` gives, with their defaults."""

    counter_latencies: bool = True
    summary_latencies: bool = False
    summary_quantiles: tuple[tuple[float, float], ...] = DEFAULT_QUANTILES
    summary_max_age_s: float = DEFAULT_SUMMARY_MAX_AGE_S
    summary_max_samples: int = DEFAULT_SUMMARY_MAX_SAMPLES
    histogram_latencies: bool = False
    naiad_histograms: bool = True
    latency_buckets_ms: tuple[float, ...] = DEFAULT_LATENCY_BUCKETS_MS
    batch_size_buckets: tuple[int, ...] = DEFAULT_BATCH_SIZE_BUCKETS


def _quantiles(key: str, value: str) -> tuple[tuple[float, float], ...]:
    pairs = []
    for item in value.split(","):
        quantile, colon, error = item.partition(":")
        try:
            pair = (float(quantile), float(error))
        except ValueError:
            pair = (math.nan, math.nan)
        if not colon or not all(0 <= x <= 1 for x in pair):
            raise ValueError(f"{key}={value}: expected QUANTILE:ERROR pairs separated by "
                             f"commas, each number between 0 and 1 (for example "
                             f"0.5:0.05,0.99:0.001), got '{item}'")
        pairs.append(pair)
    quantiles = [q for q, _ in pairs]
    if len(set(quantiles)) != len(quantiles):
        raise ValueError(f"{key}={value}: a quantile is listed twice")
    return tuple(pairs)


def _bounds(key: str, value: str, whole: bool) -> tuple:
    kind = "whole numbers" if whole else "numbers"
    try:
        bounds = tuple((int if whole else float)(item) for item in value.split(","))
    except ValueError:
        bounds = ()
    if not bounds or not all(0 < b < math.inf for b in bounds):
        raise ValueError(f"{key}={value}: expected positive {kind} separated by commas "
                         f"(for example {'1,2,4,8' if whole else '0.5,1,5,10'})")
    if any(not lower < upper for lower, upper in itertools.pairwise(bounds)):
        raise ValueError(f"{key}={value}: the bounds must increase strictly")
    return bounds


# key -> (field of MetricsConfig, how its value is read)
_KEYS = {
    "counter_latencies": ("counter_latencies", boolean),
    "summary_latencies": ("summary_latencies", boolean),
    "summary_quantiles": ("summary_quantiles", _quantiles),
    "summary_max_age": ("summary_max_age_s", seconds),
    "naiad_summary_max_samples": ("summary_max_samples",
                                  partial(integer, minimum=AGE_BUCKETS,
                                          maximum=MAX_SUMMARY_MAX_SAMPLES,
                                          unit="observations")),
    "histogram_latencies": ("histogram_latencies", boolean),
    "naiad_histograms": ("naiad_histograms", boolean),
    "naiad_latency_buckets_ms": ("latency_buckets_ms",
                                 lambda k, v: _bounds(k, v, whole=False)),
    "naiad_batch_size_buckets": ("batch_size_buckets",
                                 lambda k, v: _bounds(k, v, whole=True)),
}
#: Every key ``--metrics-config`` accepts.
KEYS = tuple(_KEYS)


def parse_metrics_config(values: Iterable[str] | None) -> MetricsConfig:
    """The settings of ``--metrics-config`` values (``KEY=VALUE``; the last one of a key
    wins, as in Triton). ValueError names the first value that is wrong and what was
    expected."""
    settings = {}
    for item in values or ():
        key, equals, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not equals or not key:
            raise ValueError(f"'{item}': expected KEY=VALUE")
        if key not in _KEYS:
            raise ValueError(f"{key}: not a metrics setting naiad knows (it knows "
                             f"{', '.join(KEYS)})")
        field, read = _KEYS[key]
        settings[field] = read(key, value)
    return MetricsConfig(**settings)
