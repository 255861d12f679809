"""Which candidates to measure: the quick hill-climbing search and the brute grid.

Both ask a callback to measure a candidate and get its :class:`Verdict` back; the callback
answers from the checkpoint for candidates measured before, so a resumed quick search takes
the same path as the interrupted one and measures only what is left.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from naiad_perf.analyze.candidates import Candidate, SearchSpace, key
from naiad_perf.analyze.scoring import Verdict, better

Evaluate = Callable[[Candidate], Verdict]


@dataclass
class SearchLog:
    """The candidates a search measured, in order, and the one it settled on."""

    verdicts: dict[str, Verdict] = field(default_factory=dict)
    best: Verdict | None = None
    skipped: int = 0  # grid candidates left out by --max-candidates


class _Budgeted:
    """Measures each candidate once and stops the search when the budget is spent."""

    def __init__(self, evaluate: Evaluate, max_candidates: int, log: SearchLog) -> None:
        self.evaluate = evaluate
        self.max_candidates = max_candidates
        self.log = log

    @property
    def spent(self) -> bool:
        return len(self.log.verdicts) >= self.max_candidates

    def __call__(self, candidate: Candidate) -> Verdict | None:
        name = key(candidate)
        if name in self.log.verdicts:
            return self.log.verdicts[name]
        if self.spent:
            return None
        verdict = self.evaluate(candidate)
        self.log.verdicts[name] = verdict
        return verdict


def quick_search(space: SearchSpace, evaluate: Evaluate, *, max_candidates: int,
                 min_gain: float) -> SearchLog:
    """Model Analyzer's quick search in spirit: start at the model's own configuration and
    move along one dimension at a time (up first; down when the first step up does not help)
    for as long as the objective improves and the constraints hold; pass over the dimensions
    again while a pass improved something; never more than ``max_candidates`` measured."""
    log = SearchLog()
    run = _Budgeted(evaluate, max_candidates, log)
    current = space.default()
    incumbent = run(current)
    assert incumbent is not None  # the budget is at least one
    improved = True
    while improved and not run.spent:
        improved = False
        for dimension in space.dimensions:
            if dimension not in space.active(current):
                continue
            for direction in (1, -1):
                moved = False
                position = dimension.values.index(current[dimension.name])
                while 0 <= position + direction < len(dimension.values):
                    position += direction
                    candidate = space.normalise(
                        {**current, dimension.name: dimension.values[position]})
                    if not space.valid(candidate):
                        continue  # e.g. a preferred size above max_batch_size: step over it
                    verdict = run(candidate)
                    if verdict is None or not better(verdict, incumbent, min_gain):
                        break
                    current, incumbent, moved, improved = candidate, verdict, True, True
                if moved:
                    break  # it climbed upwards: no need to try downwards
    log.best = incumbent
    return log


def brute_search(space: SearchSpace, evaluate: Evaluate, *, max_candidates: int,
                 min_gain: float) -> SearchLog:
    """Every candidate of the grid, nearest the default first, up to ``max_candidates``."""
    log = SearchLog()
    run = _Budgeted(evaluate, max_candidates, log)
    grid = list(space.grid())
    for candidate in grid[:max_candidates]:
        verdict = run(candidate)
        assert verdict is not None
        if log.best is None or better(verdict, log.best, min_gain):
            log.best = verdict
    log.skipped = max(0, len(grid) - max_candidates)
    return log


SEARCHES = {"quick": quick_search, "brute": brute_search}
