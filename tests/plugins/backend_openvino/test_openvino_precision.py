"""The precision an OpenVINO model computes in, without a server: the parameters that choose
it, and what the compiled model reports. naiad compiles in f32 unless a model asks for less
(OpenVINO's CPU plugin would pick bf16 on CPUs with avx512_bf16 or AMX)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc.model_config_pb2 as mc
from google.protobuf import text_format
from openvino_helpers import cpu_computes_bf16, mlp_onnx, ov

from naiad.errors import InferenceServerError, Status
from naiad.types import InferenceRequest, InstanceInfo, ModelContext, Tensor

pytest.importorskip("naiad_backend_openvino", reason="naiad-backend-openvino is not installed")
from naiad_backend_openvino.backend import OpenVinoBackend
from naiad_backend_openvino.parameters import parse

MLP = """
backend: "openvino"
default_model_filename: "model.onnx"
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 3 ] } ]
"""


def config(parameters: dict[str, str], name: str = "net") -> mc.ModelConfig:
    parsed = text_format.Parse(MLP, mc.ModelConfig())
    parsed.name = name
    for key, value in parameters.items():
        parsed.parameters[key].string_value = value
    return parsed


def precision(parameters: dict[str, str]) -> str:
    return parse(config(parameters), "net").properties["INFERENCE_PRECISION_HINT"]


@pytest.mark.parametrize(("parameters", "expected"), [
    ({}, "f32"),
    ({"PERFORMANCE_HINT": "THROUGHPUT"}, "f32"),
    ({"HINT_BF16": "yes"}, "bf16"),
    ({"INFERENCE_PRECISION_HINT": "bf16"}, "bf16"),
    ({"INFERENCE_PRECISION_HINT": " BF16 "}, "bf16"),
    ({"INFERENCE_PRECISION_HINT": "f16"}, "f16"),
    ({"INFERENCE_PRECISION_HINT": "F32"}, "f32"),
    ({"INFERENCE_PRECISION_HINT": ""}, "f32"),  # an empty value is no value, as in Triton
    ({"HINT_BF16": "YES", "INFERENCE_PRECISION_HINT": "bf16"}, "bf16"),
])
def test_the_precision_is_f32_unless_the_config_asks_for_less(parameters, expected):
    assert precision(parameters) == expected


@pytest.mark.parametrize(("parameters", "fragments"), [
    ({"INFERENCE_PRECISION_HINT": "fp8"},
     ("model 'net'", "parameter 'INFERENCE_PRECISION_HINT'", "F32, BF16, F16", "'fp8'")),
    ({"INFERENCE_PRECISION_HINT": "float32"}, ("INFERENCE_PRECISION_HINT", "'float32'")),
    ({"HINT_BF16": "NO"}, ("model 'net'", "parameter 'HINT_BF16'", "must be YES", "'NO'")),
    ({"HINT_BF16": "YES", "INFERENCE_PRECISION_HINT": "f32"},
     ("model 'net'", "'HINT_BF16'", "'INFERENCE_PRECISION_HINT' (F32)", "disagree")),
])
def test_a_bad_precision_fails_the_load_naming_model_parameter_and_values(parameters,
                                                                         fragments):
    with pytest.raises(InferenceServerError) as caught:
        parse(config(parameters), "net")
    assert caught.value.status == Status.INVALID_ARG
    for fragment in fragments:
        assert fragment in caught.value.message, (fragment, caught.value.message)


@pytest.fixture(scope="module")
def mlp_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model_dir = tmp_path_factory.mktemp("precision") / "net"
    (model_dir / "1").mkdir(parents=True)
    mlp_onnx(model_dir / "1" / "model.onnx")
    return model_dir


def load(mlp_dir: Path, parameters: dict[str, str]):
    context = ModelContext(name="net", version=1, config=config(parameters),
                           model_dir=mlp_dir, version_dir=mlp_dir / "1",
                           repository=mlp_dir.parent, backend_config={})
    return OpenVinoBackend().create_instance(context, InstanceInfo("net_0", "KIND_CPU", 0, 0))


def compiled_precision(instance) -> ov.Type:
    return instance.request.get_compiled_model().get_property("INFERENCE_PRECISION_HINT")


def test_a_model_that_asks_for_nothing_is_compiled_in_f32(mlp_dir):
    instance = load(mlp_dir, {})
    try:
        # On a CPU with bf16 (avx512_bf16, AMX) OpenVINO's own default is bf16.
        assert compiled_precision(instance) == ov.Type.f32
    finally:
        instance.close()


@pytest.mark.parametrize("parameters", [{"HINT_BF16": "YES"},
                                        {"INFERENCE_PRECISION_HINT": "bf16"}])
def test_a_model_that_asks_for_bf16_is_compiled_as_openvino_compiles_bf16(mlp_dir, parameters):
    instance = load(mlp_dir, parameters)
    try:
        direct = ov.Core().compile_model(str(mlp_dir / "1" / "model.onnx"), "CPU",
                                         {"INFERENCE_PRECISION_HINT": "bf16"})
        assert compiled_precision(instance) == direct.get_property("INFERENCE_PRECISION_HINT")
        if cpu_computes_bf16():
            assert compiled_precision(instance) == ov.Type.bf16
        x = np.random.default_rng(3).normal(size=(2, 4)).astype(np.float32)
        request = InferenceRequest(model_name="net", model_version=1,
                                   inputs={"INPUT": Tensor("INPUT", "FP32", (2, 4), x)})
        [response] = instance.execute([request])
        np.testing.assert_allclose(response.outputs[0].data,
                                   np.asarray(direct({"INPUT": x})["OUTPUT"]),
                                   rtol=1e-5, atol=1e-6)
    finally:
        instance.close()
