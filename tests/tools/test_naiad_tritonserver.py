"""naiad-tritonserver (tools/naiad-tritonserver, issue 33 item 9): a ``tritonserver``
command that runs ``naiad serve``; opt-in, and it says so when a real Triton is on PATH too.

The command runs here from the checkout's folder (installing it would put a ``tritonserver``
on the test venv's PATH); tests/packaging builds and checks its wheel with the others.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import tomllib
from source_serving import add_sub_over_http

from naiad.testing import ServerProcess

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "naiad-tritonserver"
sys.path.insert(0, str(TOOL))
from naiad_tritonserver import other_tritonservers, shadow_notice  # noqa: E402

#: what a drain of an idle server may take, at most (a safety net, not a measure)
STOP_TIMEOUT_S = 60.0
# the console script's body, run from the checkout
RUN_SHIM = (f"import sys; sys.path.insert(0, {str(TOOL)!r}); "
            "import naiad_tritonserver; sys.exit(naiad_tritonserver.main())")


def test_a_triton_command_line_serves_and_sigterm_stops_it(tmp_path: Path) -> None:
    real = tmp_path / "bin" / "tritonserver"  # a Triton elsewhere on PATH
    real.parent.mkdir()
    real.write_text("#!/bin/sh\nexit 1\n")
    real.chmod(0o755)
    env = {"PATH": f"{real.parent}{os.pathsep}{os.environ['PATH']}"}
    command = [sys.executable, "-c", RUN_SHIM,
               f"--model-repository={ROOT / 'examples' / 'model_repository'}",
               "--http-port={http_port}", "--grpc-port={grpc_port}",
               "--metrics-port={metrics_port}", "--http-address=127.0.0.1",
               "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1",
               "--exit-timeout-secs=5", "--allow-openai=false"]
    server = ServerProcess(command, env=env)
    with server:
        add_sub_over_http(server)
        assert server.process is not None
        os.kill(server.process.pid, signal.SIGTERM)  # naiad itself: no wrapper in between
        assert server.process.wait(STOP_TIMEOUT_S) == 0, server.log()
    log = server.log()
    assert log.splitlines()[0].startswith("tritonserver: this is naiad's"), log[:500]
    assert f"another tritonserver is at {real}" in log
    assert "unloaded model 'add_sub'" in log


def test_other_tritonservers_on_the_path_are_found_but_not_itself(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    for folder in (first, second):
        folder.mkdir()
        (folder / "tritonserver").write_text("#!/bin/sh\n")
        (folder / "tritonserver").chmod(0o755)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "tritonserver").write_text("not executable")
    path = os.pathsep.join(str(tmp_path / name) for name in ("a", "b", "c"))
    assert other_tritonservers(path, this=str(first / "tritonserver")) == [
        (second / "tritonserver").resolve()]
    assert other_tritonservers(str(tmp_path / "c"), this="/nowhere") == []
    assert shadow_notice([]) is None


def test_it_is_an_opt_in_distribution_with_the_console_script() -> None:
    project = tomllib.loads((TOOL / "pyproject.toml").read_text())["project"]
    assert project["scripts"] == {"tritonserver": "naiad_tritonserver:main"}
    core = tomllib.loads((ROOT / "core" / "pyproject.toml").read_text())["project"]
    extras = [req for reqs in core["optional-dependencies"].values() for req in reqs]
    assert not any(req.startswith(project["name"]) for req in extras)
    assert "naiad-tritonserver" not in (ROOT / "scripts" / "test").read_text()
