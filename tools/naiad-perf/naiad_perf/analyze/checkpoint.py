"""checkpoint.json: what a run measured so far, written after every candidate, so that an
interrupted run (Ctrl-C, a kill, a reboot) resumes with the same output folder and measures
only the candidates it had not finished.

It also keeps the model's configuration as the run found it: a run killed while a candidate
was loaded leaves that candidate on the server, and the resumed run must restore the
original, not what it finds loaded.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from naiad_perf.analyze.scoring import CandidateResult

FORMAT = 1
FILE_NAME = "checkpoint.json"


class CheckpointMismatch(Exception):
    """The folder's checkpoint was written for another model or another load."""


class Checkpoint:
    """The checkpoint of one output folder."""

    def __init__(self, path: Path, fingerprint: dict[str, Any]) -> None:
        self.path = path
        self.fingerprint = fingerprint
        self.original_config: dict[str, Any] | None = None
        self.results: dict[str, CandidateResult] = {}

    @classmethod
    def open(cls, folder: Path, fingerprint: Mapping[str, Any]) -> Checkpoint:
        """The checkpoint in ``folder`` (empty when there is none). ``fingerprint`` names
        what the measurements depend on (model, load, concurrency, windows): a checkpoint
        written under another fingerprint is refused rather than mixed in."""
        checkpoint = cls(folder / FILE_NAME, dict(fingerprint))
        if not checkpoint.path.exists():
            return checkpoint
        data = json.loads(checkpoint.path.read_text())
        if data.get("format") != FORMAT:
            raise CheckpointMismatch(f"{checkpoint.path}: format {data.get('format')} is not "
                                     f"{FORMAT}; use another output folder")
        stored = data.get("fingerprint", {})
        if stored != checkpoint.fingerprint:
            changed = sorted(k for k in set(stored) | set(checkpoint.fingerprint)
                             if stored.get(k) != checkpoint.fingerprint.get(k))
            raise CheckpointMismatch(
                f"{checkpoint.path} was written for another run (it differs in "
                f"{', '.join(changed)}): resume with the same settings or use another "
                "output folder")
        checkpoint.original_config = data.get("original_config")
        checkpoint.results = {r["key"]: CandidateResult.from_json(r)
                              for r in data.get("results", [])}
        return checkpoint

    def add(self, result: CandidateResult) -> None:
        self.results[result.key] = result
        self.save()

    def save(self) -> None:
        """Write the file whole, then rename it over the old one: a kill mid-write leaves
        the previous checkpoint, never half of one."""
        data = {
            "format": FORMAT,
            "fingerprint": self.fingerprint,
            "original_config": self.original_config,
            "results": [result.to_json() for result in self.results.values()],
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(".json.partial")
        with open(partial, "w") as out:
            json.dump(data, out, indent=1)
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, self.path)
