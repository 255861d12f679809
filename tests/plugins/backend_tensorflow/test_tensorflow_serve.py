"""TensorFlow models served by a real ``naiad serve``, called with tritonclient over HTTP and
gRPC: a Keras model exported as a SavedModel (no config.pbtxt: auto-complete), a
``tf.Module`` SavedModel with two signatures and BYTES tensors, and the Keras model frozen
into a GraphDef. ``build_tf_models.py`` builds them with TensorFlow, in a process of its own,
and records what TensorFlow answers; every answer here must equal it."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from naiad.testing import ServerProcess, naiad_server

# Checked without importing TensorFlow here (seconds): only the builder and the server do.
if importlib.util.find_spec("tensorflow") is None:
    pytest.skip("tensorflow (tensorflow-cpu) is not installed", allow_module_level=True)
if importlib.util.find_spec("naiad_backend_tensorflow") is None:
    pytest.skip("naiad-backend-tensorflow is not installed", allow_module_level=True)

BUILDER = Path(__file__).with_name("build_tf_models.py")
PROTOCOLS = ("http", "grpc")
CLIENTS = {"http": httpclient, "grpc": grpcclient}
BUILD_SECONDS = 240


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray]]:
    folder = tmp_path_factory.mktemp("tensorflow_models")
    subprocess.run([sys.executable, str(BUILDER), str(folder)], check=True,
                   capture_output=True, timeout=BUILD_SECONDS)
    with np.load(folder / "expected.npz", allow_pickle=True) as data:
        expected = {key: data[key] for key in data.files}
    write_ensemble(folder / "repo")
    return folder / "repo", expected


def write_ensemble(repo: Path) -> None:
    """An ONNX step doubling the features, then the Keras SavedModel."""
    onnx = pytest.importorskip("onnx", reason="onnx is not installed (for the ensemble step)")
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Add", ["INPUT", "INPUT"], ["DOUBLED"])], "double",
        [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, [None, 4])],
        [helper.make_tensor_value_info("DOUBLED", TensorProto.FLOAT, [None, 4])])
    (repo / "double" / "1").mkdir(parents=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]),
              str(repo / "double" / "1" / "model.onnx"))
    (repo / "doubled_keras" / "1").mkdir(parents=True)
    (repo / "doubled_keras" / "config.pbtxt").write_text("""
