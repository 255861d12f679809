"""Helpers of naiad convert's tests: run the real command, read its report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="naiad convert's PyTorch tests need torch")
pytest.importorskip("onnxruntime", reason="naiad convert's checks run ONNX in onnxruntime")
pytest.importorskip("naiad_convert", reason="naiad-convert is not installed "
                    "(pip install -e ./tools/naiad-convert)")

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


@pytest.fixture(scope="session")
def convert_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("convert")


@pytest.fixture(scope="session")
def mlp_run(convert_root: Path) -> Path:
    """The MLP to one format per backend, each also served by naiad serve and measured by
    naiad perf; the winner is the faster of the two as served."""
    from naiad_convert.cli import main

    out = convert_root / "mlp"
    assert main([entry("MLP"), "--input", "x:FP32:batch,16", "-o", str(out), "--model-name",
                 "mlp", "--formats", "torchscript-script,onnx", "--serve-timing",
                 "--serve-interval", "200", "--serve-concurrency", "1", "--serve-batch-sizes",
                 "2", *QUICK]) == 0
    return out


@pytest.fixture(scope="session")
def cnn_run(convert_root: Path) -> Path:
    """The CNN (a factory entry point, two outputs) to every format; the repository is
    the torch.export one (--format), served by the PyTorch backend."""
    from naiad_convert.cli import main

    out = convert_root / "cnn"
    assert main([entry("make_cnn"), "--input", "image:FP32:batch,3,8,8", "-o", str(out),
                 "--model-name", "cnn", "--format", "torch-export", *QUICK]) == 0
    return out


@pytest.fixture(scope="session")
def no_onnx_run(convert_root: Path) -> Path:
    """A model whose ONNX export fails (an op the exporter cannot handle): the repository
    comes from TorchScript."""
    from naiad_convert.cli import main

    out = convert_root / "no-onnx"
    assert main([entry("NoOnnx"), "--input", "x:FP32:batch,4", "-o", str(out),
                 "--model-name", "no_onnx", "--formats", "torchscript-script,onnx",
                 *QUICK]) == 0
    return out
