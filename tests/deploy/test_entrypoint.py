"""The image's `tritonserver` command (deploy/docker/tritonserver), run outside the image: a
Triton command line becomes a working naiad serve, and SIGTERM reaches naiad itself."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from deploy_objects import DEPLOY, REPO
from source_serving import add_sub_over_http

from naiad.testing import ServerProcess

SHIM = DEPLOY / "docker" / "tritonserver"
#: what a drain of an idle server may take, at most (a safety net, not a measure)
STOP_TIMEOUT_S = 60.0


def test_a_triton_command_line_serves_and_sigterm_stops_naiad() -> None:
    # the image puts naiad's virtual environment first on PATH; here the test's interpreter's
    env = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    command = [str(SHIM), f"--model-repository={REPO / 'examples' / 'model_repository'}",
               "--http-port={http_port}", "--grpc-port={grpc_port}",
               "--metrics-port={metrics_port}", "--http-address=127.0.0.1",
               "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1",
               "--exit-timeout-secs=5"]
    server = ServerProcess(command, env=env)
    with server:
        add_sub_over_http(server)
        assert server.process is not None
        pid = server.process.pid
        # exec: the process the container runtime started is naiad, not a shell around it
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert b"serve" in cmdline and not any(part.endswith(b"sh") for part in cmdline[:1])
        os.kill(pid, signal.SIGTERM)  # to naiad alone, as tini forwards it
        assert server.process.wait(STOP_TIMEOUT_S) == 0, server.log()
    assert "unloaded model 'add_sub'" in server.log()
