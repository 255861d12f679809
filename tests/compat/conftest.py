"""Fixtures of the Triton differential suite: the real tritonserver and naiad, same repository.

Every test module gets its own pair of server processes (module scope), started side by side
on ``tests/compat/model_repository`` (or the module's ``COMPAT_MODEL_REPOSITORY``) with the
module's ``COMPAT_SERVER_ARGS`` (default: none)
plus ``--exit-on-error=false`` (the repository holds two models that fail to load on purpose).
Each test sends the same requests to both and compares the answers, so per-module statistics
and metrics match as long as every test talks to both servers.

Environment:
  TRITON_PEER_DIR        where setup.sh unpacks tritonserver
                         (default <tempdir>/naiad-triton-reference)
  NAIAD_TRITON_SCRIPTS   folder of setup.sh / serve.sh (default <repo>/../shared/triton)
  NAIAD_REQUIRE_TRITON=1 fail instead of skipping when the Triton peer cannot be set up
  NAIAD_COMPAT_PEER=triton  serve the "naiad" side with a second tritonserver: a self-test of the
                         comparison logic (every test must pass; naiad-only checks are off)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # compat_helpers, also under --import-mode=importlib
    sys.path.insert(0, str(HERE))

from compat_helpers import GOOD_MODELS, MODEL_REPOSITORY, http_request  # noqa: E402

REPO_ROOT = HERE.parents[1]
TRITON_SCRIPTS = Path(
    os.environ.get("NAIAD_TRITON_SCRIPTS", REPO_ROOT.parent / "shared" / "triton")
)
TRITON_PEER_DIR = Path(
    os.environ.get("TRITON_PEER_DIR", Path(tempfile.gettempdir()) / "naiad-triton-reference")
)
TRITON_BIN = TRITON_PEER_DIR / "wheel/pytriton/tritonserver/bin/tritonserver"
TRITON_STUB = (
    TRITON_PEER_DIR / "wheel/pytriton/tritonserver/backends/python/triton_python_backend_stub"
)
SELF_TEST = os.environ.get("NAIAD_COMPAT_PEER", "").lower() == "triton"
START_TIMEOUT = 90.0


def _unavailable(reason: str) -> None:
    if os.environ.get("NAIAD_REQUIRE_TRITON") == "1":
        pytest.fail(
            f"Triton peer required (NAIAD_REQUIRE_TRITON=1) but unavailable: {reason}",
            pytrace=False,
        )
    pytest.skip(f"Triton compat suite skipped: {reason}")


NO_SCRIPTS = f"no serve.sh/setup.sh in {TRITON_SCRIPTS} (set NAIAD_TRITON_SCRIPTS)"


@pytest.hookimpl(optionalhook=True)
def pytest_naiad_skip_reasons(config: pytest.Config) -> list[tuple[str, str]]:
    """Said before the run (the root conftest.py): without Triton's scripts the suite skips."""
    scripts = (TRITON_SCRIPTS / "serve.sh", TRITON_SCRIPTS / "setup.sh")
    if all(path.exists() for path in scripts) or os.environ.get("NAIAD_REQUIRE_TRITON") == "1":
        return []
    return [("triton_serve_script", f"Triton compat suite skipped: {NO_SCRIPTS}")]


