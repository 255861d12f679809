"""The plugin contract: a third-party backend installed with pip serves a model, a backend
no model uses is never imported, and the core imports no framework."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from zoo import ADD_SUB_CONFIG, ADD_SUB_PY, write_model

from naiad.testing import naiad_server

FIXTURES = Path(__file__).parent.parent / "fixtures"

SCALE_CONFIG = """
name: "doubler"
backend: "scale"
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
parameters { key: "factor", value: { string_value: "2" } }
"""


@pytest.fixture(scope="module")
def third_party(tmp_path_factory) -> Path:
    """The plugin guide's backend and an unused one, pip-installed into a folder of their own
    that only the server process sees (PYTHONPATH)."""
    target = tmp_path_factory.mktemp("site")
    for name in ("naiad-backend-scale", "naiad-backend-unused"):
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                        "--no-build-isolation", "--target", str(target),
                        str(FIXTURES / name)], check=True, timeout=300)
    return target


def test_third_party_backend_serves_and_unused_backend_is_not_imported(third_party, tmp_path):
    repo = tmp_path / "repo"
    write_model(repo, "add_sub", ADD_SUB_CONFIG, ADD_SUB_PY)
    (repo / "doubler" / "1").mkdir(parents=True)
    (repo / "doubler" / "config.pbtxt").write_text(SCALE_CONFIG)
    marker = tmp_path / "imported"
    env = {"PYTHONPATH": str(third_party), "NAIAD_TEST_IMPORT_MARKER": str(marker)}
    listing = subprocess.run([sys.executable, "-m", "naiad", "plugins"], env={
        **__import__("os").environ, **env}, capture_output=True, text=True, timeout=60)
    assert "naiad-backend-scale 1.0.0" in listing.stdout
    assert "naiad-backend-unused 1.0.0" in listing.stdout
    with naiad_server("--model-repository", str(repo), env=env) as server, \
            httpclient.InferenceServerClient(server.http_url) as client:
        tensor = httpclient.InferInput("INPUT0", [3], "FP32")
        tensor.set_data_from_numpy(np.array([1, 2, 3], np.float32))
        result = client.infer("doubler", [tensor])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), [2, 4, 6])
    assert not marker.exists(), "a backend no model uses was imported"


def test_blocked_plugin_makes_its_models_unavailable(third_party, tmp_path):
    repo = tmp_path / "repo"
    write_model(repo, "add_sub", ADD_SUB_CONFIG, ADD_SUB_PY)
    (repo / "doubler" / "1").mkdir(parents=True)
    (repo / "doubler" / "config.pbtxt").write_text(SCALE_CONFIG)
    with naiad_server("--model-repository", str(repo), "--exit-on-error=false",
                      "--block-plugin", "naiad-backend-scale",
                      env={"PYTHONPATH": str(third_party)}) as server, \
            httpclient.InferenceServerClient(server.http_url) as client:
        assert client.is_model_ready("add_sub")
        index = {m["name"]: m for m in client.get_model_repository_index()}
        assert index["doubler"]["state"] == "UNAVAILABLE"
        assert "backend 'scale'" in index["doubler"]["reason"]


def test_backend_not_installed_names_the_package(tmp_path):
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "config.pbtxt").write_text('name: "m"\nplatform: "onnxruntime_onnx"\n')
    write_model(tmp_path, "add_sub", ADD_SUB_CONFIG, ADD_SUB_PY)
    # The test environment has the ONNX backend installed: blocking it is what "not
    # installed" looks like to the server.
    with naiad_server("--model-repository", str(tmp_path), "--exit-on-error=false",
                      "--block-plugin", "onnxruntime") as server, \
            httpclient.InferenceServerClient(server.http_url) as client:
        index = {m["name"]: m for m in client.get_model_repository_index()}
        assert "pip install naiad-backend-onnx" in index["m"]["reason"]
        assert "pip install ./plugins/backend-onnx" in index["m"]["reason"]


def test_core_imports_no_framework():
    code = ("import sys, naiad.serve, naiad.cli, naiad.server, naiad.frontends.grpc; "
            "import json; print(json.dumps(sorted(sys.modules)))")
    modules = set(json.loads(subprocess.run([sys.executable, "-c", code], check=True,
                                            capture_output=True, text=True).stdout))
    for framework in ("torch", "onnxruntime", "tensorrt", "boto3", "google.cloud",
                      "treelite", "xgboost", "lightgbm", "sklearn", "openvino",
                      "tensorflow", "keras",
                      "naiad_backend_python", "triton_python_backend_utils"):
        assert framework not in modules
