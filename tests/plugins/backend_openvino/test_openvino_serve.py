"""OpenVINO models served by a real ``naiad serve``, called with tritonclient over HTTP and
gRPC. The models are an ONNX MLP built in the test and the same MLP converted to IR with
``openvino.convert_model`` / ``openvino.save_model``; every answer is compared with OpenVINO
called directly in the test process (and with numpy). naiad computes in f32 unless a model asks
for less, so FP32 answers are held to FP32 accuracy on every CPU, those where OpenVINO's own
default is bf16 (avx512_bf16, AMX) included."""

from __future__ import annotations

import queue
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from openvino_helpers import cpu_computes_bf16, identity_ir, mlp_onnx, onnx_to_ir, run_directly
from tritonclient.utils import InferenceServerException

from naiad.testing import ServerProcess, naiad_server

pytest.importorskip("naiad_backend_openvino", reason="naiad-backend-openvino is not installed")

PROTOCOLS = ("http", "grpc")
CLIENTS = {"http": httpclient, "grpc": grpcclient}
FEATURES, CLASSES = 4, 3
# How close an FP32 answer is to numpy's: kernels differ in the order they sum, nothing more
# (bf16 is about 1e-2 off, FP16 weights about 1e-3).
F32 = {"rtol": 1e-5, "atol": 1e-6}
# Triton's own sample configuration for an IR model (openvino_backend tests/configs/ir.pbtxt),
# unmodified: no backend, no tensors (the model file and auto-complete supply them).
TRITON_IR_SAMPLE = """parameters: [
{
   key: "NUM_STREAMS"
   value: {
     string_value: "1"
   }
},
{
   key: "PERFORMANCE_HINT"
   value: {
     string_value: "LATENCY"
   }
}
]
"""

MLP_CONFIG = f"""
backend: "openvino"
max_batch_size: 8
input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ {FEATURES} ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ {CLASSES} ] }} ]
instance_group [ {{ count: 2 kind: KIND_CPU }} ]
dynamic_batching {{ }}
response_cache {{ enable: true }}
model_warmup [ {{ name: "zeros" batch_size: 2 inputs {{ key: "INPUT" value: {{
  data_type: TYPE_FP32 dims: [ {FEATURES} ] zero_data: true }} }} }} ]
parameters {{ key: "INFERENCE_NUM_THREADS" value: {{ string_value: "1" }} }}
parameters {{ key: "NUM_STREAMS" value: {{ string_value: "1" }} }}
parameters {{ key: "PERFORMANCE_HINT" value: {{ string_value: "latency" }} }}
"""


def with_parameter(config: str, key: str, value: str) -> str:
    return config + f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}\n'


# Concurrent requests wait up to a second for company: one execution answers them all.
BATCHED_CONFIG = MLP_CONFIG.replace(
    "dynamic_batching { }",
    "dynamic_batching { max_queue_delay_microseconds: 1000000 preferred_batch_size: [ 6 ] }")


def fixed_batch_config(padding: bool) -> str:
    pad = ('parameters { key: "ENABLE_BATCH_PADDING" value: { string_value: "YES" } }\n'
           if padding else "")
    return (f'backend: "openvino"\nmax_batch_size: 4\n'
            f'input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ {FEATURES} ] }} ]\n'
            f'output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ {CLASSES} ] }} ]\n'
            f'parameters {{ key: "SKIP_OV_DYNAMIC_BATCHSIZE" value: {{ string_value: "YES" }} }}'
            f'\n{pad}')


# The same ONNX MLP run by OpenVINO and by ONNX Runtime side by side, in one ensemble.
ENSEMBLE = f"""
platform: "ensemble"
max_batch_size: 8
input [ {{ name: "ROWS" data_type: TYPE_FP32 dims: [ {FEATURES} ] }} ]
output [ {{ name: "BY_OPENVINO" data_type: TYPE_FP32 dims: [ {CLASSES} ] }},
         {{ name: "BY_ONNXRUNTIME" data_type: TYPE_FP32 dims: [ {CLASSES} ] }} ]
ensemble_scheduling {{ step [
  {{ model_name: "mlp_ir" model_version: -1 input_map {{ key: "INPUT" value: "ROWS" }}
     output_map {{ key: "OUTPUT" value: "BY_OPENVINO" }} }},
  {{ model_name: "mlp_onnxruntime" model_version: -1 input_map {{ key: "INPUT" value: "ROWS" }}
     output_map {{ key: "OUTPUT" value: "BY_ONNXRUNTIME" }} }}
] }}
"""

