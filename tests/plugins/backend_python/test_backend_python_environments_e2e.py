"""A Python model whose packages the server does not have, served end to end: through
Triton's ``EXECUTION_ENV_PATH`` (a tarball of an environment the test builds, and a folder
holding another Python) and through a ``requirements.txt`` (a real pip install, then a second
start that reuses the built environment). Called with tritonclient over HTTP and gRPC.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from zoo import write_model

from naiad.testing import naiad_server

# A package name no server environment has: the test writes it into the model's environment.
LOCAL_PACKAGE = "naiad_envtest_only_here"
# A small pure-Python package from PyPI that the server's environment lacks (checked below):
# the first of these it lacks (tensorflow-cpu, a test dependency, brings termcolor).
PYPI_PACKAGE = next((name for name in ("termcolor", "tabulate", "toolz", "wcwidth")
                     if importlib.util.find_spec(name) is None), "termcolor")

WHO_PY = """
import json
import os
import sys

import numpy as np
import triton_python_backend_utils as pb_utils

import {package}


class TritonPythonModel:
    def execute(self, requests):
        info = {{"python": sys.executable, "version": list(sys.version_info[:2]),
                 "package": {package}.__file__}}
        out = np.array([json.dumps(info).encode()], dtype=object)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("INFO", out)]) for _ in requests]
"""


def who_config(name: str, parameters: str = "") -> str:
    return f"""
name: "{name}"
backend: "python"
input [ {{ name: "ACTION", data_type: TYPE_STRING, dims: [ 1 ] }} ]
output [ {{ name: "INFO", data_type: TYPE_STRING, dims: [ 1 ] }} ]
{parameters}
"""


def env_parameter(value: str) -> str:
    return f'parameters {{ key: "EXECUTION_ENV_PATH" value: {{ string_value: "{value}" }} }}'


def ask(server: object, model: str) -> list[dict]:
    """The model's INFO over HTTP and gRPC."""
    answers = []
    urls = ((httpclient, server.http_url), (grpcclient, server.grpc_url))  # type: ignore[attr-defined]
    for module, url in urls:
        client = module.InferenceServerClient(url)
        tensor = module.InferInput("ACTION", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([b"who"], dtype=object))
        answers.append(json.loads(client.infer(model, [tensor]).as_numpy("INFO")[0]))
    return answers


