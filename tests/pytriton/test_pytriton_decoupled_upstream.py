"""PyTriton 0.7's tests/functional/L0_decoupled_mode (imports changed only) against naiad:
a generator callable streaming over gRPC to DecoupledModelClient, errors in and after the
stream, coupled and decoupled clients on the wrong kind of model. Run as its test.sh runs it
(pytest with a 25 s timeout per test); each test starts its own server on free ports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from upstream import upstream_copy

# One test of the suite (each starts a server: two responses, then the callable's error
# ends the stream), and all 15; both long.
DEFAULT_SELECTION = "test_decoupled_infer_sample_slow_failure_iter_grpc"


def run_suite(tmp_path: Path, selection: str | None) -> subprocess.CompletedProcess[str]:
    root = upstream_copy(tmp_path)
    suite = root / "tests" / "functional" / "L0_decoupled_mode" / "test_pytest.py"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "--timeout=25", "-o", "addopts=", str(suite)]
    if selection:
        command += ["-k", selection]
    return subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=600,
                          check=False)


# About 15 s; streaming and its errors are in test_pytriton_lifecycle.py by default.
@pytest.mark.long
def test_decoupled_mode_selection(tmp_path: Path) -> None:
    done = run_suite(tmp_path, DEFAULT_SELECTION)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "1 passed" in done.stdout, done.stdout[-3000:]


@pytest.mark.long
def test_decoupled_mode_whole_suite(tmp_path: Path) -> None:
    done = run_suite(tmp_path, None)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert " failed" not in done.stdout, done.stdout[-3000:]
