"""naiad convert's TensorRT step, on a machine with an NVIDIA GPU, TensorRT and torch with
CUDA (naiad's CI has none: these tests skip there, saying why; the CPU runs check that the
step is skipped with its reason, test_convert_serve.py)."""

from __future__ import annotations

import pytest
from convert_helpers import QUICK, entry, report, statuses

torch = pytest.importorskip("torch")
trt = pytest.importorskip("tensorrt", reason="TensorRT is not installed")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device for torch: TensorRT plans are built and run on a GPU",
                allow_module_level=True)

from naiad_convert.cli import main  # noqa: E402


def test_a_plan_with_a_profile_over_the_batch_range(tmp_path):
    out = tmp_path / "out"
    assert main([entry("make_cnn"), "--input", "image:FP32:batch,3,8,8", "-o", str(out),
                 "--formats", "onnx,tensorrt", "--format", "tensorrt", "--device", "cuda",
                 *QUICK]) == 0
    data = report(out)
    assert statuses(data) == {"onnx": "passed", "tensorrt": "passed"}
    plan = out / "formats" / "tensorrt" / "model.plan"
    engine = trt.Runtime(trt.Logger(trt.Logger.WARNING)).deserialize_cuda_engine(
        plan.read_bytes())
    smallest, _, largest = engine.get_tensor_profile_shape("image", 0)
    assert tuple(smallest) == (1, 3, 8, 8) and tuple(largest) == (4, 3, 8, 8)
    assert (out / "repository" / "make_cnn" / "1" / "model.plan").is_file()
