"""OpenVINO models built in the test: with OpenVINO's own graph API, and from ONNX with
``openvino.convert_model`` and ``openvino.save_model`` (the path a Triton user takes)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

ov = pytest.importorskip("openvino", reason="openvino is not installed")
ops = pytest.importorskip("openvino.opset13", reason="openvino has no opset13")

ELEMENTS = {"BOOL": ov.Type.boolean, "UINT8": ov.Type.u8, "UINT16": ov.Type.u16,
            "UINT32": ov.Type.u32, "UINT64": ov.Type.u64, "INT8": ov.Type.i8,
            "INT16": ov.Type.i16, "INT32": ov.Type.i32, "INT64": ov.Type.i64,
            "FP16": ov.Type.f16, "FP32": ov.Type.f32}


def identity_ir(path: Path, datatype: str, rank: int, input_name: str, output_name: str,
                batch_layout: bool) -> None:
    """An IR whose output is its input, every dimension dynamic; with ``batch_layout`` its
    tensors carry the layout ``N?`` (what lets Triton's auto-complete batch it)."""
    parameter = ops.parameter(ov.PartialShape([-1] * rank), ELEMENTS[datatype],
                              name=input_name)
    result = ops.convert(parameter, ELEMENTS[datatype])
    model = ov.Model([result], [parameter], "identity")
    model.outputs[0].get_tensor().set_names({output_name})
    if batch_layout:
        layout = ov.Layout("N" + "?" * (rank - 1))
        ov.layout_helpers.set_layout(model.inputs[0], layout)
        ov.layout_helpers.set_layout(model.outputs[0], layout)
    ov.save_model(model, str(path))


def mlp_onnx(path: Path, features: int = 4, hidden: int = 8, classes: int = 3,
             seed: int = 0) -> dict[str, np.ndarray]:
    """An ONNX MLP (``INPUT`` [N, features] -> ``OUTPUT`` [N, classes], softmax); returns its
    weights."""
    onnx = pytest.importorskip("onnx", reason="onnx is not installed")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    weights = {"w1": rng.normal(size=(features, hidden)).astype(np.float32),
               "b1": rng.normal(size=hidden).astype(np.float32),
               "w2": rng.normal(size=(hidden, classes)).astype(np.float32),
               "b2": rng.normal(size=classes).astype(np.float32)}
    nodes = [helper.make_node("MatMul", ["INPUT", "w1"], ["h"]),
             helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["o"]),
             helper.make_node("Add", ["o", "b2"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["OUTPUT"], axis=1)]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, ["batch", features])],
        [helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, ["batch", classes])],
        [numpy_helper.from_array(v, k) for k, v in weights.items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return weights


def onnx_to_ir(onnx_path: Path, xml_path: Path) -> None:
    """``openvino.convert_model`` then ``openvino.save_model``: model.xml and model.bin.

    The weights stay FP32 (``save_model`` would store them as FP16 by default, which moves
    answers by about 1e-3 relative): the IR and the ONNX file are then the same model, and an
    FP32 answer can be held to FP32 accuracy."""
    ov.save_model(ov.convert_model(str(onnx_path)), str(xml_path), compress_to_fp16=False)


def run_directly(xml_or_onnx: Path, feeds: dict[str, np.ndarray],
                 precision: str = "f32") -> dict[str, np.ndarray]:
    """The model run with OpenVINO in the test process (the reference answer), computing in
    ``precision`` (OpenVINO's own default is bf16 on CPUs with avx512_bf16 or AMX)."""
    compiled = ov.Core().compile_model(str(xml_or_onnx), "CPU",
                                       {"INFERENCE_PRECISION_HINT": precision})
    results = compiled(feeds)
    return {port.get_any_name(): np.asarray(value) for port, value in results.items()}


def cpu_computes_bf16() -> bool:
    """Whether OpenVINO's CPU plugin can compute in bf16 here (avx512_bf16 or AMX), which is
    what it then does by default."""
    return "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
