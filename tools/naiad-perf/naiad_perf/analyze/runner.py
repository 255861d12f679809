"""One analysis: read the model's configuration, search the space (each candidate loaded
through the repository API and measured with :func:`naiad_perf.api.measure`, its peak
memory sampled meanwhile), keep the checkpoint, restore the original configuration, and hand
the verdicts to the report.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from naiad_perf.analyze.candidates import Candidate, SearchSpace, SweepBounds, describe, key
from naiad_perf.analyze.checkpoint import Checkpoint
from naiad_perf.analyze.memory import SAMPLE_INTERVAL_S, PeakMemory
from naiad_perf.analyze.scoring import (
    MS,
    CandidateResult,
    Constraints,
    Objective,
    Point,
    Verdict,
    judge,
    rank,
)
from naiad_perf.analyze.search import SEARCHES, SearchLog
from naiad_perf.analyze.target import LoadFailed, Server
from naiad_perf.api import LoadSpec, Measurement, measure

Measure = Callable[..., list[Measurement]]


class AnalysisError(Exception):
    """The run cannot go on (the model's configuration cannot be read, or the server
    refuses even the model's own configuration as an override)."""
Progress = Callable[[str], None]


@dataclass
class AnalyzeSettings:
    """What one run does (the command line, parsed)."""

    spec: LoadSpec  # the load each candidate is measured under (url and model included)
    concurrency: list[int]
    mode: str = "quick"
    max_candidates: int = 8
    min_gain: float = 0.02
    constraints: Constraints = field(default_factory=Constraints)
    objective: Objective = field(default_factory=lambda: Objective({"throughput": 1.0}))
    bounds: SweepBounds = field(default_factory=SweepBounds)
    memory_interval_s: float = SAMPLE_INTERVAL_S
    restore: bool = True  # reload the original configuration at the end (remote runs)
    verbose: bool = False

    def fingerprint(self) -> dict[str, Any]:
        """What the figures depend on: a checkpoint from another fingerprint is refused."""
        spec = dataclasses.asdict(self.spec)
        spec.pop("url")  # the same server may come back on other ports (local mode)
        spec.pop("workers")
        return {"spec": spec, "concurrency": list(self.concurrency)}


@dataclass
class Outcome:
    """What the report needs."""

    space: SearchSpace
    ranked: list[Verdict]  # best first, the winner at the top
    winner: Verdict | None
    default: Verdict | None
    log: SearchLog
    gpu_count: int | None
    memory_source: str


def to_points(measurements: Sequence[Measurement]) -> list[Point]:
    points = []
    for m in measurements:
        latency = m.latency_us
        server = m.server
        compute = sum(server.get(k, 0.0) for k in
                      ("compute_input_us", "compute_infer_us", "compute_output_us"))
        points.append(Point(
            concurrency=int(m.concurrency or 0), throughput=float(m.throughput),
            p99_ms=latency["p99"] / MS, p95_ms=latency["p95"] / MS, p90_ms=latency["p90"] / MS,
            p50_ms=latency["p50"] / MS, avg_ms=latency["avg"] / MS,
            server_queue_us=float(server.get("queue_us", 0.0)), server_compute_us=compute,
            errors=int(m.errors), stable=bool(m.stable)))
    return points


def format_verdict(verdict: Verdict) -> str:
    """``312.4 infer/s, p99 4.10 ms at c=4, 210 MB: meets the constraints``."""
    if verdict.best is None:
        return f"failed: {'; '.join(verdict.violations)}"
    best = verdict.best
    memory = verdict.result.memory_mb
    figures = (f"{best.throughput:.1f} infer/s, p99 {best.p99_ms:.2f} ms at "
               f"c={best.concurrency}" + (f", {memory:.0f} MB" if memory is not None else ""))
    if verdict.feasible:
        return f"{figures}: meets the constraints"
    return f"{figures}: fails ({'; '.join(verdict.violations)})"


class Analysis:
    """A run against one server; ``measure_fn`` is :func:`naiad_perf.api.measure` (tests
    substitute a model of the server)."""

    def __init__(self, settings: AnalyzeSettings, server: Server, checkpoint: Checkpoint, *,
                 memory_source: str, measure_fn: Measure = measure,
                 progress: Progress = print) -> None:
        self.settings = settings
        self.server = server
        self.checkpoint = checkpoint
        self.memory_source = memory_source
        self.measure_fn = measure_fn
        self.progress = progress
        self.space: SearchSpace | None = None
        self._count = 0
        self._planned = settings.max_candidates

    def run(self) -> Outcome:
        settings = self.settings
        model = settings.spec.model
        if self.checkpoint.original_config is None:
            from tritonclient.utils import InferenceServerException

            try:
                self.checkpoint.original_config = self.server.config(model)
            except (InferenceServerException, OSError) as exc:
                raise AnalysisError(f"cannot read the configuration of model '{model}' from "
                                    f"{self.server.url}: {exc}") from None
            self.checkpoint.save()
        original = self.checkpoint.original_config
        gpu_count = self.server.gpu_count()
        space = SearchSpace.build(original, gpu_count=gpu_count or 0, bounds=settings.bounds)
        self.space = space
        if gpu_count is None:
            space.notes.append("the server's metrics could not be read: assuming no GPU")
        for note in space.notes:
            self.progress(f"note: {note}")
        if settings.mode == "brute":
            self._planned = min(settings.max_candidates, sum(1 for _ in space.grid()))
        dims = ", ".join(f"{d.name} {list(d.values)}" for d in space.dimensions)
        self.progress(f"{settings.mode} search over {dims}; up to {self._planned} candidates")
        try:
            log = SEARCHES[settings.mode](space, self._evaluate,
                                          max_candidates=settings.max_candidates,
                                          min_gain=settings.min_gain)
        finally:
            if settings.restore:
                self._restore(model, original)
        default = log.verdicts.get(key(space.default()))
        winner = log.best if log.best is not None and log.best.best is not None else None
        ranked = rank(list(log.verdicts.values()))
        if winner is not None:
            ranked = [winner, *(v for v in ranked if v is not winner)]
        return Outcome(space, ranked, winner, default, log, gpu_count, self.memory_source)

    def _restore(self, model: str, original: dict[str, Any]) -> None:
        try:
            self.server.load(model, original)
            self.progress(f"restored the original configuration of '{model}'")
        except (LoadFailed, OSError) as exc:
            self.progress(f"warning: could not restore the original configuration of "
                          f"'{model}': {exc}")

    def _evaluate(self, candidate: Candidate) -> Verdict:
        settings = self.settings
        assert self.space is not None
        self._count += 1
        label = f"[{self._count}/{self._planned}] {describe(candidate)}"
        stored = self.checkpoint.results.get(key(candidate))
        if stored is not None:
            verdict = judge(stored, settings.constraints, settings.objective)
            self.progress(f"{label}: {format_verdict(verdict)} (from the checkpoint)")
            return verdict
        self.progress(f"{label}: loading and measuring at concurrency "
                      f"{','.join(map(str, settings.concurrency))}")
        config = self.space.config_for(candidate)
        result = CandidateResult(key(candidate), candidate, config)
        try:
            self.server.load(settings.spec.model, config)
        except LoadFailed as exc:
            if candidate == self.space.default():
                raise AnalysisError(
                    f"the server refused model '{settings.spec.model}' with its own "
                    f"configuration as a load override ({exc}); is it running with "
                    "--model-control-mode explicit?") from None
            result.error = f"load failed: {exc}"
        try:
            if result.error is None:
                result.points, result.memory_mb = self._measure()
        except Exception as exc:  # one failing candidate must not end the run
            result.error = f"measurement failed: {type(exc).__name__}: {exc}"
        self.checkpoint.add(result)
        verdict = judge(result, settings.constraints, settings.objective)
        self.progress(f"{label}: {format_verdict(verdict)}")
        return verdict

    def _measure(self) -> tuple[list[Point], float | None]:
        settings = self.settings
        progress = (lambda line: self.progress(f"    {line}")) if settings.verbose else None
        if self.server.pid is None:
            measurements = self.measure_fn(settings.spec, concurrency=settings.concurrency,
                                           progress=progress)
            return to_points(measurements), None
        with PeakMemory(self.server.pid, settings.memory_interval_s) as memory:
            measurements = self.measure_fn(settings.spec, concurrency=settings.concurrency,
                                           progress=progress)
        return to_points(measurements), round(memory.peak_mb, 1)
