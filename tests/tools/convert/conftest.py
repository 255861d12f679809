"""Fixtures of naiad convert's tests (the runs several tests read); the helpers are in
convert_helpers."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch", reason="naiad convert's PyTorch tests need torch")
pytest.importorskip("onnxruntime", reason="naiad convert's checks run ONNX in onnxruntime")
pytest.importorskip("naiad_convert", reason="naiad-convert is not installed "
                    "(pip install -e ./tools/naiad-convert)")

from convert_helpers import QUICK, entry


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
