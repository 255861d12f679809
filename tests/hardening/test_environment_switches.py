"""Issue 32, second round: the switches that turn a Python model's own environment off.

A ``requirements.txt`` (pip runs a source distribution's build) and ``EXECUTION_ENV_PATH``
(an environment's ``bin/python`` is started) both run code that a model's folder brings;
through the load API that is whoever reaches it (docs/security-and-limits.md, "Code
execution through the load API"). ``--backend-config python,allow-requirements-txt=false``
and ``allow-execution-env-path=false`` refuse such a model's load with a message naming the
setting, before anything is built or unpacked; other models keep serving. Before, there was
no such setting (the keys were ignored and the environment built).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException
from zoo import IDENTITY_PY, identity_config, write_model

from naiad.errors import InferenceServerError
from naiad.testing import ServerProcess, naiad_server

settings = pytest.importorskip("naiad_backend_python.settings",
                               reason="naiad-backend-python is not installed")

ENV_PARAMETER = """
parameters { key: "EXECUTION_ENV_PATH"
             value { string_value: "$$TRITON_MODEL_DIRECTORY/env.tar.gz" } }
"""


def _model(repo: Path, name: str, extra_config: str = "") -> Path:
    return write_model(repo, name, identity_config(name, "TYPE_FP32") + extra_config,
                       IDENTITY_PY)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("env-switches-cache")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path
           ) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("env-switches") / "repo"
    _model(repo, "plain")
    # pip would build this (an empty environment) were it allowed
    (_model(repo, "with_requirements") / "requirements.txt").write_text("# nothing\n")
    # never opened: the switch refuses the model before its archive is read
    (_model(repo, "with_env", ENV_PARAMETER) / "env.tar.gz").write_bytes(b"not an archive")
    with naiad_server("--model-repository", str(repo), "--model-control-mode=explicit",
                      "--load-model=plain",
                      "--backend-config", f"python,env-cache-dir={cache_dir}",
                      "--backend-config", "python,allow-requirements-txt=false",
                      "--backend-config", "python,allow-execution-env-path=false") as started:
        yield started


@pytest.mark.parametrize(("model", "setting"), [
    ("with_requirements", "--backend-config python,allow-requirements-txt=false"),
    ("with_env", "--backend-config python,allow-execution-env-path=false"),
])
def test_a_model_needing_a_switched_off_environment_is_refused(
        server: ServerProcess, cache_dir: Path, model: str, setting: str) -> None:
    with httpclient.InferenceServerClient(server.http_url, network_timeout=60) as client:
        with pytest.raises(InferenceServerException) as failure:
            client.load_model(model)
        message = str(failure.value)
        assert setting in message and f"'{model}'" in message, message
        assert failure.value.status() == "400"
        assert not client.is_model_ready(model)
        assert not [path for path in cache_dir.iterdir() if not path.name.startswith(".")], \
            "an environment was built or unpacked"
        data = np.arange(3, dtype=np.float32)
        tensor = httpclient.InferInput("INPUT0", [3], "FP32")
        tensor.set_data_from_numpy(data)
        np.testing.assert_array_equal(client.infer("plain", [tensor]).as_numpy("OUTPUT0"),
                                      data)


def test_the_switches_take_true_or_false_only() -> None:
    parsed = settings.PythonBackendSettings.parse({"allow-requirements-txt": "false",
                                                   "allow-execution-env-path": "No"})
    assert not parsed.allow_requirements_txt and not parsed.allow_execution_env_path
    assert settings.PythonBackendSettings.parse({}).allow_requirements_txt
    with pytest.raises(InferenceServerError, match="allow-requirements-txt=maybe: expected "
                                                   "true or false"):
        settings.PythonBackendSettings.parse({"allow-requirements-txt": "maybe"})
