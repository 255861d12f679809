"""ONNX models built at test time with ``onnx.helper``, written into model repositories, and
the reference run: the same model file executed by ``onnxruntime.InferenceSession`` in the
test process, which the server's answers must equal."""

from __future__ import annotations

import textwrap
from pathlib import Path
from types import ModuleType

import numpy as np
import onnx
import onnxruntime as ort
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper, numpy_helper

from naiad.datatypes import numpy_to_datatype
from naiad.testing import ServerProcess

OPSET = 17
# onnxruntime 1.17 (the oldest this backend supports) reads IR version 9.
IR_VERSION = 9

# V2 datatype -> ONNX element type, for the identity models of every datatype.
ONNX_TYPES = {
    "BOOL": TensorProto.BOOL,
    "UINT8": TensorProto.UINT8,
    "UINT16": TensorProto.UINT16,
    "UINT32": TensorProto.UINT32,
    "UINT64": TensorProto.UINT64,
    "INT8": TensorProto.INT8,
    "INT16": TensorProto.INT16,
    "INT32": TensorProto.INT32,
    "INT64": TensorProto.INT64,
    "FP16": TensorProto.FLOAT16,
    "FP32": TensorProto.FLOAT,
    "FP64": TensorProto.DOUBLE,
    "BF16": TensorProto.BFLOAT16,
    "BYTES": TensorProto.STRING,
}


#: the configuration of :func:`add_sub_model` (config.pbtxt)
ADD_SUB_CONFIG = """
platform: "onnxruntime_onnx"
max_batch_size: 0
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
"""


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
           outputs: list[onnx.ValueInfoProto], initializers: list[onnx.TensorProto] | None = None,
           name: str = "test") -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=initializers or [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              ir_version=IR_VERSION)
    onnx.checker.check_model(model)
    return model


