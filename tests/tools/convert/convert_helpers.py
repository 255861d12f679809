"""Helpers of naiad convert's tests: run the real command, read its report. A module of its
own name (not ``conftest``), so the tests import it whatever folders the run is given."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MODELS = HERE / "tiny_models.py"
SECONDS = 1.0
COMMAND_TIMEOUT = 600 * SECONDS  # a guard against a hang; a short run takes seconds
# Timing as short as it goes: the tests check that figures exist, not their size.
QUICK = ["--onnx-exporter", "torchscript", "--window", "20", "--max-windows", "3",
         "--batch-sizes", "1,4", "--max-batch-size", "4"]


def entry(name: str) -> str:
    return f"{MODELS}:{name}"


def convert(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``naiad convert ARGS`` as a user runs it (through the naiad command)."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "naiad", "convert", *args],
                          capture_output=True, text=True, timeout=COMMAND_TIMEOUT, cwd=cwd,
                          env=env, check=False)


def report(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "report.json").read_text())


def statuses(data: dict[str, Any]) -> dict[str, str]:
    return {f["name"]: f["status"] for f in data["formats"]}


def run_ok(*args: str) -> subprocess.CompletedProcess[str]:
    done = convert(*args)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done
