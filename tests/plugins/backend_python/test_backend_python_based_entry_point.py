"""Triton's Python-based backends shipped in a distribution: a ``naiad.backends`` entry
point that names a package holding a ``model.py`` serves every model whose config names
that backend (``auto_complete_config`` included), as ``<backend directory>/NAME/model.py``
does. Installed here as a dist-info on PYTHONPATH that only the server sees."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

from naiad.testing import naiad_server

BACKEND_MODEL = '''
"""A Python-based backend: doubles INPUT0; fills the config of models that name it."""
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.add_input({"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]})
        config.add_output({"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]})
        config.set_max_batch_size(0)
        return config

    def initialize(self, args):
        self.name = args["model_name"]

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() * 2)])
            for r in requests]
'''


def _distribution(site: Path) -> None:
    package = site / "naiad_backend_doubling"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('"""Triton\'s doubling backend, for naiad."""\n')
    (package / "model.py").write_text(textwrap.dedent(BACKEND_MODEL))
    info = site / "naiad_backend_doubling-1.0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: naiad-backend-doubling\n"
                                   "Version: 1.0.0\n")
    (info / "entry_points.txt").write_text("[naiad.backends]\ndoubling = "
                                           "naiad_backend_doubling\n")


def test_a_python_based_backend_from_an_entry_point(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _distribution(site)
    repo = tmp_path / "repo"
    (repo / "twice" / "1").mkdir(parents=True)
    (repo / "twice" / "config.pbtxt").write_text('backend: "doubling"\n')
    with naiad_server("--model-repository", str(repo),
                      "--backend-directory", str(tmp_path / "no-backends"),
                      env={"PYTHONPATH": str(site)}) as server, \
            httpclient.InferenceServerClient(server.http_url) as client:
        config = client.get_model_config("twice")
        assert config["backend"] == "doubling"
        assert [i["name"] for i in config["input"]] == ["INPUT0"]  # auto-completed
        tensor = httpclient.InferInput("INPUT0", [3], "FP32")
        tensor.set_data_from_numpy(np.array([1, 2, 3], np.float32))
        result = client.infer("twice", [tensor])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), [2, 4, 6])


def test_a_blocked_python_based_backend_is_not_served(
        tmp_path: Path) -> None:
    site = tmp_path / "site"
    _distribution(site)
    repo = tmp_path / "repo"
    (repo / "twice" / "1").mkdir(parents=True)
    (repo / "twice" / "config.pbtxt").write_text('backend: "doubling"\n')
    with naiad_server("--model-repository", str(repo), "--exit-on-error=false",
                      "--backend-directory", str(tmp_path / "no-backends"),
                      "--block-plugin", "naiad-backend-doubling",
                      env={"PYTHONPATH": str(site)}) as server, \
            httpclient.InferenceServerClient(server.http_url) as client:
        assert not client.is_model_ready("twice")
        index = {m["name"]: m for m in client.get_model_repository_index()}
        assert "backend 'doubling' is not installed or not permitted" in index["twice"]["reason"]


def test_a_backend_named_like_its_package_says_the_package_is_missing(tmp_path: Path) -> None:
    """Triton's vllm_backend: <backend directory>/vllm/model.py imports vllm. Where vllm is
    not installed, the load fails saying so (the backend's own folder does not pose as the
    vllm package), and its sibling modules import as in Triton."""
    backends = tmp_path / "backends"
    (backends / "vllm" / "utils").mkdir(parents=True)
    (backends / "vllm" / "utils" / "__init__.py").write_text("")
    (backends / "vllm" / "utils" / "metrics.py").write_text("READY = True\n")
    (backends / "vllm" / "model.py").write_text(textwrap.dedent('''
        import triton_python_backend_utils as pb_utils
        from utils.metrics import READY  # the backend's own folder, as vllm_backend's
        from vllm.engine.arg_utils import AsyncEngineArgs


        class TritonPythonModel:
            def execute(self, requests):
                return []
        '''))
    repo = tmp_path / "repo"
    (repo / "llm" / "1").mkdir(parents=True)
    (repo / "llm" / "1" / "model.json").write_text('{"model": "facebook/opt-125m"}')
    (repo / "llm" / "config.pbtxt").write_text('backend: "vllm"\n')
    # --strict-readiness=false: a model that fails its auto-complete holds readiness back.
    with naiad_server("--model-repository", str(repo), "--exit-on-error=false",
                      "--strict-readiness=false",
                      "--backend-directory", str(backends)) as server, \
            httpclient.InferenceServerClient(server.http_url) as client:
        index = {m["name"]: m for m in client.get_model_repository_index()}
        assert index["llm"]["state"] == "UNAVAILABLE"
        assert "No module named 'vllm'" in index["llm"]["reason"]