BROKEN = {
    "bad_hint": (MLP_CONFIG.replace('"latency"', '"fastest"'),
                 ("PERFORMANCE_HINT", "LATENCY, THROUGHPUT")),
    "bad_threads": (MLP_CONFIG.replace('"INFERENCE_NUM_THREADS" value: { string_value: "1"',
                                       '"INFERENCE_NUM_THREADS" value: { string_value: "many"'),
                    ("INFERENCE_NUM_THREADS", "non-negative number")),
    "wrong_dims": (MLP_CONFIG.replace(f"dims: [ {FEATURES} ]", "dims: [ 7 ]"),
                   ("tensor 'INPUT'", "dims [7]")),
    "unknown_input": (MLP_CONFIG.replace('name: "INPUT"', 'name: "PIXELS"'),
                      ("'PIXELS'", "INPUT")),
    "fp64_output": (MLP_CONFIG.replace("data_type: TYPE_FP32 dims: [ 3 ]",
                                       "data_type: TYPE_FP64 dims: [ 3 ]"),
                    ("FP64", "does not support")),
    "not_a_model": (MLP_CONFIG, ("OpenVINO cannot read", "model.xml")),
    "bad_precision": (with_parameter(MLP_CONFIG, "INFERENCE_PRECISION_HINT", "fp8"),
                      ("parameter 'INFERENCE_PRECISION_HINT'", "F32, BF16, F16", "'fp8'")),
    "bad_hint_bf16": (with_parameter(MLP_CONFIG, "HINT_BF16", "NO"),
                      ("parameter 'HINT_BF16'", "must be YES", "'NO'")),
    "precision_conflict": (with_parameter(with_parameter(MLP_CONFIG, "HINT_BF16", "YES"),
                                          "INFERENCE_PRECISION_HINT", "f32"),
                           ("HINT_BF16", "INFERENCE_PRECISION_HINT", "disagree")),
    # Warmup runs through the backend: a sample the model refuses fails the load.
    "warmup_refused": (fixed_batch_config(padding=False) + 'model_warmup [ { name: "two" '
                       'batch_size: 2 inputs { key: "INPUT" value: { data_type: TYPE_FP32 '
                       f'dims: [ {FEATURES} ] zero_data: true }} }} }} ]\n',
                       ("ENABLE_BATCH_PADDING", "got '2'")),
}


# A model compiled for [1, 5] only, given any length by RESHAPE_IO_LAYERS (Triton's meaning).
RESHAPED_CONFIG = """
backend: "openvino"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1, -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1, -1 ] } ]
parameters { key: "RESHAPE_IO_LAYERS" value: { string_value: "YES" } }
"""


def static_identity_ir(path: Path) -> None:
    """An IR whose input shape is static: [1, 5]."""
    from openvino_helpers import ops, ov

    parameter = ops.parameter(ov.PartialShape([1, 5]), ov.Type.f32, name="INPUT0")
    model = ov.Model([ops.relu(parameter)], [parameter], "static")
    model.outputs[0].get_tensor().set_names({"OUTPUT0"})
    ov.save_model(model, str(path))


