"""--reuse-http-port and --reuse-grpc-port: two ``naiad serve`` processes on one HTTP port and
one gRPC port (SO_REUSEPORT), and the clear failure when a process does not ask for it."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from naiad.testing import ServerProcess, free_port

SECONDS = 1.0


def serve_command(repo: Path, http_port: int, grpc_port: int, *flags: str) -> list[str]:
    """``naiad serve`` on these ports; its metrics port: ``{metrics_port}`` for ServerProcess
    to fill, unless ``flags`` name one."""
    return [sys.executable, "-m", "naiad", "serve", "--model-repository", str(repo),
            "--http-address=127.0.0.1", "--grpc-address=127.0.0.1",
            "--metrics-address=127.0.0.1",
            f"--http-port={http_port}", f"--grpc-port={grpc_port}",
            "--metrics-port={metrics_port}", *flags]


@contextmanager
def server_on(repo: Path, http_port: int, grpc_port: int,
              *flags: str) -> Iterator[ServerProcess]:
    """A server on the given HTTP and gRPC ports (its own metrics port). Ready on entry,
    unless another server on the same HTTP port answered the readiness probe."""
    process = ServerProcess(serve_command(repo, http_port, grpc_port, *flags))
    process.http_port, process.grpc_port = http_port, grpc_port
    with process:
        yield process


def names_answering(servers: list[ServerProcess], http_port: int,
                    grpc_port: int) -> tuple[set[str], set[str]]:
    """The server names (--id) that new HTTP and gRPC connections reach, until every
    server answered on both, one of them exited or 30 s passed. The kernel spreads the
    connections to a port among its listening sockets by a hash of the client's address and
    port, so a few tries reach each."""
    http_names: set[str] = set()
    grpc_names: set[str] = set()
    deadline = time.monotonic() + 30 * SECONDS
    while len(http_names) < len(servers) or len(grpc_names) < len(servers):
        if time.monotonic() > deadline or any(
                server.process is None or server.process.poll() is not None
                for server in servers):
            break
        with httpclient.InferenceServerClient(f"127.0.0.1:{http_port}") as client:
            http_names.add(client.get_server_metadata()["name"])
        with grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}") as client:
            grpc_names.add(client.get_server_metadata().name)
    return http_names, grpc_names


@pytest.mark.parametrize("http_server", ["uvicorn", "hypercorn"])
def test_two_servers_share_the_ports_with_the_flags(tmp_path: Path, http_server: str) -> None:
    http_port, grpc_port = free_port(), free_port()
    flags = ("--reuse-http-port=true", "--reuse-grpc-port=true", f"--http-server={http_server}")
    with ExitStack() as stack:
        servers = [stack.enter_context(server_on(tmp_path, http_port, grpc_port,
                                                 f"--id={name}", *flags))
                   for name in ("first", "second")]
        http_names, grpc_names = names_answering(servers, http_port, grpc_port)
        logs = "\n".join(server.log() for server in servers)
        assert all(server.process and server.process.poll() is None for server in servers), logs
        assert http_names == grpc_names == {"first", "second"}, logs


def run_to_exit(command: list[str]) -> str:
    """Run a server that must stop at start-up (exit status 1, as tritonserver); everything
    it printed."""
    command = [part.format(metrics_port=free_port()) for part in command]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stdout + result.stderr
    return result.stdout + result.stderr


@pytest.mark.parametrize("reuse", [False, True], ids=["neither", "only-the-first"])
def test_a_taken_grpc_port_stops_the_second_server(tmp_path: Path, reuse: bool) -> None:
    """Both servers must ask for SO_REUSEPORT; when the second does not, it stops."""
    grpc_port = free_port()
    first_flags = ("--reuse-grpc-port=true",) if reuse else ()
    with server_on(tmp_path, free_port(), grpc_port, *first_flags):
        output = run_to_exit(serve_command(tmp_path, free_port(), grpc_port))
    assert f"failed to start a listener: gRPC: cannot listen on 127.0.0.1:{grpc_port}" in output
    assert "Traceback" not in output


@pytest.mark.parametrize("http_server", ["uvicorn", "hypercorn"])
@pytest.mark.parametrize("reuse", [False, True], ids=["neither", "only-the-second"])
def test_a_taken_http_port_stops_the_second_server(tmp_path: Path, http_server: str,
                                                   reuse: bool) -> None:
    """Both servers must ask for SO_REUSEPORT; when the first did not, the second stops."""
    http_port = free_port()
    second_flags = ("--reuse-http-port=true",) if reuse else ()
    with server_on(tmp_path, http_port, free_port()):
        output = run_to_exit(serve_command(tmp_path, http_port, free_port(),
                                           f"--http-server={http_server}", *second_flags))
    how = " with SO_REUSEPORT" if reuse else ""
    assert (f"failed to start a listener: cannot listen on 127.0.0.1:{http_port}{how}: "
            "Address already in use") in output, output
    assert "Traceback" not in output