def add_sub_model() -> onnx.ModelProto:
    """INPUT0, INPUT1: FP32 [4] (a fixed shape, no batch dimension) -> OUTPUT0 = sum,
    OUTPUT1 = difference."""
    value = helper.make_tensor_value_info
    return _model(
        [helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
         helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"])],
        [value("INPUT0", TensorProto.FLOAT, [4]), value("INPUT1", TensorProto.FLOAT, [4])],
        [value("OUTPUT0", TensorProto.FLOAT, [4]), value("OUTPUT1", TensorProto.FLOAT, [4])],
        name="add_sub")


def mlp_model(features: int = 4, hidden: int = 3, seed: int = 0) -> onnx.ModelProto:
    """INPUT [N, features] FP32 -> OUTPUT [N, hidden] = relu(INPUT @ W + b); the batch
    dimension N is symbolic."""
    rng = np.random.default_rng(seed)
    weights = rng.standard_normal((features, hidden)).astype(np.float32)
    bias = rng.standard_normal(hidden).astype(np.float32)
    value = helper.make_tensor_value_info
    return _model(
        [helper.make_node("MatMul", ["INPUT", "W"], ["XW"]),
         helper.make_node("Add", ["XW", "B"], ["Z"]),
         helper.make_node("Relu", ["Z"], ["OUTPUT"])],
        [value("INPUT", TensorProto.FLOAT, ["N", features])],
        [value("OUTPUT", TensorProto.FLOAT, ["N", hidden])],
        [numpy_helper.from_array(weights, "W"), numpy_helper.from_array(bias, "B")],
        name="mlp")


def string_model() -> onnx.ModelProto:
    """TEXT [N, M] STRING -> TEXT_OUT (the same strings), both dimensions symbolic."""
    value = helper.make_tensor_value_info
    return _model([helper.make_node("Identity", ["TEXT"], ["TEXT_OUT"])],
                  [value("TEXT", TensorProto.STRING, ["N", "M"])],
                  [value("TEXT_OUT", TensorProto.STRING, ["N", "M"])], name="strings")


def upper_model() -> onnx.ModelProto:
    """WORDS [C] STRING -> UPPER [C]: StringNormalizer to upper case. Its only dimension is
    variable, so auto-complete makes it the batch dimension (dims [1] with an empty
    reshape)."""
    value = helper.make_tensor_value_info
    return _model([helper.make_node("StringNormalizer", ["WORDS"], ["UPPER"],
                                    case_change_action="UPPER", locale="C.UTF-8")],
                  [value("WORDS", TensorProto.STRING, ["C"])],
                  [value("UPPER", TensorProto.STRING, ["C"])], name="upper")


def identity_model(datatype: str, batching: bool, input_name: str = "INPUT0",
                   output_name: str = "OUTPUT0") -> onnx.ModelProto:
    """One input and one output of ``datatype``: [N, M] when ``batching`` else [M], every
    dimension symbolic."""
    dims: list[str] = ["N", "M"] if batching else ["M"]
    value = helper.make_tensor_value_info
    element = ONNX_TYPES[datatype]
    return _model([helper.make_node("Identity", [input_name], [output_name])],
                  [value(input_name, element, dims)], [value(output_name, element, dims)],
                  name=f"identity_{datatype.lower()}")


def scalar_model() -> onnx.ModelProto:
    """X: an INT64 scalar -> Y = X * 3 (a scalar): served with dims [1]."""
    value = helper.make_tensor_value_info
    three = numpy_helper.from_array(np.array(3, dtype=np.int64), "THREE")
    return _model([helper.make_node("Mul", ["X", "THREE"], ["Y"])],
                  [value("X", TensorProto.INT64, [])], [value("Y", TensorProto.INT64, [])],
                  [three], name="scalar")


def write_model(repository: Path, name: str, model: onnx.ModelProto,
                config: str | None = None, *, version: int = 1, folder: bool = False,
                external: bool = False) -> Path:
    """``repository/name/<version>/model.onnx`` (``model.onnx/model.onnx`` with ``folder``;
    its initializers in ``weights.bin`` beside it with ``external``) and, if given,
    ``repository/name/config.pbtxt``. Returns the ONNX file's path."""
    version_dir = repository / name / str(version)
    target = version_dir / "model.onnx"
    if folder:
        target = target / "model.onnx"
    target.parent.mkdir(parents=True, exist_ok=True)
    if external:
        onnx.save_model(model, str(target), save_as_external_data=True,
                        all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    else:
        onnx.save_model(model, str(target))
    if config is not None:
        (repository / name / "config.pbtxt").write_text(textwrap.dedent(config))
    return target


def reference(model_file: Path, feeds: dict[str, np.ndarray],
              outputs: list[str] | None = None) -> dict[str, np.ndarray]:
    """Run ``model_file`` with onnxruntime directly: the answers the server must give."""
    session = ort.InferenceSession(str(model_file), providers=["CPUExecutionProvider"])
    names = outputs or [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


def as_text(array: np.ndarray) -> np.ndarray:
    """A BYTES array as onnxruntime's string input (object array of str)."""
    return np.vectorize(lambda b: b.decode("utf-8"), otypes=[object])(array)


def as_bytes(array: np.ndarray) -> np.ndarray:
    """onnxruntime's string output as a BYTES array (object array of bytes)."""
    return np.vectorize(lambda s: s.encode("utf-8"), otypes=[object])(array)


def client_module(protocol: str) -> ModuleType:
    """``tritonclient.http`` or ``tritonclient.grpc``."""
    return httpclient if protocol == "http" else grpcclient


def infer(server: ServerProcess, protocol: str, model: str, inputs: dict[str, np.ndarray],
          outputs: list[str] | None = None) -> dict[str, np.ndarray]:
    """One inference through the official client over ``protocol`` ("http" or "grpc");
    returns every output of the response as numpy."""
    module = client_module(protocol)
    url = server.http_url if protocol == "http" else server.grpc_url
    with module.InferenceServerClient(url) as client:
        tensors = []
        for name, array in inputs.items():
            datatype = numpy_to_datatype(array.dtype)
            tensor = module.InferInput(name, list(array.shape), datatype)
            tensor.set_data_from_numpy(array)
            tensors.append(tensor)
        requested = None if outputs is None else [module.InferRequestedOutput(o)
                                                  for o in outputs]
        result = client.infer(model, tensors, outputs=requested)
        response = result.get_response()
        names = ([o["name"] for o in response["outputs"]] if protocol == "http"
                 else [o.name for o in response.outputs])
        return {name: result.as_numpy(name) for name in names}