def reference(weights: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    hidden = np.maximum(x @ weights["w1"] + weights["b1"], 0)
    logits = hidden @ weights["w2"] + weights["b2"]
    exp = np.exp(logits - logits.max(axis=1, keepdims=True))
    return exp / exp.sum(axis=1, keepdims=True)


def add(root: Path, name: str, config: str | None, files: dict[str, Path]) -> None:
    (root / name / "1").mkdir(parents=True)
    if config is not None:
        (root / name / "config.pbtxt").write_text(config)
    for target, source in files.items():
        shutil.copy(source, root / name / "1" / target)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    work = tmp_path_factory.mktemp("openvino_models")
    weights = mlp_onnx(work / "mlp.onnx", FEATURES, 8, CLASSES)
    onnx_to_ir(work / "mlp.onnx", work / "mlp.xml")
    identity_ir(work / "i64.xml", "INT64", 2, "INPUT0", "OUTPUT0", batch_layout=False)
    static_identity_ir(work / "static.xml")
    return {"weights": weights, "work": work}


@pytest.fixture(scope="module")
def server(built, tmp_path_factory) -> Iterator[ServerProcess]:
    work: Path = built["work"]  # type: ignore[assignment]
    ir = {"model.xml": work / "mlp.xml", "model.bin": work / "mlp.bin"}
    root = tmp_path_factory.mktemp("openvino_repo")
    add(root, "mlp_ir", MLP_CONFIG, ir)
    add(root, "mlp_auto", None, ir)
    add(root, "mlp_batched", BATCHED_CONFIG, ir)
    add(root, "mlp_triton_sample", TRITON_IR_SAMPLE, ir)
    add(root, "mlp_hint_bf16", with_parameter(MLP_CONFIG, "HINT_BF16", "YES"), ir)
    add(root, "mlp_precision_bf16",
        with_parameter(MLP_CONFIG, "INFERENCE_PRECISION_HINT", "bf16"), ir)
    add(root, "mlp_onnx", 'backend: "openvino"\ndefault_model_filename: "model.onnx"\n'
        'max_batch_size: 8\n', {"model.onnx": work / "mlp.onnx"})
    add(root, "mlp_onnxruntime", 'backend: "onnxruntime"\nmax_batch_size: 8\n',
        {"model.onnx": work / "mlp.onnx"})
    add(root, "both_runtimes", ENSEMBLE, {})
    add(root, "mlp_fixed", fixed_batch_config(padding=False), ir)
    add(root, "mlp_padded", fixed_batch_config(padding=True), ir)
    add(root, "i64", 'backend: "openvino"\nmax_batch_size: 4\n'
        'input [ { name: "INPUT0" data_type: TYPE_INT64 dims: [ -1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_INT64 dims: [ -1 ] } ]\n',
        {"model.xml": work / "i64.xml", "model.bin": work / "i64.bin"})
    static = {"model.xml": work / "static.xml", "model.bin": work / "static.bin"}
    add(root, "static_reshaped", RESHAPED_CONFIG, static)
    add(root, "static_checked", RESHAPED_CONFIG.replace("YES", "NO"), static)
    for name, (config, _) in BROKEN.items():
        add(root, name, config, {} if name == "not_a_model" else ir)
    (root / "not_a_model" / "1" / "model.xml").write_text("<net>not an IR</net>")
    with naiad_server("--model-repository", str(root), "--exit-on-error=false",
                      "--strict-readiness=false", "--cache-config",
                      "local,size=1048576") as process:
        yield process


def client(server: ServerProcess, protocol: str):
    url = server.http_url if protocol == "http" else server.grpc_url
    return CLIENTS[protocol].InferenceServerClient(url)


def infer(server, protocol, model, x, input_name="INPUT", output_name="OUTPUT",
          datatype="FP32"):
    module = CLIENTS[protocol]
    tensor = module.InferInput(input_name, list(x.shape), datatype)
    tensor.set_data_from_numpy(x)
    with client(server, protocol) as c:
        return c.infer(model, [tensor]).as_numpy(output_name)


def rows(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, FEATURES)).astype(np.float32)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("model", ["mlp_ir", "mlp_auto", "mlp_onnx", "mlp_padded"])
def test_answers_equal_openvino_called_directly(server, built, protocol, n, model):
    x = rows(n, seed=n)
    got = infer(server, protocol, model, x)
    work: Path = built["work"]
    direct = run_directly(work / "mlp.xml", {"INPUT": x})["OUTPUT"]
    np.testing.assert_allclose(got, direct, **F32)
    np.testing.assert_allclose(got, reference(built["weights"], x), **F32)


def test_auto_complete_fills_the_config_as_triton(server):
    with client(server, "grpc") as c:
        cfg = c.get_model_config("mlp_auto").config
        sample = c.get_model_config("mlp_triton_sample").config
    assert cfg.backend == "openvino"
    # An ONNX-converted model carries no layout: no batch dimension is assumed, and a
    # shape with a dynamic dimension is written as -1 throughout, as Triton writes it.
    assert cfg.max_batch_size == 0
    assert [(t.name, list(t.dims)) for t in cfg.input] == [("INPUT", [-1, -1])]
    assert [(t.name, list(t.dims)) for t in cfg.output] == [("OUTPUT", [-1, -1])]
    assert sample.backend == "openvino" and [t.name for t in sample.input] == ["INPUT"]
    assert sample.parameters["PERFORMANCE_HINT"].string_value == "LATENCY"


def test_tritons_sample_config_serves(server, built):
    x = rows(2)
    got = infer(server, "http", "mlp_triton_sample", x)
    np.testing.assert_allclose(got, reference(built["weights"], x), **F32)


