"""BLS end to end: a real ``naiad serve``, Python models (in a worker process and in-process)
calling an ONNX model, an ensemble, a decoupled Python model and a model that is not there,
driven with the official tritonclient over HTTP and gRPC."""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from naiad.testing import ServerProcess, naiad_server

onnx = pytest.importorskip("onnx", reason="the ONNX model needs the onnx package")
pytest.importorskip("naiad_backend_onnx", reason="the ONNX model needs naiad-backend-onnx")
from onnx import TensorProto, helper  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "model_repository"
MODES = ["isolated", "in_process"]

ONNX_ADD_SUB_CONFIG = """
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

REPEAT_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""

REPEAT_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            count = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            for i in range(count):
                out = pb_utils.Tensor("OUT", np.full(4, i, np.float32))
                sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

BLS_CONFIG = """
backend: "python"
max_batch_size: 0
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "PRODUCT" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "STREAMED" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "GATHERED" data_type: TYPE_FP32 dims: [ 4 ] }
]
parameters { key: "EXECUTION_MODE" value: { string_value: "%s" } }
"""

# SUM from the ONNX model, PRODUCT from the ensemble, STREAMED: the sum of the decoupled
# model's three responses, GATHERED: four concurrent async calls to the ONNX model, summed.
# A call into a model that is not there must come back as an error response.
BLS_PY = """
import asyncio
import numpy as np
import triton_python_backend_utils as pb_utils


def output(response, name):
    if response.has_error():
        raise pb_utils.TritonModelException(response.error().message())
    return pb_utils.get_output_tensor_by_name(response, name).as_numpy()


class TritonPythonModel:
    async def execute(self, requests):
        answers = []
        for request in requests:
            inputs = [pb_utils.get_input_tensor_by_name(request, n) for n in ("INPUT0", "INPUT1")]
            onnx = pb_utils.InferenceRequest(model_name="add_sub_onnx", inputs=inputs,
                                             requested_output_names=["OUTPUT0"])
            total = output(onnx.exec(), "OUTPUT0")
            ensemble = pb_utils.InferenceRequest(model_name="pipeline", inputs=inputs,
                                                 requested_output_names=["OUTPUT"])
            product = output(ensemble.exec(), "OUTPUT")
            repeat = pb_utils.InferenceRequest(
                model_name="repeat", inputs=[pb_utils.Tensor("IN", np.array([3], np.int32))],
                requested_output_names=["OUT"])
            streamed = sum(output(r, "OUT") for r in repeat.exec(decoupled=True)
                           if r.output_tensors())
            gathered = await asyncio.gather(*(onnx.async_exec() for _ in range(4)))
            gathered = sum(output(r, "OUTPUT0") for r in gathered)
            missing = pb_utils.InferenceRequest(model_name="not_loaded", inputs=inputs,
                                                requested_output_names=["X"]).exec()
            if not missing.has_error() or "not_loaded" not in missing.error().message():
                raise pb_utils.TritonModelException("a call into a missing model succeeded")
            answers.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("SUM", total), pb_utils.Tensor("PRODUCT", product),
                pb_utils.Tensor("STREAMED", streamed.astype(np.float32)),
                pb_utils.Tensor("GATHERED", gathered)]))
        return answers
"""


def _write(repo: Path, name: str, config: str, model_py: str | None = None) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(textwrap.dedent(config))
    if model_py is not None:
        (repo / name / "1" / "model.py").write_text(textwrap.dedent(model_py))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("bls_repo")
    for name in ("add_sub", "mul", "pipeline"):
        shutil.copytree(EXAMPLES / name, repo / name)
    _write(repo, "add_sub_onnx", ONNX_ADD_SUB_CONFIG)
    value = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
         helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"])], "add_sub",
        [value("INPUT0", TensorProto.FLOAT, [4]), value("INPUT1", TensorProto.FLOAT, [4])],
        [value("OUTPUT0", TensorProto.FLOAT, [4]), value("OUTPUT1", TensorProto.FLOAT, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              ir_version=8)
    onnx.save_model(model, str(repo / "add_sub_onnx" / "1" / "model.onnx"))
    _write(repo, "repeat", REPEAT_CONFIG, REPEAT_PY)
    for mode in MODES:
        _write(repo, f"bls_{mode}", BLS_CONFIG % mode, BLS_PY)
    with naiad_server("--model-repository", str(repo)) as process:
        yield process


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("mode", MODES)
def test_bls_reaches_onnx_ensembles_and_decoupled_models(server, protocol, mode):
    client_module = httpclient if protocol == "http" else grpcclient
    url = server.http_url if protocol == "http" else server.grpc_url
    client = client_module.InferenceServerClient(url)
    a = np.array([1, 2, 3, 4], np.float32)
    b = np.array([4, 3, 2, 1], np.float32)
    inputs = []
    for name, data in (("INPUT0", a), ("INPUT1", b)):
        tensor = client_module.InferInput(name, [4], "FP32")
        tensor.set_data_from_numpy(data)
        inputs.append(tensor)
    result = client.infer(f"bls_{mode}", inputs)
    np.testing.assert_array_equal(result.as_numpy("SUM"), a + b)
    np.testing.assert_array_equal(result.as_numpy("PRODUCT"), (a + b) * (a - b))
    np.testing.assert_array_equal(result.as_numpy("STREAMED"), np.full(4, 0 + 1 + 2))
    np.testing.assert_array_equal(result.as_numpy("GATHERED"), 4 * (a + b))
