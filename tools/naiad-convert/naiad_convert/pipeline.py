"""A run from start to end: load the source and samples, take the reference outputs, then per
format export, check and time (each step saved to progress.json as it ends), optionally time
the correct formats served by naiad, choose the winner and write the repository and report.
"""

from __future__ import annotations

import hashlib
import shlex
import shutil
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from naiad_convert.check import Tolerance, compare, merge
from naiad_convert.errors import EXIT_NO_FORMAT, ConvertError, first_line, usage_error
from naiad_convert.formats import ExportSettings, Format, format_named
from naiad_convert.jsonable import dumps
from naiad_convert.repository import write_model
from naiad_convert.samples import InputArg, Samples, load_samples
from naiad_convert.serving import ServedCheck, ServeSettings, measure_served, served_models
from naiad_convert.source import Source, load_source, reference_outputs
from naiad_convert.state import (
    CHECK_FAILED,
    EXPORT_FAILED,
    PASSED,
    SKIPPED,
    FormatResult,
    Progress,
)
from naiad_convert.tensors import TensorSpec, spec_of
from naiad_convert.timing import TimingSettings, best, time_runner

FORMATS_FOLDER = "formats"
REPOSITORY_FOLDER = "repository"
SERVED_FOLDER = "served"
MAX_CHECK_ROWS = 4  # sample rows also checked one by one (batch 1)
MAX_WARNINGS = 5    # distinct exporter warnings kept per format


@dataclass
class ConvertSettings:
    source: str
    output: Path
    model_name: str
    formats: tuple[str, ...]
    export: ExportSettings
    timing: TimingSettings
    tolerance: Tolerance = field(default_factory=Tolerance)
    samples_path: Path | None = None
    input_args: tuple[InputArg, ...] = ()
    chosen_format: str | None = None
    serve: ServeSettings | None = None
    check_batch: int = 4
    argv: tuple[str, ...] = ()     # the command as typed, for each format's reproduce.sh

    def fingerprint(self) -> dict[str, Any]:
        """What the figures depend on: a resumed run must share all of it."""
        source = Path(self.source)
        digest = _file_digest(source) if source.is_file() else self.source
        samples = _file_digest(self.samples_path) if self.samples_path else None
        return _as_json({"source": self.source, "source_digest": digest, "samples": samples,
                "inputs": [a.__dict__ for a in self.input_args],
                "model_name": self.model_name, "export": self.export.to_json(),
                "timing": dict(self.timing.__dict__, batch_sizes=list(self.timing.batch_sizes)),
                "tolerance": dict(self.tolerance.__dict__), "check_batch": self.check_batch,
                "serve": None if self.serve is None else {
                    k: list(v) if isinstance(v, tuple) else v
                    for k, v in self.serve.__dict__.items()}})


def _as_json(data: dict[str, Any]) -> dict[str, Any]:
    """As progress.json will give it back (tuples become lists), so the two compare."""
    import json

    return dict(json.loads(json.dumps(data)))


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


@dataclass
class Outcome:
    source: Source
    samples: Samples
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    results: list[FormatResult]
    winner: FormatResult | None
    repository: Path | None
    preferred_batch_size: int | None
    duration_s: float


