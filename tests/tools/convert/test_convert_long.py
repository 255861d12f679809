"""naiad convert's long variants (pytest -m long): the dynamo ONNX exporter, every format
served and measured at two concurrency levels, and a run killed with SIGTERM that the same
command resumes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from convert_helpers import COMMAND_TIMEOUT, QUICK, entry, report, run_ok, statuses

pytestmark = pytest.mark.long

SECONDS = 1.0
KILL_AFTER_EXPORTS_TIMEOUT = 300 * SECONDS


def test_the_dynamo_exporter_with_every_format_served(tmp_path):
    pytest.importorskip("onnxscript", reason="the dynamo exporter needs onnxscript")
    out = tmp_path / "out"
    quick = [a for a in QUICK if a not in ("--onnx-exporter", "torchscript")]
    run_ok(entry("make_cnn"), "--input", "image:FP32:batch,3,8,8", "-o", str(out),
           "--onnx-exporter", "dynamo", "--serve-timing", "--serve-interval", "500",
           "--serve-concurrency", "1,2", "--serve-batch-sizes", "1,4", *quick)
    data = report(out)
    assert data["export"]["onnx_exporter"] == "dynamo"
    assert statuses(data)["onnx"] == "passed"
    passed = [f for f in data["formats"] if f["status"] == "passed"]
    assert len(passed) == 4
    for fmt in passed:
        assert not fmt["served_error"], fmt["served_error"]
        assert [(s["batch_size"], s["concurrency"]) for s in fmt["served"]] == [
            (1, 1), (1, 2), (4, 1), (4, 2)]


def test_a_run_killed_midway_resumes(tmp_path):
    out = tmp_path / "out"
    args = [sys.executable, "-m", "naiad", "convert", entry("make_cnn"), "--input",
            "image:FP32:batch,3,8,8", "-o", str(out), "--onnx-exporter", "torchscript",
            "--window", "300", "--max-windows", "10", "--stability-percentage", "0.001",
            "--batch-sizes", "1,2,4", "--max-batch-size", "4"]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env)
    deadline = time.monotonic() + KILL_AFTER_EXPORTS_TIMEOUT
    progress = out / "progress.json"
    while time.monotonic() < deadline:
        # killed while timing: every format checked, none timed yet or some
        if progress.exists() and '"timed": true' in progress.read_text():
            break
        time.sleep(0.1)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=COMMAND_TIMEOUT)
    assert process.returncode == 130, err
    assert "run the same command again to resume" in err
    assert not (out / "repository").exists()
    again = subprocess.run(args, capture_output=True, text=True, env=env,
                           timeout=COMMAND_TIMEOUT, check=False)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("(kept from the previous run)") == 5
    assert "exporting" not in again.stdout
    assert (out / "repository" / "make_cnn" / "config.pbtxt").is_file()
    assert all(f["timed"] for f in report(out)["formats"] if f["status"] == "passed")
