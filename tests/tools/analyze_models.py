"""The models naiad analyze's end-to-end tests tune (tests/tools/models): a Python MLP and an
ONNX MLP, copied into a repository with the ONNX file built here."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MODELS = Path(__file__).parent / "models"
OPSET = 17
IR_VERSION = 9  # what onnxruntime 1.17, the oldest the ONNX backend supports, reads
ONNX_LAYERS = (256, 3072, 3072, 16)


def mlp_onnx() -> onnx.ModelProto:
    """INPUT0 FP32 [-1, 256] -> ReLU(Gemm) x2 -> Gemm -> OUTPUT0 FP32 [-1, 16]."""
    rng = np.random.default_rng(0)
    nodes, weights, previous = [], [], "INPUT0"
    for layer, (fan_in, fan_out) in enumerate(itertools.pairwise(ONNX_LAYERS)):
        w = (rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32)
        weights += [numpy_helper.from_array(w, f"w{layer}"),
                    numpy_helper.from_array(np.zeros(fan_out, np.float32), f"b{layer}")]
        last = layer == len(ONNX_LAYERS) - 2
        out = "OUTPUT0" if last else f"h{layer}"
        gemm = out if last else f"g{layer}"
        nodes.append(helper.make_node("Gemm", [previous, f"w{layer}", f"b{layer}"], [gemm]))
        if not last:
            nodes.append(helper.make_node("Relu", [gemm], [out]))
        previous = out
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, [-1, 256])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, [-1, 16])],
        initializer=weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              ir_version=IR_VERSION)
    onnx.checker.check_model(model)
    return model


def analyze_repository(repo: Path) -> Path:
    """``repo`` holding mlp_python and mlp_onnx (with its model.onnx)."""
    for name in ("mlp_python", "mlp_onnx"):
        shutil.copytree(MODELS / name, repo / name)
    (repo / "mlp_onnx" / "1").mkdir()
    onnx.save(mlp_onnx(), str(repo / "mlp_onnx" / "1" / "model.onnx"))
    return repo
