"""naiad.testing's ServerProcess gives every ``naiad serve`` it starts a free port of its own
for each installed frontend plugin the command turns on, so that test servers never contend
for 9000."""

from __future__ import annotations

import http.client
import http.server
import os
import sys
import threading

import pytest

from naiad.testing import ServerProcess
from naiad.testing.server import installed_frontend_port_flags, runs_naiad_serve


def test_naiad_serve_commands_are_told_apart_from_others() -> None:
    assert runs_naiad_serve([sys.executable, "-m", "naiad", "serve", "--x"])
    assert runs_naiad_serve(["/opt/naiad/bin/naiad", "serve"])
    assert not runs_naiad_serve(["tritonserver", "--model-repository", "serve"])
    assert not runs_naiad_serve([sys.executable, "-m", "naiad", "plugins"])


def test_a_naiad_server_gets_a_free_openai_port_when_it_serves_the_api() -> None:
    if "--openai-port" not in installed_frontend_port_flags():
        pytest.skip("naiad-frontend-openai is not installed")
    serve = [sys.executable, "-m", "naiad", "serve"]
    assert ServerProcess(serve).cmd == serve  # the OpenAI API is off unless asked for
    for on in (["--allow-openai"], ["--allow-openai=true"], ["--allow-openai", "yes"],
               ["--allow-openai", "--x"], ["--allow-openai=false", "--allow-openai"]):
        process = ServerProcess([*serve, *on])
        assert process.cmd == [*serve, *on, f"--openai-port={process.openai_port}"], on
    for off in (["--allow-openai=false"], ["--allow-openai", "no"],
                ["--allow-openai", "--allow-openai=0"]):
        assert ServerProcess([*serve, *off]).cmd == [*serve, *off], off
    on = [*serve, "--allow-openai"]
    assert ServerProcess([*on, "--openai-port", "1234"]).cmd == [*on, "--openai-port", "1234"]
    assert ServerProcess([*on, "--openai-port=1234"]).cmd == [*on, "--openai-port=1234"]
    assert ServerProcess(["tritonserver", "--allow-openai"]).cmd == ["tritonserver",
                                                                    "--allow-openai"]


# A stand-in server: binds {http_port} (no SO_REUSEPORT: a taken port makes it exit, as
# naiad serve and tritonserver do), answers every GET with its own PID.
OWN_PID_SERVER = """
import http.server, os, sys, time
time.sleep(float(sys.argv[2]))
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = str(os.getpid()).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""


class _StrangerHandler(http.server.BaseHTTPRequestHandler):
    """Another process's server: 200 to every GET (the health check too), with its PID."""

    def do_GET(self) -> None:
        body = str(os.getpid()).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _get(port: int) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/")
        return conn.getresponse().read().decode()
    finally:
        conn.close()


@pytest.mark.parametrize("bind_delay_s", [0.0, 1.0])
def test_a_port_another_process_took_first_is_given_up_for_a_new_one(
        tmp_path, bind_delay_s: float) -> None:
    """The race free_port() cannot close: another process (here this test's) listens on the
    HTTP port before the server binds it. Whether the server exits at once (address in use)
    or the stranger answered the health check first (the server binding late), start()
    ends with a server of its own on a new port, never the stranger's."""
    script = tmp_path / "own_pid_server.py"
    script.write_text(OWN_PID_SERVER)
    server = ServerProcess([sys.executable, str(script), "{http_port}", str(bind_delay_s)],
                           ready_timeout=30)
    stranger = http.server.ThreadingHTTPServer(("127.0.0.1", server.http_port),
                                               _StrangerHandler)
    threading.Thread(target=stranger.serve_forever, daemon=True).start()
    taken = server.http_port
    try:
        with server:
            assert server.http_port != taken
            assert server.process is not None and server.process.poll() is None
            assert _get(server.http_port) == str(server.process.pid)
    finally:
        stranger.shutdown()
        stranger.server_close()