def test_two_instances_answer_a_dynamic_batch(server, built):
    answers: queue.Queue = queue.Queue()
    sent = {}
    with client(server, "grpc") as c:
        before = c.get_inference_statistics("mlp_batched").model_stats[0]
        for i in range(6):
            x = rows(1, seed=50 + i)
            sent[i] = x
            tensor = grpcclient.InferInput("INPUT", [1, FEATURES], "FP32")
            tensor.set_data_from_numpy(x)
            c.async_infer("mlp_batched", [tensor],
                          callback=lambda result, error, i=i: answers.put((i, result, error)))
        for _ in range(6):
            i, result, error = answers.get(timeout=60)
            assert error is None, error
            np.testing.assert_allclose(result.as_numpy("OUTPUT"),
                                       reference(built["weights"], sent[i]), **F32)
        after = c.get_inference_statistics("mlp_batched").model_stats[0]
    assert after.inference_count - before.inference_count == 6
    assert after.execution_count - before.execution_count == 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_fixed_batch_without_padding_is_refused_as_triton_refuses_it(server, built,
                                                                      protocol):
    with pytest.raises(InferenceServerException) as info:
        infer(server, protocol, "mlp_fixed", rows(2))
    assert info.value.status() in ("400", "StatusCode.INVALID_ARGUMENT"), info.value
    assert "ENABLE_BATCH_PADDING" in info.value.message()
    assert "mlp_fixed" in info.value.message()
    x = rows(4)  # a full batch runs
    np.testing.assert_allclose(infer(server, protocol, "mlp_fixed", x),
                               reference(built["weights"], x), **F32)


@pytest.mark.parametrize("model", ["mlp_hint_bf16", "mlp_precision_bf16"])
def test_a_model_that_asks_for_bf16_computes_in_bf16(server, built, model):
    x = rows(8, seed=21)
    got = infer(server, "grpc", model, x)
    expected = reference(built["weights"], x)
    # bf16 keeps 8 bits of mantissa: within a few percent of FP32, never further.
    np.testing.assert_allclose(got, expected, rtol=5e-2, atol=1e-2)
    # The answer of OpenVINO asked for bf16 (on a CPU without bf16, OpenVINO keeps its default)
    direct = run_directly(built["work"] / "mlp.xml", {"INPUT": x}, "bf16")["OUTPUT"]
    np.testing.assert_allclose(got, direct, **F32)
    if cpu_computes_bf16():
        # bf16's answer, not FP32's (which the same model without the hint gives, see
        # test_answers_equal_openvino_called_directly).
        assert np.abs(got - expected).max() > 1e-4


def test_int64_within_the_32_bit_range_round_trips(server):
    x = np.array([[0, -5, 2**31 - 1], [7, -(2**31), 42]], dtype=np.int64)
    for protocol in PROTOCOLS:
        got = infer(server, protocol, "i64", x, "INPUT0", "OUTPUT0", "INT64")
        np.testing.assert_array_equal(got, x)


def test_a_model_openvino_cannot_serve_fails_its_load_saying_why(server):
    index = {m["name"]: m for m in client(server, "http").get_model_repository_index()}
    for name, (_, fragments) in BROKEN.items():
        entry = index[name]
        assert entry["state"] == "UNAVAILABLE", entry
        for fragment in (name, *fragments):
            assert fragment in entry["reason"], (name, fragment, entry["reason"])


def test_an_ensemble_runs_openvino_beside_onnxruntime(server, built):
    x = rows(3, seed=9)
    for protocol in PROTOCOLS:
        module = CLIENTS[protocol]
        tensor = module.InferInput("ROWS", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        with client(server, protocol) as c:
            result = c.infer("both_runtimes", [tensor])
        np.testing.assert_allclose(result.as_numpy("BY_OPENVINO"),
                                   result.as_numpy("BY_ONNXRUNTIME"), **F32)
        np.testing.assert_allclose(result.as_numpy("BY_OPENVINO"),
                                   reference(built["weights"], x), **F32)


def test_a_warmed_up_model_serves_and_the_response_cache_answers_a_repeat(server):
    x = rows(2, seed=77)
    first = infer(server, "http", "mlp_ir", x)
    again = infer(server, "grpc", "mlp_ir", x)
    np.testing.assert_array_equal(first, again)
    with client(server, "http") as c:
        stats = c.get_inference_statistics("mlp_ir")["model_stats"][0]["inference_stats"]
    assert stats["cache_hit"]["count"] >= 1, stats


def test_reshape_io_layers_gives_a_static_model_the_configured_dims(server):
    x = np.array([[-1.0, 2.0, -3.0, 4.0, 5.0, -6.0, 7.0]], dtype=np.float32)  # 7, not 5
    for protocol in PROTOCOLS:
        got = infer(server, protocol, "static_reshaped", x, "INPUT0", "OUTPUT0")
        np.testing.assert_array_equal(got, np.maximum(x, 0))
    # Without it the dims are checked against the model's, as Triton checks them: a -1 in
    # the config agrees with the model's 5, and only 5 elements run.
    with pytest.raises(InferenceServerException):
        infer(server, "http", "static_checked", x, "INPUT0", "OUTPUT0")
    five = x[:, :5]
    np.testing.assert_array_equal(infer(server, "grpc", "static_checked", five, "INPUT0",
                                        "OUTPUT0"), np.maximum(five, 0))
