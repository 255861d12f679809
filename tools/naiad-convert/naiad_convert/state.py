"""progress.json: what a run has finished (each format's export, check, timings, served
measurements), written after every step, so an interrupted run resumes where it stopped when
the same command is run again with the same output folder."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from naiad_convert.check import OutputCheck
from naiad_convert.errors import usage_error
from naiad_convert.timing import BatchTiming

FORMAT = 1
FILE_NAME = "progress.json"

SKIPPED = "skipped"             # does not fit the source or the machine
EXPORT_FAILED = "export-failed"  # the exporter (or loading its file) raised
CHECK_FAILED = "check-failed"   # runs, but answers differ beyond the tolerance
PASSED = "passed"


@dataclass
class FormatResult:
    """Everything a run learned about one format."""

    name: str
    status: str = ""
    reason: str = ""             # why skipped or failed, one line
    file: str = ""               # the model file, relative to the output folder
    export_s: float = 0.0
    warnings: list[str] = field(default_factory=list)  # the exporter's, first lines
    checks: list[OutputCheck] = field(default_factory=list)
    timings: list[BatchTiming] = field(default_factory=list)
    timed: bool = False
    served: list[dict[str, Any]] = field(default_factory=list)  # one per batch/concurrency
    served_error: str = ""
    served_done: bool = False

    def best_throughput(self, served: bool | None = None) -> float:
        """The highest throughput measured: served by naiad (``served`` True), in process
        (False), or served when there are such figures (None)."""
        if served or (served is None and self.served):
            return max((s["throughput"] for s in self.served), default=0.0)
        return max((t.throughput for t in self.timings), default=0.0)

    def to_json(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["checks"] = [c.to_json() for c in self.checks]
        data["timings"] = [t.to_json() for t in self.timings]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FormatResult:
        result = cls(**{k: v for k, v in data.items() if k not in ("checks", "timings")})
        result.checks = [OutputCheck(**c) for c in data.get("checks", [])]
        result.timings = [BatchTiming.from_json(t) for t in data.get("timings", [])]
        return result


class Progress:
    """The progress file of one output folder."""

    def __init__(self, path: Path, fingerprint: dict[str, Any]) -> None:
        self.path = path
        self.fingerprint = fingerprint
        self.results: dict[str, FormatResult] = {}

    @classmethod
    def open(cls, folder: Path, fingerprint: dict[str, Any], restart: bool = False
             ) -> Progress:
        """The folder's progress; a file written for another command is refused (resuming
        it would mix two runs' figures) unless ``restart`` discards it."""
        progress = cls(folder / FILE_NAME, fingerprint)
        if restart or not progress.path.exists():
            return progress
        try:
            data = json.loads(progress.path.read_text())
        except ValueError:
            return progress  # a file cut short by a crash: start over
        stored = data.get("fingerprint", {})
        if data.get("format") != FORMAT or stored != fingerprint:
            changed = sorted(k for k in set(stored) | set(fingerprint)
                             if stored.get(k) != fingerprint.get(k))
            raise usage_error(f"{folder} holds a run of another command (it differs in "
                              f"{', '.join(changed) or 'format'}): use another --output-dir, "
                              "or --restart to discard it")
        progress.results = {r["name"]: FormatResult.from_json(r) for r in data["results"]}
        return progress

    def result(self, name: str) -> FormatResult:
        return self.results.setdefault(name, FormatResult(name))

    def save(self) -> None:
        """Written whole then renamed over the old file: a kill mid-write leaves the
        previous one."""
        data = {"format": FORMAT, "fingerprint": self.fingerprint,
                "results": [r.to_json() for r in self.results.values()]}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(".partial")
        with open(partial, "w") as out:
            json.dump(data, out, indent=1)
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, self.path)
