"""The measurement loop: worker processes carry the load, the runner cuts it into windows,
reads the server's statistics at each cut, and stops a level when the last three windows
agree (perf_analyzer's stability rule) or after max_trials windows."""

from __future__ import annotations

import math
import multiprocessing
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from naiad_perf.api import LoadSpec, Measurement
from naiad_perf.inputs import build_streams
from naiad_perf.model import (
    ModelInfo,
    PerfError,
    ServerCounters,
    check_load,
    control_client,
    read_counters,
    read_model,
)
from naiad_perf.slots import DEFAULT_SEQUENCE_IDS
from naiad_perf.worker import RATE_SLOTS_PER_WORKER, Level, worker_main

# A worker process imports numpy, grpc and tritonclient before it is ready.
WORKER_START_TIMEOUT_S = 120.0
# A command to a worker (start, collect, stop) is answered within this; stop waits for the
# requests in flight, each bounded by the worker's request timeout.
WORKER_REPLY_TIMEOUT_S = 90.0
# count_windows: how often the runner looks whether a window has its requests.
COUNT_POLL_S = 0.05
# count_windows: a window also ends after this many measurement intervals, so a stalled
# server cannot hold the run forever.
COUNT_WINDOW_MAX_INTERVALS = 20
# perf_analyzer judges stability over the last three windows.
STABLE_WINDOWS = 3
# Requests per worker the automatic choice aims at in request-rate mode (per second).
RATE_PER_WORKER = 1000.0


@dataclass
class Window:
    duration_s: float
    records: list[tuple[int, int, int, int, bool]]
    cpu_s: float
    server: ServerCounters
    errors: int = 0
    delayed: int = 0
    error_messages: list[str] = field(default_factory=list)

    def ok(self) -> np.ndarray:
        return np.array([(end - start, client, responses) for start, end, client, responses,
                         good in self.records if good], dtype=np.int64).reshape(-1, 3)

    def throughput(self, batch: int) -> float:
        return len(self.ok()) * batch / self.duration_s if self.duration_s > 0 else 0.0


def nearest_rank(sorted_us: np.ndarray, percentile: float) -> float:
    """The percentile of sorted latencies by nearest rank."""
    if not len(sorted_us):
        return 0.0
    rank = max(math.ceil(percentile / 100.0 * len(sorted_us)), 1)
    return float(sorted_us[rank - 1])


def _latency_key(spec: LoadSpec, window: Window) -> float:
    latencies = window.ok()[:, 0] / 1e3
    if not len(latencies):
        return 0.0
    if spec.percentile is not None:
        return nearest_rank(np.sort(latencies), spec.percentile)
    return float(latencies.mean())


def is_stable(spec: LoadSpec, windows: list[Window]) -> bool:
    """Each of the last three windows' throughput and latency (average, or --percentile)
    within stability_percentage of the three's average."""
    if len(windows) < STABLE_WINDOWS:
        return False
    last = windows[-STABLE_WINDOWS:]
    threshold = spec.stability_percentage / 100.0
    for values in ([w.throughput(spec.batch_size) for w in last],
                   [_latency_key(spec, w) for w in last]):
        mean = sum(values) / len(values)
        if mean <= 0 or any(abs(v - mean) > threshold * mean for v in values):
            return False
    return True


def merge(spec: LoadSpec, windows: list[Window], concurrency: int | None,
          rate: float | None, stable: bool) -> Measurement:
    """The Measurement of the last (up to three) windows."""
    last = windows[-STABLE_WINDOWS:]
    ok = np.concatenate([w.ok() for w in last]) if last else np.zeros((0, 3), np.int64)
    duration = sum(w.duration_s for w in last)
    latencies = np.sort(ok[:, 0] / 1e3)
    server = ServerCounters()
    for w in last:
        server = ServerCounters(**{k: getattr(server, k) + getattr(w.server, k)
                                   for k in server.__dataclass_fields__})
    avg = float(latencies.mean()) if len(latencies) else 0.0
    send_recv = float(ok[:, 1].mean() / 1e3) if len(ok) else 0.0
    return Measurement(
        concurrency=concurrency, request_rate=rate, request_count=len(ok),
        throughput=len(ok) * spec.batch_size / duration if duration > 0 else 0.0,
        latency_us={"avg": avg, **{f"p{p}": nearest_rank(latencies, p)
                                   for p in (50, 90, 95, 99)}},
        send_recv_us=send_recv, response_wait_us=max(avg - send_recv, 0.0),
        server=server.per_request(),
        client_cpu_percent=100.0 * sum(w.cpu_s for w in last) / duration if duration else 0.0,
        stable=stable, errors=sum(w.errors for w in last),
        latency_std_us=float(latencies.std()) if len(latencies) else 0.0,
        response_count=int(ok[:, 2].sum()) if len(ok) else 0,
        delayed=sum(w.delayed for w in last), duration_s=duration,
        error_messages=[m for w in last for m in w.error_messages][:5])


