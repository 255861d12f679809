"""Per-model execution environments: EXECUTION_ENV_PATH tarballs and directories, virtual
environments built with pip from requirements.txt, and the cache shared by threads and
processes. Real interpreters, real tarballs and real pip throughout."""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import io
import json
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from tritonclient.grpc.model_config_pb2 import ModelConfig

from naiad.errors import InferenceServerError, Status
from naiad_backend_python.environment import (
    EnvironmentSettings,
    WorkerEnvironment,
    default_cache_dir,
    worker_environment,
)

LOGGER = "naiad.backend.python"
# A package the test env holds and the server's does not.
PACKAGE = "naiad_env_probe_pkg"
PY = f"python{sys.version_info.major}.{sys.version_info.minor}"
# pip's words when it cannot reach an index: the PyPI test skips on them.
NETWORK_FAILURES = ("NewConnectionError", "Failed to establish a new connection",
                    "Temporary failure in name resolution", "Name or service not known",
                    "Network is unreachable", "ProxyError", "ConnectTimeoutError",
                    "ReadTimeoutError", "Could not fetch URL")
# Small pure-Python packages: the PyPI test installs the first the server lacks.
ABSENT_CANDIDATES = ("six", "toolz", "tabulate", "termcolor", "wcwidth")
# A conda-pack stand-in: records each run (and its folder), slowly, so concurrent callers
# overlap it.
CONDA_UNPACK = """
import pathlib, sys, time
time.sleep(0.5)
marker = pathlib.Path(__file__).resolve().parent.parent / "unpacked-runs"
marker.write_text((marker.read_text() if marker.exists() else "") + sys.prefix + "\\n")
"""


def config_with(env_path: str | None = None) -> ModelConfig:
    config = ModelConfig(name="m", backend="python")
    if env_path is not None:
        config.parameters["EXECUTION_ENV_PATH"].string_value = env_path
    return config


def model_folder(root: Path, files: dict[str, str] | None = None) -> Path:
    folder = root / "repository" / "m"
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text('name: "m"\nbackend: "python"\n')
    for name, text in (files or {}).items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


