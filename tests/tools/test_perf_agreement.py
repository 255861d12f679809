"""naiad perf against the real perf_analyzer on the same naiad server and load.

CI: both run clean at concurrency 1 and 4, their CSV headers are identical (perf_analyzer's
read from the file it writes), and their figures have the same order of magnitude. The
strict 10 % agreement at concurrency 1, 4 and 16 is a long test (`-m long`): on a shared
2-core machine client and server compete for the CPU, so the tools run alternately, three
rounds, and the medians are compared; it prints the table either way.
"""

from __future__ import annotations

import csv
import statistics
from pathlib import Path
from typing import Any

import pytest
from perf_analyzer_tool import PerfAnalyzer

from naiad_perf import LoadSpec, measure
from naiad_perf.report import write_csv

METRICS = ("throughput", "p50", "p90", "p95", "p99")


def perf_analyzer_levels(tool: PerfAnalyzer, server: Any, levels: list[int],
                         csv_path: Path, *flags: str) -> dict[int, dict[str, float]]:
    """perf_analyzer's figures per concurrency level, read from its CSV."""
    result: dict[int, dict[str, float]] = {}
    for level in levels:  # one level per run, so the runs interleave with naiad perf's
        run = tool.run("-m", "add_sub", "-u", f"127.0.0.1:{server.http_port}",
                       "--concurrency-range", str(level), "-f", str(csv_path),
                       "--verbose-csv", *flags)
        assert run.returncode == 0 and not run.problems, run.explain()
        [row] = list(csv.DictReader(csv_path.read_text().splitlines()))
        result[level] = {"throughput": float(row["Inferences/Second"]),
                         **{p: float(row[f"{p} latency"]) for p in METRICS[1:]}}
    return result


def naiad_perf_levels(server: Any, levels: list[int], **spec: Any) -> dict[int, dict[str, float]]:
    result = {}
    for m in measure(LoadSpec(url=f"127.0.0.1:{server.http_port}", model="add_sub", **spec),
                     concurrency=levels):
        assert m.errors == 0, m.error_messages
        result[m.concurrency or 0] = {"throughput": m.throughput,
                                      **{p: m.latency_us[p] for p in METRICS[1:]}}
    return result


def table(pa: dict[int, dict[str, float]], ours: dict[int, dict[str, float]]) -> str:
    lines = [f"{'c':>3} {'metric':>10} {'perf_analyzer':>14} {'naiad perf':>11} {'diff':>7}"]
    for level in pa:
        for metric in METRICS:
            a, b = pa[level][metric], ours[level][metric]
            lines.append(f"{level:>3} {metric:>10} {a:>14.1f} {b:>11.1f} "
                         f"{(b - a) / a * 100 if a else 0:>6.1f}%")
    return "\n".join(lines)


def test_same_csv_header_and_magnitude(perf_server: Any, perf_analyzer: PerfAnalyzer,
                                       tmp_path: Path) -> None:
    levels = [1, 4]
    lean = ("--measurement-interval", "300", "--max-trials", "3",
            "--stability-percentage", "100000")
    pa = perf_analyzer_levels(perf_analyzer, perf_server, levels, tmp_path / "pa.csv", *lean)
    results = measure(LoadSpec(url=f"127.0.0.1:{perf_server.http_port}", model="add_sub",
                               measurement_interval_ms=300, max_trials=3,
                               stability_percentage=100000.0), concurrency=levels)
    ours = {m.concurrency or 0: {"throughput": m.throughput,
                                 **{p: m.latency_us[p] for p in METRICS[1:]}}
            for m in results}
    print("\n" + table(pa, ours))
    write_csv(tmp_path / "ours.csv", results, verbose=True)
    assert ((tmp_path / "ours.csv").read_text().splitlines()[0]
            == (tmp_path / "pa.csv").read_text().splitlines()[0])
    assert all(m.errors == 0 for m in results)
    for level in levels:
        for metric in ("throughput", "p50"):
            ratio = ours[level][metric] / pa[level][metric]
            assert 0.2 < ratio < 5, f"c={level} {metric}: {table(pa, ours)}"


@pytest.mark.long
def test_within_ten_percent_at_1_4_16(perf_server: Any, perf_analyzer: PerfAnalyzer,
                                      tmp_path: Path) -> None:
    # A shared machine rarely holds three windows within perf_analyzer's 10 % (its average
    # latency swings with every CPU stall): both tools stabilise on p50 with a looser rule,
    # and the medians of three alternate rounds are compared.
    levels, rounds, interval, stability = [1, 4, 16], 3, 2000, 50
    pa_runs, our_runs = [], []
    for _ in range(rounds):  # alternately, so that both see the same machine
        pa_runs.append(perf_analyzer_levels(perf_analyzer, perf_server, levels,
                                            tmp_path / "pa.csv", "--measurement-interval",
                                            str(interval), "--stability-percentage",
                                            str(stability), "--percentile", "50"))
        our_runs.append(naiad_perf_levels(perf_server, levels, measurement_interval_ms=interval,
                                          stability_percentage=float(stability),
                                          percentile=50))

    def median(runs: list[dict[int, dict[str, float]]]) -> dict[int, dict[str, float]]:
        return {c: {k: statistics.median(r[c][k] for r in runs) for k in METRICS}
                for c in levels}

    pa, ours = median(pa_runs), median(our_runs)
    print("\n" + table(pa, ours))
    for level in levels:
        for metric in METRICS:
            assert ours[level][metric] == pytest.approx(pa[level][metric], rel=0.10), \
                f"c={level} {metric}\n{table(pa, ours)}"
