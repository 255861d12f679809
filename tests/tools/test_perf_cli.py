"""naiad perf's command line and report: perf_analyzer's flags and output, the CSV, plots,
the `naiad perf` dispatch, and the pieces the numbers come from."""

from __future__ import annotations

import argparse
import csv
import importlib.metadata
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from naiad import cli as naiad_cli
from naiad.testing import free_port
from naiad_perf import LoadSpec, Measurement, PerfError
from naiad_perf.cli import _concurrency, _id_range, _rates, _shape
from naiad_perf.model import ServerCounters
from naiad_perf.plot import write_plot
from naiad_perf.report import CSV_COLUMNS, csv_row
from naiad_perf.runner import Window, is_stable, nearest_rank

LEAN = ["--measurement-interval", "200", "--max-trials", "3", "--stability-percentage",
        "100000", "--workers", "1"]


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = naiad_cli.main(["perf", *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_http_sweep_report_csv_and_html(perf_server: Any, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    table, chart = tmp_path / "perf.csv", tmp_path / "perf.html"
    status, out, err = run_cli(capsys, "-m", "add_sub", "-u", f"127.0.0.1:{perf_server.http_port}",
                               "--concurrency-range", "1:3:2", *LEAN, "-f", str(table),
                               "--verbose-csv", "--plot", str(chart))
    assert status == 0, err
    for line in ("*** Measurement Settings ***", "Request concurrency: 1",
                 "Request concurrency: 3", "  Client: ", "  Server: ",
                 "Inferences/Second vs. Client Average Batch Latency"):
        assert line in out
    assert re.search(r"Avg HTTP time: \d+ usec \(send/recv \d+ usec \+ response wait \d+ "
                     r"usec\)", out)
    assert re.search(r"Avg request latency: \d+ usec \(overhead \d+ usec \+ queue \d+ usec \+ "
                     r"compute input \d+ usec \+ compute infer \d+ usec \+ compute output \d+ "
                     r"usec\)", out)
    summary = re.findall(r"^Concurrency: (\d+), throughput: ([\d.]+) infer/sec, latency (\d+) "
                         r"usec$", out, re.MULTILINE)
    assert [level for level, _, _ in summary] == ["1", "3"]
    # not a terminal: a progress line per window on stderr
    assert "concurrency 1: window 1/3" in err
    rows = list(csv.reader(table.read_text().splitlines()))
    assert rows[0] == ["Concurrency", *CSV_COLUMNS, "Avg latency", "request/response",
                       "response wait"]
    assert [r[0] for r in rows[1:]] == ["1", "3"]
    assert [r[1] for r in rows[1:]] == [throughput for _, throughput, _ in summary]
    page = chart.read_text()
    assert "<svg" in page and "http" not in page.split("<svg", 1)[1].split("xmlns", 1)[0]
    points = re.findall(r'<circle class="point"[^>]*data-throughput="([\d.]+)"', page)
    assert [float(p) for p in points] == pytest.approx([float(t) for _, t, _ in summary],
                                                       rel=1e-4)
    assert "<script" not in page and "cdn" not in page.lower()


def test_grpc_percentile_report(perf_server: Any, tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    table = tmp_path / "grpc.csv"
    status, out, err = run_cli(capsys, "-m", "add_sub", "-i", "grpc", "-u",
                               perf_server.grpc_url, "--percentile", "95", *LEAN,
                               "-f", str(table))
    assert status == 0, err
    assert "Stabilizing using p95 latency and throughput" in out
    assert "Avg latency:" not in out  # perf_analyzer leaves it out with --percentile
    assert re.search(r"Avg gRPC time: \d+ usec \(\(un\)marshal request/response \d+ usec \+ "
                     r"response wait \d+ usec\)", out)
    assert "Inferences/Second vs. Client p95 Batch Latency" in out
    p95 = re.search(r"p95 latency: (\d+) usec", out).group(1)  # type: ignore[union-attr]
    assert re.search(rf"^Concurrency: 1, throughput: [\d.]+ infer/sec, latency {p95} usec$",
                     out, re.MULTILINE)
    assert table.read_text().splitlines()[0] == ",".join(["Concurrency", *CSV_COLUMNS])


def test_errors_are_one_line_and_exit_1(perf_server: Any,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run_cli(capsys, "-m", "missing", "-u",
                               f"127.0.0.1:{perf_server.http_port}")
    assert status == 1 and out == ""
    assert err.startswith("naiad perf: error: model 'missing'") and err.count("\n") == 1


def test_naiad_names_the_distribution_when_the_command_is_missing(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [])
    assert naiad_cli.main(["perf", "-m", "x"]) == 2
    assert "pip install naiad-perf" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # an unknown name stays argparse's error
        naiad_cli.main(["no-such-command"])


def test_ranges_and_flags_parse_as_perf_analyzer() -> None:
    assert _concurrency("1:16:5") == [1, 6, 11, 16]
    assert _concurrency("4") == [4]
    assert _rates("100:300:100") == [100.0, 200.0, 300.0]
    assert _shape("INPUT0:3,224,224") == ("INPUT0", [3, 224, 224])
    assert _id_range("5:9") == (5, 9)
    for parse, bad in ((_concurrency, "4:1"), (_concurrency, "0"), (_shape, "INPUT0"),
                       (_id_range, "9:5"), (_rates, "x")):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(bad)


def window(throughput: float, latency_us: float) -> Window:
    # `throughput` requests of `latency_us` each in one second
    count = int(throughput)
    return Window(1.0, [(0, int(latency_us * 1e3), 0, 1, True)] * count, 0.0, ServerCounters())


def test_stability_is_three_windows_within_the_percentage() -> None:
    spec = LoadSpec(url="x:1", model="m", stability_percentage=10.0)
    assert not is_stable(spec, [window(100, 500), window(100, 500)])
    assert is_stable(spec, [window(50, 900), window(100, 500), window(105, 520),
                            window(96, 480)])
    assert not is_stable(spec, [window(100, 500), window(100, 500), window(130, 500)])
    assert not is_stable(spec, [window(100, 500), window(100, 500), window(100, 650)])


def test_nearest_rank_percentiles() -> None:
    import numpy as np

    values = np.arange(1, 101, dtype=float)
    assert [nearest_rank(values, p) for p in (50, 90, 99)] == [50.0, 90.0, 99.0]
    assert nearest_rank(np.array([7.0]), 99) == 7.0
    assert nearest_rank(np.array([]), 50) == 0.0


def measurement(concurrency: int, throughput: float, latency: float) -> Measurement:
    return Measurement(
        concurrency=concurrency, request_rate=None, request_count=100, throughput=throughput,
        latency_us={"avg": latency, "p50": latency, "p90": latency, "p95": latency,
                    "p99": latency}, send_recv_us=30.0, response_wait_us=latency - 30,
        server={"queue_us": 10.0, "compute_input_us": 1.0, "compute_infer_us": 200.0,
                "compute_output_us": 2.0, "overhead_us": 1.0, "request_count": 100.0},
        client_cpu_percent=10.0, stable=True, errors=0)


def test_csv_row_splits_the_latency_as_perf_analyzer() -> None:
    row = csv_row(measurement(2, 2040.4123, 500.0), verbose=True)
    # network+server send/recv = avg - client send - queue - compute (input, infer, output)
    assert row == ["2", "2040.41", "30", "257", "10", "1", "200", "2", "0", "500", "500",
                   "500", "500", "500", "30", "470"]


def test_plot_png_and_the_missing_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = LoadSpec(url="x:1", model="m", percentile=99)
    results = [measurement(1, 1000, 800), measurement(4, 3000, 1500)]
    write_plot(tmp_path / "p.png", spec, results)
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(PerfError, match=r"expected a \.png or \.html"):
        write_plot(tmp_path / "p.svg", spec, results)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(PerfError, match=r"needs matplotlib: pip install matplotlib \(from "
                                        r"a naiad checkout: pip install "
                                        r"'./tools/naiad-perf\[plot\]'"):
        write_plot(tmp_path / "q.png", spec, results)


def test_a_plot_it_cannot_write_fails_before_measuring(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # Nothing listens on the URL's port: an error about the plot proves no request was sent.
    url = f"127.0.0.1:{free_port()}"
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    status, out, err = run_cli(capsys, "-m", "add_sub", "-u", url, "--plot",
                               str(tmp_path / "x.png"))
    assert (status, out) == (1, "")
    assert err.startswith("naiad perf: error: --plot FILE.png needs matplotlib")
    status, out, err = run_cli(capsys, "-m", "add_sub", "-u", url, "--plot",
                               str(tmp_path / "missing" / "x.html"))
    assert (status, out) == (1, "")
    assert err.startswith(f"naiad perf: error: --plot {tmp_path / 'missing' / 'x.html'}: the "
                          "folder")