def run_in(env: WorkerEnvironment, code: str) -> str:
    result = subprocess.run([env.python, "-c", code], env={**os.environ, **env.variables},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def pack(tarball: Path, root: Path, extra: dict[str, bytes] | None = None) -> Path:
    """A tarball of ``root``'s contents at the archive's root, as conda-pack writes them."""
    with tarfile.open(tarball, "w:gz") as archive:
        for child in sorted(root.iterdir()):
            archive.add(child, arcname=child.name)
        for name, data in (extra or {}).items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return tarball


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def entries(cache: Path) -> list[str]:
    """The environment folders in a cache (lock files stay behind by design)."""
    return sorted(p.name for p in cache.iterdir() if p.is_dir()) if cache.exists() else []


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


@pytest.fixture(scope="module")
def venv_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real venv with PACKAGE in its site-packages, self-contained enough to be packed:
    copies, not links to the system interpreter, and ``bin/python -> python3.X`` made a
    relative link as conda environments have it."""
    assert importlib.util.find_spec(PACKAGE) is None
    root = tmp_path_factory.mktemp("venv") / "env"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--copies", "--without-pip", str(root)], check=True,
                   timeout=120)
    package = root / "lib" / PY / "site-packages" / PACKAGE
    package.mkdir()
    (package / "__init__.py").write_text("VALUE = 42\n")
    (root / "bin" / "python").unlink()
    (root / "bin" / "python").symlink_to(PY)
    return root


@pytest.fixture(scope="module")
def env_tarball(venv_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pack(tmp_path_factory.mktemp("tarball") / "env.tar.gz", venv_dir)


@pytest.fixture(scope="module")
def conda_tarball(venv_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The venv with a conda-meta folder and a (slow) bin/conda-unpack."""
    return pack(tmp_path_factory.mktemp("conda") / "env.tar.gz", venv_dir,
                {"conda-meta/history": b"", "bin/conda-unpack": CONDA_UNPACK.encode()})


# ---------------------------------------------------------------- the server's interpreter


def test_without_parameter_or_requirements_the_server_interpreter(tmp_path: Path) -> None:
    env = worker_environment("m", model_folder(tmp_path), config_with(),
                             EnvironmentSettings(tmp_path / "cache"))
    assert env.python == sys.executable
    assert env.variables == {}
    assert "the server's interpreter" in env.description
    assert not (tmp_path / "cache").exists()


def test_an_empty_parameter_means_none(tmp_path: Path) -> None:
    env = worker_environment("m", model_folder(tmp_path), config_with(""),
                             EnvironmentSettings(tmp_path / "cache"))
    assert env.python == sys.executable


def test_default_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NAIAD_CACHE_DIR", str(tmp_path / "naiad"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "naiad" / "python-envs"
    monkeypatch.delenv("NAIAD_CACHE_DIR")
    assert default_cache_dir() == tmp_path / "xdg" / "naiad" / "python-envs"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "naiad" / "python-envs"


# ---------------------------------------------------------------- EXECUTION_ENV_PATH


def test_tarball_is_unpacked_once_and_its_interpreter_imports_its_packages(
        tmp_path: Path, env_tarball: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    settings = EnvironmentSettings(tmp_path / "cache")
    env = worker_environment("m", model_folder(tmp_path), config_with(str(env_tarball)),
                             settings)
    entry = settings.cache_dir / sha256(env_tarball)
    assert env.python == str(entry / "bin" / "python")
    assert run_in(env, f"import sys, {PACKAGE}; print({PACKAGE}.VALUE, sys.prefix)") == \
        f"42 {entry}"
    assert env.variables["PATH"].split(os.pathsep)[0] == str(entry / "bin")
    assert env.variables["LD_LIBRARY_PATH"].split(os.pathsep)[0] == str(entry / "lib")
    assert env.variables["VIRTUAL_ENV"] == str(entry)
    assert "CONDA_PREFIX" not in env.variables
    assert str(env_tarball) in env.description and str(entry) in env.description
    assert any("unpacking" in m and str(env_tarball) in m for m in messages(caplog))

    mtime = entry.stat().st_mtime_ns
    caplog.clear()
    again = worker_environment("m", model_folder(tmp_path), config_with(str(env_tarball)),
                               settings)
    assert again == env
    assert entry.stat().st_mtime_ns == mtime
    logged = messages(caplog)
    assert [m for m in logged if "reusing" in m and str(entry) in m]
    assert not [m for m in logged if "unpacking" in m]


def test_links_inside_the_environment_survive_unpacking(tmp_path: Path,
                                                        env_tarball: Path) -> None:
    # Python's "data" filter refuses links that leave the destination or are absolute; a
    # relative link inside it, such as conda's bin/python -> python3.X, must stay a link.
    settings = EnvironmentSettings(tmp_path / "cache")
    env = worker_environment("m", model_folder(tmp_path), config_with(str(env_tarball)),
                             settings)
    python = Path(env.python)
    assert python.is_symlink() and os.readlink(python) == PY
    assert os.access(python.parent / PY, os.X_OK)


def test_a_changed_tarball_gets_a_new_entry(tmp_path: Path, venv_dir: Path) -> None:
    settings = EnvironmentSettings(tmp_path / "cache")
    tarball = pack(tmp_path / "env.tar.gz", venv_dir)
    first = worker_environment("m", model_folder(tmp_path), config_with(str(tarball)),
                               settings)
    pack(tarball, venv_dir, {f"lib/{PY}/site-packages/naiad_env_probe_extra.py": b"X = 1\n"})
    second = worker_environment("m", model_folder(tmp_path), config_with(str(tarball)),
                                settings)
    assert first.python != second.python
    assert entries(settings.cache_dir) == sorted([Path(first.python).parent.parent.name,
                                                  sha256(tarball)])
    assert run_in(second, "import naiad_env_probe_extra; print(naiad_env_probe_extra.X)") == "1"


def test_model_directory_keyword(tmp_path: Path, env_tarball: Path) -> None:
    model_dir = model_folder(tmp_path)
    shutil.copy(env_tarball, model_dir / "python_env.tar.gz")
    env = worker_environment("m", model_dir,
                             config_with("$$TRITON_MODEL_DIRECTORY/python_env.tar.gz"),
                             EnvironmentSettings(tmp_path / "cache"))
    assert str(model_dir / "python_env.tar.gz") in env.description
    assert run_in(env, f"import {PACKAGE}") == ""


def test_a_directory_is_used_where_it_lies(tmp_path: Path, venv_dir: Path) -> None:
    settings = EnvironmentSettings(tmp_path / "cache")
    env = worker_environment("m", model_folder(tmp_path), config_with(str(venv_dir)),
                             settings)
    assert env.python == str(venv_dir / "bin" / "python")
    assert env.variables["VIRTUAL_ENV"] == str(venv_dir)
    assert env.variables["PATH"].startswith(str(venv_dir / "bin") + os.pathsep)
    assert "a directory" in env.description
    assert run_in(env, f"import {PACKAGE}") == ""
    assert entries(settings.cache_dir) == []


def test_conda_unpack_runs_once_at_the_final_place(tmp_path: Path,
                                                   conda_tarball: Path) -> None:
    settings = EnvironmentSettings(tmp_path / "cache")
    env = worker_environment("m", model_folder(tmp_path), config_with(str(conda_tarball)),
                             settings)
    entry = settings.cache_dir / sha256(conda_tarball)
    assert env.variables["CONDA_PREFIX"] == str(entry)
    worker_environment("m", model_folder(tmp_path), config_with(str(conda_tarball)), settings)
    assert (entry / "unpacked-runs").read_text() == f"{entry}\n"


def test_a_failing_conda_unpack_fails_the_model_and_leaves_no_entry(
        tmp_path: Path, venv_dir: Path) -> None:
    tarball = pack(tmp_path / "env.tar.gz", venv_dir, {
        "bin/conda-unpack": b"raise SystemExit('cannot rewrite the prefix in lib/x.so')\n"})
    settings = EnvironmentSettings(tmp_path / "cache")
    with pytest.raises(InferenceServerError) as failure:
        worker_environment("m", model_folder(tmp_path), config_with(str(tarball)), settings)
    assert failure.value.status is Status.UNAVAILABLE
    assert "model 'm'" in failure.value.message and "conda-unpack" in failure.value.message
    assert "cannot rewrite the prefix in lib/x.so" in failure.value.message
    assert entries(settings.cache_dir) == []


def test_an_unfinished_entry_is_built_again(tmp_path: Path, env_tarball: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    # What a server killed while unpacking leaves: the folder, without its .ready file.
    settings = EnvironmentSettings(tmp_path / "cache")
    entry = settings.cache_dir / sha256(env_tarball)
    (entry / "bin").mkdir(parents=True)
    (entry / "bin" / "python").write_text("half written")
    env = worker_environment("m", model_folder(tmp_path), config_with(str(env_tarball)),
                             settings)
    assert run_in(env, f"import {PACKAGE}") == ""
    assert [m for m in messages(caplog) if "unfinished" in m]


def evil_tarball(path: Path, kind: str, outside: Path) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        python = tarfile.TarInfo("bin/python")
        python.size, python.mode = 2, 0o755
        archive.addfile(python, io.BytesIO(b"#!"))
        if kind in ("dotdot", "absolute"):
            info = tarfile.TarInfo("../../../../../../.." + str(outside) if kind == "dotdot"
                                   else str(outside))
            info.size = 4
            archive.addfile(info, io.BytesIO(b"evil"))
        elif kind == "symlink-chain":  # each link alone stays inside; together they leave
            for name, target in (("x", "sub/.."), ("sub", ".")):
                link = tarfile.TarInfo(name)
                link.type, link.linkname = tarfile.SYMTYPE, target
                archive.addfile(link)
            payload = tarfile.TarInfo("x/evil")
            payload.size = 4
            archive.addfile(payload, io.BytesIO(b"evil"))
        else:
            link = tarfile.TarInfo("lib/escape")
            link.type = tarfile.SYMTYPE if kind != "hardlink" else tarfile.LNKTYPE
            link.linkname = {"symlink-up": "../../../../../../../../..",
                             "symlink-absolute": str(outside.parent),
                             "hardlink": "../" + outside.name}[kind]
            archive.addfile(link)
            # written through the link if the link were made
            payload = tarfile.TarInfo(f"lib/escape/{outside.name}")
            payload.size = 4
            archive.addfile(payload, io.BytesIO(b"evil"))
    return path


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink-up", "symlink-absolute",
                                  "hardlink", "symlink-chain"])
def test_a_malicious_tarball_is_refused(tmp_path: Path, kind: str) -> None:
    outside = tmp_path / "outside" / "evil"
    outside.parent.mkdir()
    tarball = evil_tarball(tmp_path / "evil.tar.gz", kind, outside)
    settings = EnvironmentSettings(tmp_path / "cache")
    with pytest.raises(InferenceServerError) as failure:
        worker_environment("m", model_folder(tmp_path), config_with(str(tarball)), settings)
    message = failure.value.message
    assert failure.value.status is Status.UNAVAILABLE
    assert "model 'm'" in message and str(tarball) in message and "refused" in message
    assert ("outside" in message or "absolute" in message or "'..'" in message), message
    assert not outside.exists()
    assert list(outside.parent.iterdir()) == []
    assert not (settings.cache_dir / "evil").exists()  # where the chain of links leads
    assert entries(settings.cache_dir) == []


@pytest.mark.parametrize("case", ["missing", "not-a-tarball", "no-interpreter", "relative"])
def test_a_bad_environment_path_makes_the_model_unavailable(tmp_path: Path, case: str) -> None:
    settings = EnvironmentSettings(tmp_path / "cache")
    path = tmp_path / "env.tar.gz"
    expected = {"missing": "no such file", "not-a-tarball": "not a readable tar archive",
                "no-interpreter": "no bin/python or bin/python3",
                "relative": "relative path"}[case]
    if case == "not-a-tarball":
        path.write_text("not a tarball")
    elif case == "no-interpreter":
        nested = tmp_path / "packed" / "env" / "bin"
        nested.mkdir(parents=True)
        (nested / "python").write_text("")
        pack(path, tmp_path / "packed")  # the env inside a folder, not at the root
    value = "env.tar.gz" if case == "relative" else str(path)
    with pytest.raises(InferenceServerError) as failure:
        worker_environment("m", model_folder(tmp_path), config_with(value), settings)
    message = failure.value.message
    assert failure.value.status is Status.UNAVAILABLE
    assert "model 'm'" in message and "EXECUTION_ENV_PATH" in message and value in message
    assert expected in message, message
    assert entries(settings.cache_dir) == []


def test_requirements_are_ignored_with_a_warning_when_both_are_given(
        tmp_path: Path, env_tarball: Path, caplog: pytest.LogCaptureFixture) -> None:
    model_dir = model_folder(tmp_path, {"requirements.txt": "naiad-no-such-package-xyz\n"})
    env = worker_environment("m", model_dir, config_with(str(env_tarball)),
                             EnvironmentSettings(tmp_path / "cache"))
    assert "EXECUTION_ENV_PATH" in env.description
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [w for w in warnings if "requirements.txt" in w and "ignored" in w]


# ---------------------------------------------------------------- one build at a time


def test_two_threads_preparing_one_entry_build_it_once(tmp_path: Path, conda_tarball: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    settings = EnvironmentSettings(tmp_path / "cache")
    model_dir = model_folder(tmp_path)
    start = threading.Barrier(2)
    results: list[WorkerEnvironment | BaseException] = []

    def prepare() -> None:
        start.wait()
        try:
            results.append(worker_environment("m", model_dir, config_with(str(conda_tarball)),
                                              settings))
        except BaseException as exc:
            results.append(exc)

    threads = [threading.Thread(target=prepare) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(results) == 2 and results[0] == results[1], results
    entry = settings.cache_dir / sha256(conda_tarball)
    assert (entry / "unpacked-runs").read_text() == f"{entry}\n"
    assert len([m for m in messages(caplog) if "unpacking" in m]) == 1
    assert len([m for m in messages(caplog) if "waiting for" in m]) == 1


def test_two_processes_preparing_one_entry_build_it_once(
        tmp_path: Path, conda_tarball: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    settings = EnvironmentSettings(tmp_path / "cache")
    model_dir = model_folder(tmp_path)
    script = textwrap.dedent(f"""
        import json, logging, sys
        from pathlib import Path
        from tritonclient.grpc.model_config_pb2 import ModelConfig
        from naiad_backend_python.environment import EnvironmentSettings, worker_environment
        logging.basicConfig(level=logging.INFO, stream=sys.stderr)
        config = ModelConfig(name="m")
        config.parameters["EXECUTION_ENV_PATH"].string_value = {str(conda_tarball)!r}
        env = worker_environment("m", Path({str(model_dir)!r}), config,
                                 EnvironmentSettings(Path({str(settings.cache_dir)!r})))
        print(json.dumps(env.python))
    """)
    other = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    assert other.stderr is not None
    for line in other.stderr:  # start once the other server is mid-build
        if "running conda-unpack" in line:
            break
    env = worker_environment("m", model_dir, config_with(str(conda_tarball)), settings)
    out, _ = other.communicate(timeout=120)
    assert other.returncode == 0
    assert json.loads(out) == env.python
    entry = settings.cache_dir / sha256(conda_tarball)
    assert (entry / "unpacked-runs").read_text() == f"{entry}\n"
    logged = messages(caplog)
    assert [m for m in logged if "waiting for" in m] and [m for m in logged if "reusing" in m]
    assert not [m for m in logged if "unpacking" in m]


# ---------------------------------------------------------------- requirements.txt


@dataclass
class Built:
    env: WorkerEnvironment
    model_dir: Path
    settings: EnvironmentSettings
    package: str  # what requirements.txt asked for
    log: list[str]  # what the build logged


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """One real pip build from PyPI (or the index pip is configured with), shared by the
    tests that read it: requirements.txt includes base.txt, which names a small package the
    server lacks."""
    package = next((p for p in ABSENT_CANDIDATES if importlib.util.find_spec(p) is None), None)
    if package is None:
        pytest.skip(f"the server's environment has all of {ABSENT_CANDIDATES}")
    root = tmp_path_factory.mktemp("pypi")
    model_dir = model_folder(root, {"requirements.txt": "-r deps/base.txt  # shared\n",
                                    "deps/base.txt": f"{package}\n"})
    settings = EnvironmentSettings(root / "cache")
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger(LOGGER)
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        env = worker_environment("m", model_dir, config_with(), settings)
    except InferenceServerError as exc:
        if any(marker in line for line in lines for marker in NETWORK_FAILURES):
            pytest.skip(f"pip cannot reach its index: {exc.message}")
        raise
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return Built(env, model_dir, settings, package, lines)


def test_requirements_build_an_environment_with_the_package_and_numpy(built: Built) -> None:
    env, settings, lines = built.env, built.settings, built.log
    (entry,) = entries(settings.cache_dir)
    assert entry.startswith("req-")
    assert env.python == str(settings.cache_dir / entry / "bin" / "python")
    assert env.variables["VIRTUAL_ENV"] == str(settings.cache_dir / entry)
    assert "LD_LIBRARY_PATH" not in env.variables
    out = run_in(env, f"import {built.package}, numpy; print(numpy.__version__)")
    assert out == importlib.metadata.version("numpy")  # pinned to the server's numpy
    assert [line for line in lines if "building" in line and "requirements.txt" in line]
    assert [line for line in lines if ": pip: " in line]  # pip's output, as it came
    assert [line for line in lines if "built the Python environment" in line]


def test_requirements_environment_is_reused_without_pip(
        built: Built, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    again = worker_environment("m", built.model_dir, config_with(), built.settings)
    assert again == built.env
    logged = messages(caplog)
    assert len([m for m in logged if "reusing" in m]) == 1
    assert not [m for m in logged if ": pip: " in m or "building" in m]


def test_a_failed_pip_install_makes_the_model_unavailable_with_pips_error(
        tmp_path: Path) -> None:
    settings = EnvironmentSettings(tmp_path / "cache")
    model_dir = model_folder(tmp_path, {"requirements.txt": "naiad-no-such-package-xyz==1.0\n"})
    with pytest.raises(InferenceServerError) as failure:
        worker_environment("m", model_dir, config_with(), settings)
    message = failure.value.message
    assert failure.value.status is Status.UNAVAILABLE
    assert "model 'm'" in message and str(model_dir / "requirements.txt") in message
    assert "No matching distribution found for naiad-no-such-package-xyz==1.0" in message
    assert entries(settings.cache_dir) == []  # the next start tries again


def test_a_build_past_its_time_limit_is_stopped(tmp_path: Path) -> None:
    settings = EnvironmentSettings(tmp_path / "cache", pip_timeout_s=0.5)
    model_dir = model_folder(tmp_path, {"requirements.txt": "six\n"})
    started = time.monotonic()
    with pytest.raises(InferenceServerError) as failure:
        worker_environment("m", model_dir, config_with(), settings)
    assert time.monotonic() - started < 30
    assert failure.value.status is Status.UNAVAILABLE
    assert "pip_timeout_s=0.5 s" in failure.value.message
    assert entries(settings.cache_dir) == []


@pytest.mark.parametrize("requirements", [
    "-r ../outside.txt",
    "--requirement=../outside.txt",
    "--requir ../outside.txt",  # pip takes an unambiguous prefix of an option
    "-c ../outside.txt",
    "-r link.txt",  # a link in the model folder to a file outside it
    "-e ../pkg",
    "../pkg",
    "pkg @ file:///etc",
    "-f /opt/wheels",
    "-r https://example.com/requirements.txt",
])
def test_requirements_may_not_reach_outside_the_model_folder(tmp_path: Path,
                                                             requirements: str) -> None:
    (tmp_path / "repository").mkdir()
    (tmp_path / "repository" / "outside.txt").write_text("six\n")
    model_dir = model_folder(tmp_path, {"requirements.txt": f"numpy\n{requirements}\n"})
    (model_dir / "link.txt").symlink_to(tmp_path / "repository" / "outside.txt")
    settings = EnvironmentSettings(tmp_path / "cache")
    with pytest.raises(InferenceServerError) as failure:
        worker_environment("m", model_dir, config_with(), settings)
    assert failure.value.status is Status.UNAVAILABLE
    assert "model 'm'" in failure.value.message
    assert "outside the model folder" in failure.value.message or \
        "must be a file in the model folder" in failure.value.message
    assert not settings.cache_dir.exists()  # refused before anything was built


@pytest.mark.parametrize(("files", "numpy"), [
    ({"requirements.txt": "six\n"}, f"numpy=={importlib.metadata.version('numpy')}"),
    ({"requirements.txt": "NumPy>=1.20 ; python_version >= '3.9'\n"}, "numpy"),
    ({"requirements.txt": "six\n-c constraints.txt\n", "constraints.txt": "numpy<3\n"},
     "numpy"),
])
def test_numpy_is_pinned_to_the_servers_unless_the_model_names_it(
        tmp_path: Path, files: dict[str, str], numpy: str,
        caplog: pytest.LogCaptureFixture) -> None:
    # The decision is logged before pip starts: a build stopped at once is enough to see it.
    caplog.set_level(logging.INFO, LOGGER)
    settings = EnvironmentSettings(tmp_path / "cache", pip_timeout_s=0.01)
    with pytest.raises(InferenceServerError):
        worker_environment("m", model_folder(tmp_path, files), config_with(), settings)
    assert [m for m in messages(caplog) if m.endswith(f"(with {numpy} for the worker)")]


def test_a_failed_builds_message_starts_at_pips_failure_not_at_its_notes() -> None:
    from naiad_backend_python.environment.commands import tail

    output = ["Looking in indexes: https://pypi.org/simple",
              "ERROR: Ignored the following versions that require a different python "
              "version: 1.0 Requires-Python >=3.12",
              "ERROR: Could not find a version that satisfies the requirement nope==9",
              "ERROR: No matching distribution found for nope==9"]
    message = tail(output)
    assert message.startswith("ERROR: Could not find a version"), message
    assert "Ignored the following" not in message