class Pipeline:
    def __init__(self, settings: ConvertSettings, progress: Progress,
                 say: Callable[[str], None] = print) -> None:
        self.settings = settings
        self.progress = progress
        self.say = say
        self.folder = settings.output / FORMATS_FOLDER

    # --- the reference ----------------------------------------------------------------
    def check_batches(self, samples: Samples) -> list[dict[str, np.ndarray]]:
        """Each sample row alone (up to MAX_CHECK_ROWS), then a batch larger than one."""
        if not samples.batched:
            return [samples.at_batch(1)]
        batches = [samples.row(i) for i in range(min(samples.rows, MAX_CHECK_ROWS))]
        largest = min(max(self.settings.check_batch, 2), self.settings.export.max_batch_size)
        if largest > 1:
            batches.append(samples.at_batch(largest))
        return batches

    # --- one format -------------------------------------------------------------------
    def export_and_check(self, fmt: Format, source: Source, samples: Samples,
                         batches: list[dict[str, np.ndarray]],
                         references: list[dict[str, np.ndarray]],
                         written: dict[str, Path]) -> FormatResult:
        result = self.progress.result(fmt.name)
        folder = self.folder / fmt.name
        path = folder / fmt.file_name
        if result.status in (PASSED, CHECK_FAILED) and path.is_file():
            if result.status == PASSED:
                written[fmt.name] = path
            self.say(f"[{fmt.name}] {result.status} (kept from the previous run)")
            return result
        if result.status in (SKIPPED, EXPORT_FAILED):
            self.say(f"[{fmt.name}] {result.status}: {result.reason} (kept from the previous "
                     "run)")
            return result
        # a fresh result: a format whose file went missing is made again from scratch
        result = self.progress.results[fmt.name] = FormatResult(fmt.name)
        reason = fmt.unavailable(source, self.settings.export)
        if reason:
            return self._finish(result, SKIPPED, reason)
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        self._write_reproduce(folder, fmt.name)
        self.say(f"[{fmt.name}] exporting ({fmt.description})")
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            # the exporters' warnings (a TracerWarning says a trace may be wrong) are kept
            # in the format's result and report, not lost in the terminal's scroll
            warnings.simplefilter("always")
            try:
                fmt.export(source, samples, path, self.settings.export, written)
                result.export_s = time.perf_counter() - start
                runner = fmt.load(path, source, self.settings.export)
            except Exception as exc:  # an exporter's failure is this format's result
                result.warnings = _distinct(caught)
                return self._finish(result, EXPORT_FAILED, first_line(exc))
        result.warnings = _distinct(caught)
        if result.warnings:
            self.say(f"[{fmt.name}] {len(result.warnings)} exporter warning(s), first: "
                     f"{result.warnings[0]}")
        result.file = str(path.relative_to(self.settings.output))
        try:
            got = [runner(batch) for batch in batches]
        except Exception as exc:  # the written file does not run on the samples
            return self._finish(result, CHECK_FAILED, f"does not run: {first_line(exc)}")
        result.checks = merge([compare(want, have, self.settings.tolerance)
                               for want, have in zip(references, got, strict=True)])
        failing = [c for c in result.checks if not c.passed]
        if failing:
            worst = failing[0]
            detail = worst.problem or (f"max abs error {worst.max_abs_error:.3g}, max rel "
                                       f"error {worst.max_rel_error:.3g}")
            return self._finish(result, CHECK_FAILED, f"output '{worst.name}': {detail} "
                                f"(atol {self.settings.tolerance.atol:g}, rtol "
                                f"{self.settings.tolerance.rtol:g})")
        figures = ", ".join(f"{c.name} max abs {c.max_abs_error:.2g}" for c in result.checks)
        written[fmt.name] = path  # a later format may build on it (TensorRT on ONNX)
        return self._finish(result, PASSED, f"matches the original ({figures})")

    def _finish(self, result: FormatResult, status: str, reason: str) -> FormatResult:
        result.status, result.reason = status, reason
        self.progress.save()
        folder = self.folder / result.name
        if folder.is_dir():
            (folder / "check.json").write_text(dumps(result.to_json()))
        self.say(f"[{result.name}] {status}: {reason}")
        return result

    def _write_reproduce(self, folder: Path, name: str) -> None:
        """The command that makes this format again, alone, into its own folder."""
        argv = list(self.settings.argv)
        kept: list[str] = []
        skip = False
        for arg in argv:
            if skip:
                skip = False
                continue
            if arg in ("--formats", "--format", "-o", "--output-dir"):
                skip = True
                continue
            if arg.startswith(("--formats=", "--format=", "--output-dir=")):
                continue
            kept.append(arg)
        command = ["naiad", "convert", *kept, "--formats", name, "--format", name,
                   "--output-dir", str((folder / "reproduce").resolve())]
        (folder / "reproduce.sh").write_text(
            "#!/bin/sh\n# makes this format alone again, from where the run was started\n"
            f"cd {shlex.quote(str(Path.cwd()))} || exit 1\n{shlex.join(command)}\n")

    def time_format(self, fmt: Format, source: Source, samples: Samples) -> None:
        result = self.progress.result(fmt.name)
        if result.status != PASSED or result.timed:
            return
        self.say(f"[{fmt.name}] timing in process")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the same load's warnings are in the result
            runner = fmt.load(self.settings.output / result.file, source,
                              self.settings.export)
        result.timings = time_runner(runner, samples.at_batch, self.settings.timing,
                                     lambda line: self.say(f"[{fmt.name}] {line}"))
        result.timed = True
        self.progress.save()

    # --- serving ----------------------------------------------------------------------
    def time_served(self, passed: Sequence[FormatResult], samples: Samples,
                    inputs: list[TensorSpec], outputs: list[TensorSpec],
                    check: ServedCheck) -> None:
        serve = self.settings.serve
        todo = [r for r in passed if not r.served_done]
        if serve is None or not todo:
            return
        repository = self.settings.output / SERVED_FOLDER / REPOSITORY_FOLDER
        shutil.rmtree(repository, ignore_errors=True)
        names = served_models([r.name for r in todo], self.settings.model_name)
        for result in todo:
            fmt = format_named(result.name)
            write_model(repository, names[result.name], fmt.platform,
                        self.settings.output / result.file, inputs, outputs,
                        self.settings.export.max_batch_size, None, None)
        self.say(f"serving {len(todo)} format(s) with naiad serve for naiad perf")
        measured = measure_served(repository, names, samples, serve,
                                  self.settings.output / SERVED_FOLDER / "server.log", self.say,
                                  check)
        for result in todo:
            figures = measured.get(result.name, "not measured")
            if isinstance(figures, str):
                result.served_error = figures
            else:
                result.served = figures
            result.served_done = True
        self.progress.save()

    # --- the whole run ----------------------------------------------------------------
    def run(self) -> Outcome:
        started = time.perf_counter()
        settings = self.settings
        if settings.export.device.startswith("cuda"):
            _require_cuda(settings.export.device)
        source = load_source(settings.source)
        samples = source.bind(load_samples(settings.samples_path, settings.input_args,
                                           settings.export.max_batch_size > 0))
        self.say(f"source: {source.kind} model {settings.source}; inputs "
                 + ", ".join(f"{s.name} {s.datatype} {list(s.dims)}" for s in samples.specs()))
        batches = self.check_batches(samples)
        references = reference_outputs(source, batches)
        inputs = samples.specs()
        outputs = [spec_of(n, a, samples.batched) for n, a in references[-1].items()]
        written: dict[str, Path] = {}
        results = []
        for name in settings.formats:
            fmt = format_named(name)
            results.append(self.export_and_check(fmt, source, samples, batches, references,
                                                 written))
        for result in results:
            self.time_format(format_named(result.name), source, samples)
        passed = [r for r in results if r.status == PASSED]
        # naiad's answers on the largest check batch, before its timings count
        self.time_served(passed, samples, inputs, outputs,
                         ServedCheck(batches[-1], references[-1], settings.tolerance))
        winner = self.choose(passed)
        repository = preferred = None
        if winner is not None:
            preferred = self.preferred_batch_size(winner)
            fmt = format_named(winner.name)
            repository = write_model(settings.output / REPOSITORY_FOLDER, settings.model_name,
                                     fmt.platform, settings.output / winner.file, inputs,
                                     outputs, settings.export.max_batch_size, preferred,
                                     samples.row(0))
        return Outcome(source, samples, inputs, outputs, results, winner, repository,
                       preferred, time.perf_counter() - started)

    def choose(self, passed: Sequence[FormatResult]) -> FormatResult | None:
        """``--format X`` when it passed; else the highest throughput: among the formats
        naiad served right when any was (one it could not load or that answered wrong is
        not chosen), in process otherwise. A format that failed is never chosen."""
        chosen = self.settings.chosen_format
        if chosen is not None:
            for result in passed:
                if result.name == chosen:
                    return result
            failed = self.progress.result(chosen)
            raise ConvertError(f"--format {chosen}: {failed.status or 'not run'}: "
                               f"{failed.reason}", EXIT_NO_FORMAT)
        served = [r for r in passed if r.served]
        if served:  # a format naiad could not serve, or served wrong, is not chosen
            return max(served, key=lambda r: r.best_throughput(True))
        return max(passed, key=lambda r: r.best_throughput(False), default=None)

    def preferred_batch_size(self, winner: FormatResult) -> int | None:
        """The batch size where the winner's throughput peaked: as naiad served it when it
        was served, else in process."""
        if self.settings.export.max_batch_size <= 0:
            return None
        if winner.served:
            return int(max(winner.served, key=lambda row: row["throughput"])["batch_size"])
        top = best(winner.timings)
        return top.batch_size if top else None


def _distinct(caught: Sequence[warnings.WarningMessage], limit: int = MAX_WARNINGS
              ) -> list[str]:
    """The first lines of the distinct warnings, at most ``limit``; deprecation notices
    last (a TracerWarning that says the trace may be wrong matters more)."""
    seen: list[str] = []
    ordered = sorted(caught, key=lambda w: issubclass(w.category, DeprecationWarning))
    for item in ordered:
        line = f"{item.category.__name__}: {str(item.message).strip().splitlines()[0][:200]}" \
            if str(item.message).strip() else item.category.__name__
        if line not in seen:
            seen.append(line)
    return seen[:limit]


def _require_cuda(device: str) -> None:
    try:
        import torch
    except ImportError:
        raise usage_error(f"--device {device}: needs torch with CUDA") from None
    if not torch.cuda.is_available():
        raise usage_error(f"--device {device}: torch sees no CUDA device here (a CPU build, "
                          "or no GPU); use --device cpu")
