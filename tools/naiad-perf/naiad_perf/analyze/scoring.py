"""What was measured for a candidate, the constraints it must meet and the objective that
ranks candidates.

A candidate is measured at several concurrency levels. As in Model Analyzer, each level is a
point that meets the constraints or not; a candidate's figures are those of its best point
that meets them (or of its best point overall, when none does, marked as failing).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from naiad_perf.analyze.candidates import Candidate

MS = 1000.0  # microseconds per millisecond
OBJECTIVES = ("throughput", "latency", "memory")


@dataclass
class Point:
    """One concurrency level of one candidate, in the units the report shows."""

    concurrency: int
    throughput: float  # inferences per second
    p99_ms: float
    p95_ms: float
    p90_ms: float
    p50_ms: float
    avg_ms: float
    server_queue_us: float
    server_compute_us: float
    errors: int
    stable: bool


@dataclass
class CandidateResult:
    """Everything measured for one candidate (what checkpoint.json keeps)."""

    key: str
    candidate: Candidate
    config: dict[str, Any]
    points: list[Point] = field(default_factory=list)
    memory_mb: float | None = None  # peak resident memory of the server's processes
    error: str | None = None  # the load failed, or measuring it did

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CandidateResult:
        points = [Point(**point) for point in data.get("points", [])]
        return cls(data["key"], dict(data["candidate"]), data["config"], points,
                   data.get("memory_mb"), data.get("error"))


@dataclass(frozen=True)
class Constraints:
    """``--max-latency-p99`` (ms), ``--min-throughput`` (infer/s), ``--max-memory`` (MB)."""

    max_latency_p99_ms: float | None = None
    min_throughput: float | None = None
    max_memory_mb: float | None = None

    def point_violations(self, point: Point) -> list[str]:
        found = []
        if point.errors:
            found.append(f"{point.errors} failed requests")
        if self.max_latency_p99_ms is not None and point.p99_ms > self.max_latency_p99_ms:
            found.append(f"p99 {point.p99_ms:.2f} ms > {self.max_latency_p99_ms:g} ms")
        if self.min_throughput is not None and point.throughput < self.min_throughput:
            found.append(f"throughput {point.throughput:.1f} < {self.min_throughput:g} infer/s")
        return found

    def memory_violations(self, memory_mb: float | None) -> list[str]:
        if self.max_memory_mb is None or memory_mb is None or memory_mb <= self.max_memory_mb:
            return []
        return [f"memory {memory_mb:.0f} MB > {self.max_memory_mb:g} MB"]


@dataclass(frozen=True)
class Objective:
    """What "better" means: a weight per figure (``throughput``, ``latency`` = p99,
    ``memory``). The score is the weighted sum of the figures' logarithms (throughput up,
    latency and memory down), so a weight says how many percent of one figure is worth a
    percent of another, and comparing two candidates needs no reference point."""

    weights: dict[str, float]

    @classmethod
    def parse(cls, text: str) -> Objective:
        """``throughput``, ``latency``, ``memory`` or weighted: ``throughput=2,latency=1``."""
        weights: dict[str, float] = {}
        for part in text.split(","):
            name, _, weight = part.strip().partition("=")
            if name not in OBJECTIVES:
                raise ValueError(f"--objective: unknown figure '{name}' (expected one of "
                                 f"{', '.join(OBJECTIVES)}, optionally NAME=WEIGHT,...)")
            try:
                value = float(weight) if weight else 1.0
            except ValueError:
                raise ValueError(f"--objective: the weight of '{name}' must be a number, "
                                 f"got '{weight}'") from None
            if value < 0:
                raise ValueError(f"--objective: the weight of '{name}' must be >= 0")
            weights[name] = value
        if not any(weights.values()):
            raise ValueError("--objective: at least one weight must be above 0")
        return cls(weights)

    def score(self, point: Point, memory_mb: float | None) -> float:
        tiny = 1e-9
        score = self.weights.get("throughput", 0.0) * math.log(max(point.throughput, tiny))
        score -= self.weights.get("latency", 0.0) * math.log(max(point.p99_ms, tiny))
        if memory_mb is not None:
            score -= self.weights.get("memory", 0.0) * math.log(max(memory_mb, tiny))
        return score

    def describe(self) -> str:
        return ", ".join(f"{name}={weight:g}" for name, weight in self.weights.items())


@dataclass
class Verdict:
    """A candidate judged: its best point, whether it meets the constraints, its score."""

    result: CandidateResult
    best: Point | None
    feasible: bool
    violations: list[str]
    score: float

    @property
    def key(self) -> str:
        return self.result.key


def judge(result: CandidateResult, constraints: Constraints, objective: Objective) -> Verdict:
    """The best point of ``result`` under ``constraints`` and ``objective``."""
    if result.error or not result.points:
        return Verdict(result, None, False, [result.error or "nothing measured"], -math.inf)
    memory = constraints.memory_violations(result.memory_mb)
    scored = [(objective.score(p, result.memory_mb), p) for p in result.points]
    passing = [(s, p) for s, p in scored if not constraints.point_violations(p)]
    if passing and not memory:
        score, best = max(passing, key=lambda item: item[0])
        return Verdict(result, best, True, [], score)
    score, best = max(passing or scored, key=lambda item: item[0])
    # A failing candidate reads as its least failing point's reasons.
    reasons = memory + (constraints.point_violations(best) if not passing else [])
    return Verdict(result, best, False, reasons, score)


def better(challenger: Verdict, incumbent: Verdict, min_gain: float) -> bool:
    """True when ``challenger`` beats ``incumbent``: it meets the constraints and the other
    does not, or both are alike and its score is higher by more than ``min_gain`` (a
    fraction: 0.02 is 2 %, which keeps measurement noise from moving the search)."""
    if challenger.feasible != incumbent.feasible:
        return challenger.feasible
    return challenger.score > incumbent.score + math.log1p(min_gain)


def rank(verdicts: list[Verdict]) -> list[Verdict]:
    """Best first: candidates meeting the constraints, then by score; failed loads last."""
    return sorted(verdicts, key=lambda v: (v.feasible, v.best is not None, v.score),
                  reverse=True)


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indexes of the (throughput, latency) pairs no other pair beats on both counts, in
    order of throughput."""
    front = []
    for i, (throughput, latency) in enumerate(points):
        dominated = any(
            t >= throughput and lat <= latency and (t > throughput or lat < latency)
            for j, (t, lat) in enumerate(points) if j != i)
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: points[i][0])