class WorkerPool:
    """The load-generating processes (spawned: nothing of the parent's state leaks in)."""

    def __init__(self, spec: LoadSpec, model: ModelInfo, count: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.processes: list[Any] = []
        self.conns: list[Any] = []
        self.cpu_s = [0.0] * count
        for index in range(count):
            parent, child = context.Pipe()
            process = context.Process(target=worker_main, args=(spec, model, index, count,
                                                                child), daemon=True)
            process.start()
            child.close()
            self.processes.append(process)
            self.conns.append(parent)
        for reply in self._replies(WORKER_START_TIMEOUT_S, "ready"):
            if reply[0] == "failed":
                self.close()
                raise PerfError(f"a load worker could not start: {reply[1]}")

    def _replies(self, timeout_s: float, what: str) -> list[tuple[str, Any]]:
        replies = []
        for index, conn in enumerate(self.conns):
            if not conn.poll(timeout_s):
                raise PerfError(f"load worker {index} did not answer '{what}' within "
                                f"{timeout_s:.0f} s")
            try:
                replies.append(conn.recv())
            except EOFError as exc:
                raise PerfError(f"load worker {index} ended (exit code "
                                f"{self.processes[index].exitcode})") from exc
        return replies

    def command(self, command: str, arguments: Sequence[Any] | None = None) -> list[Any]:
        for index, conn in enumerate(self.conns):
            conn.send((command, arguments[index] if arguments is not None else None))
        return [reply[1] for reply in self._replies(WORKER_REPLY_TIMEOUT_S, command)]

    def collect(self, command: str = "collect") -> tuple[list[Any], float]:
        """Every worker's records since the last cut; the CPU seconds used since then."""
        parts = self.command(command)
        cpu = 0.0
        for index, part in enumerate(parts):
            cpu += part["cpu_s"] - self.cpu_s[index]
            self.cpu_s[index] = part["cpu_s"]
        return parts, cpu

    def close(self) -> None:
        for conn, process in zip(self.conns, self.processes, strict=True):
            if process.is_alive():
                try:
                    conn.send(("exit", None))
                    if conn.poll(WORKER_REPLY_TIMEOUT_S):
                        conn.recv()
                except (OSError, EOFError):
                    pass
            process.join(WORKER_REPLY_TIMEOUT_S)
            if process.is_alive():
                process.kill()
                process.join()
            conn.close()
        self.processes, self.conns = [], []


def _window(pool: WorkerPool, spec: LoadSpec, client: Any, start: float,
            before: ServerCounters) -> tuple[Window, ServerCounters]:
    records: list[Any] = []
    errors, delayed, messages, cpu = 0, 0, [], 0.0
    deadline = start + COUNT_WINDOW_MAX_INTERVALS * spec.measurement_interval_ms / 1e3
    while True:
        if spec.measurement_mode == "time_windows":
            time.sleep(max(start + spec.measurement_interval_ms / 1e3 - time.perf_counter(),
                           0.0))
        else:
            time.sleep(COUNT_POLL_S)
        parts, used = pool.collect()
        cpu += used
        for part in parts:
            records.extend(part["records"])
            errors += part["error_count"]
            delayed += part["delayed"]
            messages.extend(part["errors"])
        if (spec.measurement_mode == "time_windows"
                or len(records) >= spec.measurement_request_count
                or time.perf_counter() >= deadline):
            break
    end = time.perf_counter()
    after = read_counters(spec, client)
    return Window(end - start, records, cpu, after.minus(before), errors, delayed,
                  messages[:5]), after


def _level(pool: WorkerPool, spec: LoadSpec, client: Any, levels: list[Level],
           concurrency: int | None, rate: float | None,
           progress: Callable[[str], None] | None) -> Measurement:
    name = f"concurrency {concurrency}" if concurrency is not None else f"request rate {rate:g}"
    pool.command("start", levels)
    pool.collect()  # the cut where the first window starts
    before = read_counters(spec, client)
    windows: list[Window] = []
    try:
        for trial in range(1, spec.max_trials + 1):
            window, before = _window(pool, spec, client, time.perf_counter(), before)
            windows.append(window)
            ok = len(window.ok())
            if window.errors and not ok:
                raise PerfError(f"{name}: every request failed: "
                                f"{window.error_messages[0] if window.error_messages else ''}")
            if progress is not None:
                progress(f"{name}: window {trial}/{spec.max_trials}: {ok} requests, "
                         f"{window.throughput(spec.batch_size):.1f} infer/sec, latency "
                         f"{_latency_key(spec, window):.0f} usec"
                         + (f", {window.errors} errors" if window.errors else ""))
            if is_stable(spec, windows):
                return merge(spec, windows, concurrency, rate, stable=True)
        return merge(spec, windows, concurrency, rate, stable=False)
    finally:
        pool.collect("stop")


def automatic_workers(spec: LoadSpec, concurrency: Sequence[int],
                      request_rates: Sequence[float]) -> int:
    """Enough processes that one core's GIL does not cap the load: one per core, never more
    than the concurrency needs."""
    if spec.workers > 0:
        return spec.workers
    cores = os.cpu_count() or 1
    if concurrency:
        return max(1, min(cores, max(concurrency)))
    return max(1, min(cores, math.ceil(max(request_rates) / RATE_PER_WORKER)))


def _check(spec: LoadSpec, model: ModelInfo, concurrency: Sequence[int],
           request_rates: Sequence[float], distribution: str, workers: int) -> None:
    if spec.measurement_mode not in ("time_windows", "count_windows"):
        raise PerfError(f"--measurement-mode {spec.measurement_mode}: expected time_windows "
                        f"or count_windows")
    if distribution not in ("constant", "poisson"):
        raise PerfError(f"--request-distribution {distribution}: expected constant or poisson")
    if spec.measurement_interval_ms <= 0 or spec.max_trials < 1:
        raise PerfError("--measurement-interval and --max-trials must be positive")
    if any(c < 1 for c in concurrency) or any(r <= 0 for r in request_rates):
        raise PerfError("concurrency and request rates must be positive")
    if model.sequence:
        start, end = spec.sequence_id_range or DEFAULT_SEQUENCE_IDS
        live = max(concurrency) if concurrency else workers * RATE_SLOTS_PER_WORKER
        # each worker draws from every workers-th id and runs up to ceil(live/workers)
        if (end - start) // workers < math.ceil(live / workers):
            raise PerfError(f"--sequence-id-range {start}:{end} holds {end - start} ids, "
                            f"fewer than the {live} sequences live at once"
                            + (f" over {workers} load processes" if workers > 1 else ""))


def run_levels(spec: LoadSpec, *, concurrency: Sequence[int] = (),
               request_rates: Sequence[float] = (), distribution: str = "constant",
               progress: Callable[[str], None] | None = None,
               on_result: Callable[[Measurement], None] | None = None) -> list[Measurement]:
    """naiad_perf.api.measure's body."""
    if concurrency and request_rates:
        raise PerfError("give a concurrency range or a request-rate range, not both")
    if not concurrency and not request_rates:
        concurrency = [1]
    client = control_client(spec)
    try:
        model = read_model(spec, client)
        check_load(spec, model)
        build_streams(spec, model)  # bad data is refused before a process starts
        workers = automatic_workers(spec, concurrency, request_rates)
        _check(spec, model, concurrency, request_rates, distribution, workers)
        pool = WorkerPool(spec, model, workers)
        try:
            results = []
            for c in concurrency:
                levels = [Level(slots=[s for s in range(c) if s % workers == i])
                          for i in range(workers)]
                results.append(_level(pool, spec, client, levels, c, None, progress))
                if on_result is not None:
                    on_result(results[-1])
            for n, rate in enumerate(request_rates):
                levels = [Level(slots=[i + workers * k for k in range(RATE_SLOTS_PER_WORKER)],
                                rate=rate / workers, distribution=distribution,
                                offset_s=i / rate, seed=1000 * n + i)
                          for i in range(workers)]
                results.append(_level(pool, spec, client, levels, None, rate, progress))
                if on_result is not None:
                    on_result(results[-1])
            return results
        finally:
            pool.close()
    finally:
        client.close()