platform: "ensemble"
max_batch_size: 4
input [ { name: "ROWS" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "PROBABILITIES" data_type: TYPE_FP32 dims: [ 3 ] } ]
ensemble_scheduling { step [
  { model_name: "double" model_version: -1
    input_map { key: "INPUT" value: "ROWS" } output_map { key: "DOUBLED" value: "D" } },
  { model_name: "keras_auto" model_version: -1
    input_map { key: "features" value: "D" }
    output_map { key: "output_0" value: "PROBABILITIES" } }
] }
""")


@pytest.fixture(scope="module")
def server(built) -> Iterator[ServerProcess]:
    with naiad_server("--model-repository", str(built[0]), "--exit-on-error=false",
                      "--strict-readiness=false", "--cache-config", "local,size=1048576",
                      ready_timeout=120) as process:
        yield process


def client(server: ServerProcess, protocol: str):
    url = server.http_url if protocol == "http" else server.grpc_url
    return CLIENTS[protocol].InferenceServerClient(url)


def infer(server, protocol, model, inputs, outputs):
    module = CLIENTS[protocol]
    tensors = []
    for name, datatype, array in inputs:
        tensor = module.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    with client(server, protocol) as c:
        result = c.infer(model, tensors)
        return [result.as_numpy(name) for name in outputs]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("rows", [1, 3])
def test_keras_savedmodel_without_config_answers_as_keras(server, built, protocol, rows):
    expected = built[1]
    [got] = infer(server, protocol, "keras_auto", [("features", "FP32", expected[f"x{rows}"])],
                  ["output_0"])
    np.testing.assert_allclose(got, expected[f"keras_{rows}"], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("rows", [1, 3])
def test_frozen_graphdef_answers_as_keras(server, built, protocol, rows):
    expected = built[1]
    placeholder, output = (str(n) for n in expected["graphdef_names"])
    [got] = infer(server, protocol, "keras_graphdef",
                  [(placeholder, "FP32", expected[f"x{rows}"])], [output])
    np.testing.assert_allclose(got, expected[f"graphdef_{rows}"], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got, expected[f"keras_{rows}"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_bytes_tensors_are_tf_strings(server, built, protocol):
    expected = built[1]
    output0, upper = infer(server, protocol, "module_default",
                           [("INPUT0", "FP32", expected["x3"]),
                            ("TEXT", "BYTES", expected["text"])], ["OUTPUT0", "UPPER"])
    np.testing.assert_allclose(output0, expected["module_output0"], rtol=1e-6)
    assert upper.tolist() == expected["module_upper"].tolist()


def test_the_configured_signature_def_is_served(server, built):
    expected = built[1]
    for protocol in PROTOCOLS:
        [got] = infer(server, protocol, "module_scaled", [("X", "FP32", expected["x3"])],
                      ["Y"])
        np.testing.assert_array_equal(got, expected["scaled_3"])


def test_auto_complete_fills_what_tritons_backend_fills(server):
    with client(server, "grpc") as c:
        keras_cfg = c.get_model_config("keras_auto").config
        module_cfg = c.get_model_config("module_default").config
        scaled_cfg = c.get_model_config("module_scaled").config
    assert (keras_cfg.platform, keras_cfg.backend) == ("tensorflow_savedmodel", "tensorflow")
    assert keras_cfg.max_batch_size == 4  # Triton's default-max-batch-size
    assert keras_cfg.HasField("dynamic_batching")
    assert [(t.name, list(t.dims)) for t in keras_cfg.input] == [("features", [4])]
    assert [(t.name, list(t.dims)) for t in keras_cfg.output] == [("output_0", [3])]
    assert [(t.name, t.data_type, list(t.dims)) for t in module_cfg.input] == [
        ("INPUT0", 11, [4]), ("TEXT", 13, [2])]  # TYPE_FP32, TYPE_STRING
    # The config named the signature and max_batch_size; its tensors came from "scaled".
    assert scaled_cfg.max_batch_size == 8
    assert [t.name for t in scaled_cfg.input] == ["X"]
    assert [t.name for t in scaled_cfg.output] == ["Y"]


def test_models_tensorflow_cannot_serve_fail_their_load_saying_why(server):
    index = {m["name"]: m for m in client(server, "http").get_model_repository_index()}
    for name, fragments in {
        "wrong_signature": ("expected 'predict' signature", "serving_default"),
        "wrong_input": ("'pixels'", "not a Placeholder"),
        "graphdef_no_config": ("config.pbtxt must list them", "features"),
    }.items():
        entry = index[name]
        assert entry["state"] == "UNAVAILABLE", entry
        for fragment in (name, *fragments):
            assert fragment in entry["reason"], (fragment, entry["reason"])


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_wrong_shape_is_refused_and_the_model_keeps_serving(server, built, protocol):
    with pytest.raises(InferenceServerException) as info:
        infer(server, protocol, "keras_auto",
              [("features", "FP32", np.zeros((2, 5), np.float32))], ["output_0"])
    assert info.value.status() in ("400", "StatusCode.INVALID_ARGUMENT"), info.value
    assert "keras_auto" in info.value.message() and "features" in info.value.message()
    expected = built[1]
    [got] = infer(server, protocol, "keras_auto", [("features", "FP32", expected["x1"])],
                  ["output_0"])
    np.testing.assert_allclose(got, expected["keras_1"], rtol=1e-6, atol=1e-7)


def test_an_ensemble_feeds_an_onnx_step_into_a_savedmodel(server, built):
    expected = built[1]
    for protocol in PROTOCOLS:
        [got] = infer(server, protocol, "doubled_keras", [("ROWS", "FP32", expected["x3"])],
                      ["PROBABILITIES"])
        np.testing.assert_allclose(got, expected["keras_doubled_3"], rtol=1e-5, atol=1e-6)


def test_warmup_statistics_metrics_and_the_response_cache(server, built):
    # keras_cached has a model_warmup sample: it loaded (a warmup that fails fails the load).
    expected = built[1]
    for protocol in PROTOCOLS:  # the second is answered from the cache
        [got] = infer(server, protocol, "keras_cached", [("features", "FP32", expected["x3"])],
                      ["output_0"])
        np.testing.assert_allclose(got, expected["keras_3"], rtol=1e-6, atol=1e-7)
    with client(server, "http") as c:
        stats = c.get_inference_statistics("keras_cached")["model_stats"][0]
    assert stats["inference_stats"]["cache_hit"]["count"] == 1, stats
    assert stats["execution_count"] == 1, stats  # warmup is not counted, as in Triton
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics",
                                     timeout=10).read().decode()
    # Two requests of 3 rows, one a cache hit: Triton counts 2 successes and 3 inferences.
    assert 'nv_inference_request_success{model="keras_cached",version="1"} 2' in metrics
    assert 'nv_inference_count{model="keras_cached",version="1"} 3' in metrics
