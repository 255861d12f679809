"""The Triton differential suite's peer processes: where the real tritonserver is, the commands
that start it and naiad on one repository, and the server class that counts a repository with
models failing on purpose as started. A module of its own name (not ``conftest``) so test
modules can import it whatever folders the run is given (tests/compat/conftest.py uses it)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from compat_helpers import http_request

HERE = Path(__file__).resolve().parent

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
# More flags for the naiad side only, e.g. "--frontend-processes 2" (issue 26: the suite
# holds with several frontend processes) or a Python execution mode.
NAIAD_EXTRA_ARGS = os.environ.get("NAIAD_COMPAT_NAIAD_ARGS", "").split()
START_TIMEOUT = 90.0


def _unavailable(reason: str) -> None:
    if os.environ.get("NAIAD_REQUIRE_TRITON") == "1":
        pytest.fail(
            f"Triton peer required (NAIAD_REQUIRE_TRITON=1) but unavailable: {reason}",
            pytrace=False,
        )
    pytest.skip(f"Triton compat suite skipped: {reason}")


NO_SCRIPTS = f"no serve.sh/setup.sh in {TRITON_SCRIPTS} (set NAIAD_TRITON_SCRIPTS)"


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


def triton_cmd(serve: Path, args: list[str], repository: Path) -> list[str]:
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


def naiad_cmd(args: list[str], repository: Path) -> list[str]:
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
        *NAIAD_EXTRA_ARGS,
    ]


@dataclass
class Pair:
    triton: Any
    naiad: Any
    naiad_is_triton: bool  # self-test: the "naiad" side is a second tritonserver


