"""TensorFlow models served by a real ``naiad serve``, called with tritonclient over HTTP and
gRPC: a Keras model exported as a SavedModel (no config.pbtxt: auto-complete), a
``tf.Module`` SavedModel with two signatures and BYTES tensors, and the Keras model frozen
into a GraphDef. ``build_tf_models.py`` builds them with TensorFlow, in a process of its own,
and records what TensorFlow answers; every answer here must equal it."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
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
    return folder / "repo", expected


@pytest.fixture(scope="module")
def server(built) -> Iterator[ServerProcess]:
    with naiad_server("--model-repository", str(built[0]), "--exit-on-error=false",
                      "--strict-readiness=false", ready_timeout=120) as process:
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
