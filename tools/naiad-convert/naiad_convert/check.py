"""Correctness: a format's outputs against the original model's, per output, on every check
batch. An output passes when every element meets ``|got - want| <= atol + rtol * |want|``
(numpy's ``allclose``); the figures kept are the largest absolute and relative errors."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

DEFAULT_ATOL = 1e-5
DEFAULT_RTOL = 1e-4
TINY = 1e-12  # relative errors divide by max(|want|, TINY)


@dataclass(frozen=True)
class Tolerance:
    atol: float = DEFAULT_ATOL
    rtol: float = DEFAULT_RTOL


@dataclass
class OutputCheck:
    name: str
    max_abs_error: float
    max_rel_error: float
    passed: bool
    problem: str = ""  # a missing output, a shape or dtype that differs

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _finite(value: float) -> float:
    return float(value) if np.isfinite(value) else float("inf")


def compare(want: dict[str, np.ndarray], got: dict[str, np.ndarray], tolerance: Tolerance
            ) -> list[OutputCheck]:
    """One OutputCheck per output of the original."""
    checks = []
    for name, expected in want.items():
        if name not in got:
            checks.append(OutputCheck(name, float("inf"), float("inf"), False,
                                      f"missing (the format gives {sorted(got)})"))
            continue
        actual = np.asarray(got[name])
        if actual.shape != expected.shape:
            checks.append(OutputCheck(name, float("inf"), float("inf"), False,
                                      f"shape {list(actual.shape)}, expected "
                                      f"{list(expected.shape)}"))
            continue
        if expected.dtype.kind in "fc" or actual.dtype.kind in "fc":
            a, e = actual.astype(np.float64), expected.astype(np.float64)
        else:
            a, e = actual.astype(np.int64), expected.astype(np.int64)
        if e.size == 0:
            checks.append(OutputCheck(name, 0.0, 0.0, True))
            continue
        diff = np.abs(a - e)
        max_abs = _finite(diff.max())
        max_rel = _finite((diff / np.maximum(np.abs(e), TINY)).max())
        passed = bool(np.all(diff <= tolerance.atol + tolerance.rtol * np.abs(e)))
        problem = "" if actual.dtype == expected.dtype else (
            f"dtype {actual.dtype}, the original gives {expected.dtype}")
        checks.append(OutputCheck(name, max_abs, max_rel, passed and not problem, problem))
    return checks


def merge(rounds: Sequence[list[OutputCheck]]) -> list[OutputCheck]:
    """The worst figures per output over several check batches."""
    merged: dict[str, OutputCheck] = {}
    for checks in rounds:
        for check in checks:
            seen = merged.get(check.name)
            if seen is None:
                merged[check.name] = OutputCheck(**check.__dict__)
                continue
            seen.max_abs_error = max(seen.max_abs_error, check.max_abs_error)
            seen.max_rel_error = max(seen.max_rel_error, check.max_rel_error)
            seen.passed = seen.passed and check.passed
            seen.problem = seen.problem or check.problem
    return list(merged.values())