@pytest.fixture(scope="session")
def triton_serve_script() -> Path:
    """serve.sh of a working tritonserver peer; runs setup.sh once when it is missing."""
    serve, setup = TRITON_SCRIPTS / "serve.sh", TRITON_SCRIPTS / "setup.sh"
    if not serve.exists() or not setup.exists():
        _unavailable(NO_SCRIPTS)
    if not TRITON_BIN.exists() or not TRITON_STUB.exists():
        try:
            proc = subprocess.run(
                ["bash", str(setup)],
                env={**os.environ, "TRITON_PEER_DIR": str(TRITON_PEER_DIR)},
                capture_output=True,
                text=True,
                timeout=900,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            _unavailable(f"{setup} did not finish: {exc}")
        if proc.returncode != 0 or not TRITON_BIN.exists():
            tail = (proc.stdout + proc.stderr)[-1500:]
            _unavailable(
                f"{setup} failed (exit {proc.returncode}), "
                f"TRITON_PEER_DIR={TRITON_PEER_DIR}:\n{tail}"
            )
    return serve


def compat_server(cmd: list[str], expect_ready: tuple[str, ...], **kwargs: Any) -> Any:
    """A naiad.testing.ServerProcess that counts as started when /v2/health/ready is 200 *or*
    every ``expect_ready`` model is READY or has failed to load (repository index): a server may
    call itself not ready because of the models that fail to load on purpose, and the suite
    compares readiness itself."""
    from naiad.testing import ServerProcess

    class CompatServer(ServerProcess):
        def _ready(self) -> bool:
            if super()._ready():
                return True
            try:
                res = http_request(self.http_port, "POST", "/v2/repository/index", {}, timeout=2)
                if res.status != 200:
                    return False
                index = {m["name"]: m for m in res.json()}
            except (OSError, ValueError, TypeError, KeyError):
                return False
            # READY, or finally failed (state UNAVAILABLE with a reason): either way loading is
            # over and the tests can report what they find instead of waiting for a timeout
            return all(
                name in index
                and (
                    index[name].get("state") == "READY"
                    or (
                        index[name].get("state") == "UNAVAILABLE"
                        and index[name].get("reason") not in (None, "", "unloaded")
                    )
                )
                for name in expect_ready
            )

    return CompatServer(cmd, **kwargs)


def _triton_cmd(serve: Path, args: list[str], repository: Path) -> list[str]:
    return [
        str(serve),
        "--model-repository",
        str(repository),
        "--http-port",
        "{http_port}",
        "--grpc-port",
        "{grpc_port}",
        "--metrics-port",
        "{metrics_port}",
        "--exit-on-error=false",
        *args,
    ]


def _naiad_cmd(args: list[str], repository: Path) -> list[str]:
    # the command of naiad.testing.naiad_server, with the suite's readiness rule
    return [
        sys.executable,
        "-m",
        "naiad",
        "serve",
        "--http-address",
        "127.0.0.1",
        "--grpc-address",
        "127.0.0.1",
        "--metrics-address",
        "127.0.0.1",
        "--http-port",
        "{http_port}",
        "--grpc-port",
        "{grpc_port}",
        "--metrics-port",
        "{metrics_port}",
        "--model-repository",
        str(repository),
        "--exit-on-error=false",
        *args,
    ]


@dataclass
class Pair:
    triton: Any
    naiad: Any
    naiad_is_triton: bool  # self-test: the "naiad" side is a second tritonserver


@pytest.fixture(scope="module")
def servers(request: pytest.FixtureRequest, triton_serve_script: Path) -> Any:
    args = list(getattr(request.module, "COMPAT_SERVER_ARGS", []))
    repository = Path(getattr(request.module, "COMPAT_MODEL_REPOSITORY", MODEL_REPOSITORY))
    expect = tuple(getattr(request.module, "COMPAT_EXPECT_READY", GOOD_MODELS))
    env = {"TRITON_PEER_DIR": str(TRITON_PEER_DIR)}
    triton = compat_server(
        _triton_cmd(triton_serve_script, args, repository), expect, env=env,
        ready_timeout=START_TIMEOUT
    )
    if SELF_TEST:
        naiad = compat_server(
            _triton_cmd(triton_serve_script, args, repository), expect, env=env,
            ready_timeout=START_TIMEOUT
        )
    else:
        naiad = compat_server(_naiad_cmd(args, repository), expect, ready_timeout=START_TIMEOUT)

    errors: dict[str, BaseException] = {}

    def start(name: str, server: Any) -> None:
        try:
            server.start()
        except BaseException as exc:
            errors[name] = exc

    threads = [
        threading.Thread(target=start, args=(n, s))
        for n, s in (("triton", triton), ("naiad", naiad))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        if "triton" in errors:
            # The peer is installed (triton_serve_script): a start that fails is the
            # repository's or the arguments' fault, and must not switch the suite off.
            pytest.fail(f"tritonserver did not start: {errors['triton']}"[:3000],
                        pytrace=False)
        if "naiad" in errors:
            pytest.fail(f"naiad did not start: {errors['naiad']}"[:5000], pytrace=False)
        yield Pair(triton, naiad, SELF_TEST)
    finally:
        stoppers = [threading.Thread(target=s.stop) for s in (triton, naiad)]
        for t in stoppers:
            t.start()
        for t in stoppers:
            t.join()


@pytest.fixture(scope="module")
def triton(servers: Pair) -> Any:
    """The real tritonserver (a naiad.testing.ServerProcess) on the compat repository."""
    return servers.triton


@pytest.fixture(scope="module")
def naiad(servers: Pair) -> Any:
    """naiad on the same repository (or a second tritonserver with NAIAD_COMPAT_PEER=triton)."""
    return servers.naiad


@pytest.fixture(scope="module")
def strict(servers: Pair) -> bool:
    """True when the naiad-only checks apply (4xx for Triton's 500s, messages naming the model)."""
    return not servers.naiad_is_triton