def pip_install(python: str, *args: str, target: str | None = None) -> None:
    """pip install with ``python``'s pip, or with this one into the environment of
    ``target`` (an interpreter: ``pip --python``), which then needs no pip of its own."""
    pip = [python, "-m", "pip"] + (["--python", target] if target else [])
    result = subprocess.run([*pip, "install", "--quiet", "--disable-pip-version-check", *args],
                            capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        if "No matching distribution" in result.stderr or "Could not" in result.stderr:
            pytest.skip(f"the package index is not reachable: {result.stderr[-300:]}")
        raise AssertionError(result.stderr)


def test_the_server_lacks_the_packages() -> None:
    assert importlib.util.find_spec(LOCAL_PACKAGE) is None
    assert importlib.util.find_spec(PYPI_PACKAGE) is None, \
        f"{PYPI_PACKAGE} is installed in the server's environment: pick another package"


@pytest.fixture(scope="module")
def env_tarball(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv (copies, no links outside it) with numpy and a package of the test's own,
    packed as a tarball the way an environment is shipped to Triton. The venv gets no pip
    (the server's pip installs numpy into it) and the tarball gzip's fastest level: pip's
    own install and level 9 over 100 MB took about 20 s of CPU and served no check."""
    root = tmp_path_factory.mktemp("envbuild")
    env = root / "env"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--copies", "--without-pip", str(env)], check=True,
                   timeout=300)
    pip_install(sys.executable, f"numpy=={importlib.metadata.version('numpy')}",
                target=str(env / "bin" / "python"))
    [site] = (env / "lib").glob("python3*/site-packages")
    (site / LOCAL_PACKAGE).mkdir()
    (site / LOCAL_PACKAGE / "__init__.py").write_text("VALUE = 42\n")
    tarball = root / "env.tar.gz"
    with tarfile.open(tarball, "w:gz", compresslevel=1) as archive:
        archive.add(env, arcname=".")
    return tarball


def test_a_tarball_environment_serves_a_model_needing_a_package_the_server_lacks(
        tmp_path: Path, env_tarball: Path) -> None:
    repo = tmp_path / "repo"
    model_dir = write_model(repo, "needs_local", who_config(
        "needs_local", env_parameter("$$TRITON_MODEL_DIRECTORY/env.tar.gz")),
        WHO_PY.format(package=LOCAL_PACKAGE))
    (model_dir / "env.tar.gz").write_bytes(env_tarball.read_bytes())
    cache = tmp_path / "cache"
    with naiad_server("--model-repository", str(repo), "--backend-config",
                      f"python,env-cache-dir={cache}") as server:
        for info in ask(server, "needs_local"):
            assert info["python"].startswith(str(cache))
            assert info["package"].startswith(str(cache))
        assert "unpacking EXECUTION_ENV_PATH" in server.log()


def _other_python() -> str | None:
    """An interpreter of another minor version than the server's, 3.9 or newer."""
    for root in (Path.home() / ".pyenv" / "versions", Path("/usr/local/bin"), Path("/usr/bin")):
        for candidate in sorted(root.glob("3.9*/bin/python3")) + sorted(root.glob("python3.9")):
            version = subprocess.run([str(candidate), "-c",
                                      "import sys; print(sys.version_info[1])"],
                                     capture_output=True, text=True)
            if version.returncode == 0 and int(version.stdout) != sys.version_info[1]:
                return str(candidate)
    return None


@pytest.mark.skipif(_other_python() is None, reason="no Python 3.9 on this machine (pyenv's "
                    "~/.pyenv/versions/3.9*/bin/python3 or /usr/bin/python3.9)")
def test_a_worker_runs_another_python_than_the_server(tmp_path: Path) -> None:
    """The worker speaks a message protocol, not an ABI: an environment folder holding
    Python 3.9 serves a model while the server runs its own Python."""
    python = _other_python()
    assert python is not None
    env = tmp_path / "py39"
    subprocess.run([python, "-m", "venv", str(env)], check=True, timeout=300)
    pip_install(str(env / "bin" / "python"), "numpy")
    [site] = (env / "lib").glob("python3*/site-packages")
    (site / LOCAL_PACKAGE).mkdir()
    (site / LOCAL_PACKAGE / "__init__.py").write_text("VALUE = 39\n")
    repo = tmp_path / "repo"
    write_model(repo, "old_python", who_config("old_python", env_parameter(str(env))),
                WHO_PY.format(package=LOCAL_PACKAGE))
    with naiad_server("--model-repository", str(repo)) as server:
        for info in ask(server, "old_python"):
            assert info["version"] == [3, 9]
            assert info["python"] == str(env / "bin" / "python")


def test_requirements_txt_is_built_once_and_reused_on_the_next_start(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    model_dir = write_model(repo, "needs_termcolor", who_config("needs_termcolor"),
                            WHO_PY.format(package=PYPI_PACKAGE))
    (model_dir / "requirements.txt").write_text(f"{PYPI_PACKAGE}\n")
    write_model(repo, "broken_requirements", who_config("broken_requirements"),
                WHO_PY.format(package=PYPI_PACKAGE))
    (repo / "broken_requirements" / "requirements.txt").write_text(
        "naiad-no-such-package-xyz==1.0\n")
    cache = tmp_path / "cache"
    args = ("--model-repository", str(repo), "--backend-config", f"python,env-cache-dir={cache}",
            "--exit-on-error=false", "--strict-readiness=false")
    with naiad_server(*args, ready_timeout=600) as server:
        if "No matching distribution found for termcolor" in server.log():
            pytest.skip("PyPI is not reachable from this machine")
        for info in ask(server, "needs_termcolor"):
            assert info["package"].startswith(str(cache))
        first_log = server.log()
        index = httpclient.InferenceServerClient(server.http_url).get_model_repository_index()
        broken = next(m for m in index if m["name"] == "broken_requirements")
        # The model that cannot be built is unavailable with pip's error; the other serves.
        assert broken["state"] == "UNAVAILABLE"
        assert "naiad-no-such-package-xyz" in broken["reason"]
    assert "building a Python environment" in first_log
    with naiad_server(*args) as server:
        for info in ask(server, "needs_termcolor"):
            assert info["package"].startswith(str(cache))
        second_log = server.log()
    assert "model 'needs_termcolor': reusing" in second_log
    assert "model 'needs_termcolor': building" not in second_log
