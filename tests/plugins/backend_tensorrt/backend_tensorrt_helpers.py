"""Helpers for the TensorRT backend tests: plain engine descriptions for the rules that need no
device, and, for the tests that do, why they cannot run here and how to build a real engine.

Nothing here imports tensorrt or the CUDA binding at import time: on machines without them
(naiad's CI) the GPU tests skip with the reason :func:`gpu_skip_reason` gives.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from naiad.gpus import gpu_count
from naiad_backend_tensorrt.engine_io import EngineIO, TensorIO
from naiad_backend_tensorrt.profiles import ProfileShape

Shape = tuple[int, ...]
ProfileSpec = Mapping[str, tuple[Shape, Shape, Shape]]  # input -> (min, opt, max)

NOT_AN_ENGINE = b"not a serialized TensorRT engine: only read on a machine with a GPU\n"


def tensor(name: str, shape: Shape, *, dtype: str = "FLOAT", is_input: bool = True,
           profiles: Sequence[tuple[Shape, Shape, Shape]] = (), **flags: object) -> TensorIO:
    """A TensorIO as ``read_engine_io`` reports it; a static input gets its own shape as the
    range of each profile unless ``profiles`` says otherwise."""
    ranges = tuple(ProfileShape(*p) for p in profiles)
    return TensorIO(name=name, is_input=is_input, dtype=dtype, shape=shape, profiles=ranges,
                    **flags)  # type: ignore[arg-type]


def batching_engine(max_batches: Sequence[int] = (8,), dtype: str = "FLOAT",
                    item: Shape = (4,)) -> EngineIO:
    """INPUT0 -> OUTPUT0, shape [-1, *item], one profile per entry of ``max_batches`` (batch 1
    to that many rows, tuned for half of it)."""
    ranges = [((1, *item), (max(n // 2, 1), *item), (n, *item)) for n in max_batches]
    return EngineIO((
        tensor("INPUT0", (-1, *item), dtype=dtype, profiles=ranges),
        tensor("OUTPUT0", (-1, *item), dtype=dtype, is_input=False),
    ), num_profiles=len(ranges))


def parse_config(text: str) -> ModelConfig:
    return text_format.Parse(text, ModelConfig())


def gpu_skip_reason() -> str | None:
    """Why the tests that run a real engine cannot run here, or None when they can."""
    if gpu_count() == 0:
        return "no NVIDIA GPU on this machine (TensorRT engines run only on a GPU)"
    for module, package in (("tensorrt", "tensorrt"), ("cuda.bindings", "cuda-bindings"),
                            ("onnx", "onnx")):
        try:
            found = importlib.util.find_spec(module) is not None
        except ImportError:
            found = False
        if not found:
            return f"the '{package}' package is not installed (pip install {package})"
    return None


def build_engine(onnx_bytes: bytes, profiles: Sequence[ProfileSpec], path: Path) -> Path:
    """Build a TensorRT engine from an ONNX graph with the TensorRT builder (one optimization
    profile per entry of ``profiles``) and write it to ``path``. Needs a GPU."""
    import tensorrt as trt

    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)  # explicit batch: the only mode since TensorRT 10
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(onnx_bytes):
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        raise RuntimeError(f"TensorRT could not parse the ONNX graph: {errors}")
    config = builder.create_builder_config()
    for spec in profiles:
        profile = builder.create_optimization_profile()
        for name, (low, opt, high) in spec.items():
            profile.set_shape(name, low, opt, high)
        config.add_optimization_profile(profile)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise RuntimeError("TensorRT could not build the engine (see its log above)")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(serialized))
    return path


def onnx_graph(op: str, datatype: str, dims: Shape, *, double_input: bool = False) -> bytes:
    """A one-node ONNX graph INPUT0 -> OUTPUT0 (``op`` is "Identity", or "Add" of the input
    with itself when ``double_input``), of V2 ``datatype`` and shape ``dims`` (-1 dynamic)."""
    import onnx
    from onnx import TensorProto, helper

    element = {"FP32": TensorProto.FLOAT, "FP16": TensorProto.FLOAT16,
               "INT32": TensorProto.INT32, "INT64": TensorProto.INT64}[datatype]
    shape = [d if d >= 0 else None for d in dims]
    inputs = ["INPUT0", "INPUT0"] if double_input else ["INPUT0"]
    graph = helper.make_graph(
        [helper.make_node(op, inputs, ["OUTPUT0"])], "naiad_trt_test",
        [helper.make_tensor_value_info("INPUT0", element, shape)],
        [helper.make_tensor_value_info("OUTPUT0", element, shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.checker.check_model(model)
    return model.SerializeToString()
