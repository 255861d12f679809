"""Issue 32, item 7: strict readiness for a model whose backend fails while completing its
configuration. Before the fix, a Python model whose ``model.py`` fails to import at
auto-complete, or whose ``requirements.txt`` fails to build, left ``/v2/health/ready`` at
200 with ``--exit-on-error=false``; Triton meets both failures loading the model's
versions and answers 400, so a load balancer would send traffic to a server with a broken
model. Now readiness is 400 while such a model has no serving version, 200 again once it
loads, and the other models keep serving throughout."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from naiad.testing import ServerProcess, naiad_server

CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
"""
IDENTITY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests]
"""
BROKEN_IMPORT = "import naiad_no_such_module_g32\n" + IDENTITY


def _config_json(name: str) -> dict:
    """CONFIG as the load API's JSON (its files uploaded with it: no requirements.txt)."""
    return {"name": name, "backend": "python", "max_batch_size": 0,
            "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
            "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}]}


def _model(repo: Path, name: str, model_py: str) -> Path:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(CONFIG)
    (repo / name / "1" / "model.py").write_text(model_py)
    return repo / name


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("readiness")
    repo = root / "repo"
    _model(repo, "good", IDENTITY)
    _model(repo, "broken_import", BROKEN_IMPORT)
    reqs = _model(repo, "broken_requirements", IDENTITY)
    # a local project that does not exist: pip fails at once, without the network
    (reqs / "requirements.txt").write_text("./naiad-no-such-project-g32\n")
    with naiad_server("--model-repository", str(repo), "--model-control-mode=explicit",
                      "--load-model=good", "--exit-on-error=false",
                      "--backend-config", f"python,env-cache-dir={root / 'envs'}") as started:
        yield started


def _ready_status(server: ServerProcess) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=10)
    try:
        conn.request("GET", "/v2/health/ready")
        return conn.getresponse().status
    finally:
        conn.close()


def _good_serves(client: httpclient.InferenceServerClient) -> None:
    data = np.arange(3, dtype=np.float32)
    tensor = httpclient.InferInput("INPUT0", [3], "FP32")
    tensor.set_data_from_numpy(data)
    np.testing.assert_array_equal(client.infer("good", [tensor]).as_numpy("OUTPUT0"), data)


@pytest.mark.parametrize("name", [
    "broken_import",
    # builds an environment (a venv and pip): about 11 s on 2 busy cores
    pytest.param("broken_requirements", marks=pytest.mark.long)])
def test_a_backend_failure_holds_readiness_until_the_model_loads(
        server: ServerProcess, name: str) -> None:
    with httpclient.InferenceServerClient(server.http_url) as client:
        assert _ready_status(server) == 200
        with pytest.raises(InferenceServerException):
            client.load_model(name)
        assert _ready_status(server) == 400  # Triton 2.51's answer
        assert client.is_server_live()
        _good_serves(client)
        # the same model loaded with a working definition: ready again
        client.load_model(name, config=json.dumps(_config_json(name)),
                          files={"file:1/model.py": IDENTITY.encode()})
        assert _ready_status(server) == 200
        client.unload_model(name)
        _good_serves(client)


def test_a_start_up_model_failing_at_auto_complete_holds_readiness(tmp_path: Path) -> None:
    """The issue's case: loaded at start with --exit-on-error=false (model control none)."""
    repo = tmp_path / "repo"
    _model(repo, "good", IDENTITY)
    _model(repo, "broken_import", BROKEN_IMPORT)
    # ready_status=400: the server answers 503 while it starts, so 400 is its verdict
    with naiad_server("--model-repository", str(repo), "--exit-on-error=false",
                      ready_status=400) as started:
        assert _ready_status(started) == 400
        with httpclient.InferenceServerClient(started.http_url) as client:
            assert client.is_server_live()
            assert not client.is_model_ready("broken_import")
            _good_serves(client)
