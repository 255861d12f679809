"""In-process timing of a format: the runner called back to back at each batch size, in
windows of a fixed length, until the last windows agree on throughput within the stability
percentage (perf_analyzer's criterion) or the window count runs out."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from naiad_convert.formats.base import Runner

SECONDS = 1.0
DEFAULT_WINDOW_S = 0.5 * SECONDS
DEFAULT_STABILITY_PERCENT = 10.0
DEFAULT_MAX_WINDOWS = 10
STABLE_WINDOWS = 3   # this many consecutive windows must agree
WARMUP_CALLS = 3


@dataclass(frozen=True)
class TimingSettings:
    batch_sizes: tuple[int, ...]
    window_s: float = DEFAULT_WINDOW_S
    stability_percent: float = DEFAULT_STABILITY_PERCENT
    max_windows: int = DEFAULT_MAX_WINDOWS


@dataclass
class BatchTiming:
    batch_size: int
    throughput: float   # inferences (rows) per second
    p50_ms: float
    p99_ms: float
    calls: int
    stable: bool

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BatchTiming:
        return cls(**data)


def _window(runner: Runner, inputs: dict[str, np.ndarray], length_s: float
            ) -> tuple[int, list[float], float]:
    latencies = []
    start = time.perf_counter()
    end = start + length_s
    now = start
    while now < end:
        before = now
        runner(inputs)
        now = time.perf_counter()
        latencies.append(now - before)
    return len(latencies), latencies, now - start


def time_batch(runner: Runner, inputs: dict[str, np.ndarray], batch_size: int,
               settings: TimingSettings) -> BatchTiming:
    for _ in range(WARMUP_CALLS):
        runner(inputs)
    windows: list[tuple[int, list[float], float]] = []
    stable = False
    while len(windows) < settings.max_windows:
        windows.append(_window(runner, inputs, settings.window_s))
        if len(windows) >= STABLE_WINDOWS:
            rates = [count / elapsed for count, _, elapsed in windows[-STABLE_WINDOWS:]]
            mean = sum(rates) / len(rates)
            if all(abs(r - mean) <= mean * settings.stability_percent / 100 for r in rates):
                stable = True
                break
    kept = windows[-STABLE_WINDOWS:]
    calls = sum(count for count, _, _ in kept)
    elapsed = sum(seconds for _, _, seconds in kept)
    latencies = np.array([lat for _, lats, _ in kept for lat in lats]) * 1000
    return BatchTiming(batch_size, calls * batch_size / elapsed,
                       float(np.percentile(latencies, 50)), float(np.percentile(latencies, 99)),
                       calls, stable)


def time_runner(runner: Runner, batch_inputs: Callable[[int], dict[str, np.ndarray]],
                settings: TimingSettings,
                progress: Callable[[str], None] | None = None) -> list[BatchTiming]:
    results = []
    for size in settings.batch_sizes:
        result = time_batch(runner, batch_inputs(size), size, settings)
        if progress:
            progress(f"batch {size}: {result.throughput:.1f} infer/s, p50 {result.p50_ms:.3f} "
                     f"ms, p99 {result.p99_ms:.3f} ms{'' if result.stable else ' (unstable)'}")
        results.append(result)
    return results


def batch_sizes_up_to(largest: int) -> tuple[int, ...]:
    """1, 2, 4, ... up to ``largest`` (included)."""
    if largest <= 0:
        return (1,)
    sizes = [1]
    while sizes[-1] * 2 < largest:
        sizes.append(sizes[-1] * 2)
    if largest > 1:
        sizes.append(largest)
    return tuple(sizes)


def best(timings: Sequence[BatchTiming]) -> BatchTiming | None:
    return max(timings, key=lambda t: t.throughput, default=None)
