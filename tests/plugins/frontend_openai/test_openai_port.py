"""The OpenAI API's port (issue 29): a port another process listens on stops ``naiad serve``
with a message naming the address and ``--reuse-openai-port``; with that flag in every
process, they share it (SO_REUSEPORT), as ``--reuse-http-port`` does for HTTP."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("naiad_frontend_openai", reason="naiad-frontend-openai is not installed")

import openai

from naiad.testing import free_port, naiad_server

SECONDS = 1.0


def holder(port: int, reuse_port: bool) -> socket.socket:
    """A socket listening on 127.0.0.1:port, as another server's would."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


def test_a_taken_openai_port_stops_the_server_naming_the_flag(tmp_path: Path) -> None:
    port = free_port()
    with holder(port, reuse_port=False):
        done = subprocess.run(
            [sys.executable, "-m", "naiad", "serve", "--model-repository", str(tmp_path),
             "--http-address=127.0.0.1", "--grpc-address=127.0.0.1",
             "--metrics-address=127.0.0.1", f"--http-port={free_port()}",
             f"--grpc-port={free_port()}", f"--metrics-port={free_port()}",
             "--allow-openai", f"--openai-port={port}"],
            capture_output=True, text=True, timeout=60 * SECONDS)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert (f"failed to start a listener: OpenAI frontend: cannot listen on 127.0.0.1:{port}: "
            "Address already in use (processes share a port only when each sets "
            "--reuse-openai-port=true)") in output, output
    assert "Traceback" not in output


def test_with_the_flag_the_server_shares_the_port(tmp_path: Path) -> None:
    port = free_port()
    with holder(port, reuse_port=True) as other, \
            naiad_server("--model-repository", str(tmp_path), "--allow-openai",
                         f"--openai-port={port}", "--reuse-openai-port") as server:
        other.close()  # every new connection now reaches the server
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="EMPTY")
        with client:
            assert list(client.models.list()) == []
        assert server.process is not None and server.process.poll() is None
