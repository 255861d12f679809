"""Start a real inference server process on free loopback ports and wait until it is ready.

Used by naiad's own end-to-end tests, by the Triton differential suite (the same class
starts ``tritonserver``) and by plugin authors who want to serve their backend for real.
"""

from __future__ import annotations

import http.client
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from importlib.metadata import entry_points
from pathlib import Path

from naiad.testing.parent_death import popen_ending_with_this_process
from naiad.testing.port_owner import port_listener_is_foreign

SECONDS = 1.0

#: frontend plugins that listen on a port of their own: ``naiad.frontends`` entry point name
#: -> the flag that sets its port. A test server gets a free one (see ``ServerProcess``).
FRONTEND_PORT_FLAGS = {"openai": "--openai-port"}
#: ... and the flag that turns the frontend on (off by default: ``--allow-openai``)
FRONTEND_SWITCHES = {"openai": "--allow-openai"}
_TRUE = ("true", "1", "on", "yes")
#: how many times ``ServerProcess.start`` starts a server on new ports when the HTTP port it
#: was given is found to be another process's (see ``naiad.testing.port_owner``)
PORT_TAKEN_ATTEMPTS = 3
#: what a server that failed to bind a port prints (Python's OSError, Triton, gRPC)
PORT_TAKEN_WORDS = ("already in use", "failed to bind")


class ServerExitedEarly(RuntimeError):
    """The server process ended before it was ready (its log is in the message)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def installed_frontend_port_flags(cmd: Sequence[str] | None = None) -> list[str]:
    """The port flags of the installed frontend plugins (``FRONTEND_PORT_FLAGS``); with
    ``cmd``, only those of the frontends ``cmd`` turns on (``FRONTEND_SWITCHES``)."""
    installed = {entry.name for entry in entry_points(group="naiad.frontends")}
    return [flag for name, flag in FRONTEND_PORT_FLAGS.items() if name in installed
            and (cmd is None or _switched_on(list(cmd), FRONTEND_SWITCHES[name]))]


def _switched_on(cmd: list[str], switch: str) -> bool:
    """Whether ``cmd`` gives ``switch`` a true value (``--allow-openai``, ``=true``, ``true``);
    the last one given wins, as in argparse."""
    on = False
    for i, part in enumerate(cmd):
        name, eq, value = part.partition("=")
        if name != switch:
            continue
        if eq:
            on = value.strip().lower() in _TRUE
        else:  # alone it is true; a following boolean word is its value
            following = cmd[i + 1].strip().lower() if i + 1 < len(cmd) else ""
            on = following not in ("false", "0", "off", "no")
    return on


def runs_naiad_serve(cmd: Sequence[str]) -> bool:
    """Whether ``cmd`` is ``naiad serve ...`` (``python -m naiad serve`` or a ``naiad``
    program), as opposed to ``tritonserver`` or a helper."""
    return any(part == "serve" and i > 0 and Path(cmd[i - 1]).name == "naiad"
               for i, part in enumerate(cmd))


def stop_process(process: subprocess.Popen[bytes] | None,
                 timeout: float = 20 * SECONDS) -> None:
    """Stop a process a test started (an emulator, a helper server): SIGTERM to its PID,
    SIGKILL if it is still there after ``timeout`` seconds. Nothing if it has ended."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout)


class ServerProcess:
    """A server started as ``cmd`` (a list; ``{http_port}``-style placeholders are filled:
    ``http_port``, ``grpc_port``, ``metrics_port``, ``openai_port``).

    A ``naiad serve`` command that turns on an installed frontend plugin (``--allow-openai``)
    and names no port for it (the OpenAI API's ``--openai-port``) gets ``openai_port``, a
    free one: two test servers never contend for a plugin's default port (9000), which the
    second could not bind.

    ``start()`` waits until ``GET /v2/health/ready`` (sent with ``ready_headers``, for a
    server whose health API is restricted) answers 200 (or ``ready_status``), the process
    exits, or ``ready_timeout`` passes. ``stop()`` sends SIGTERM to the process group
    and SIGKILL after ``stop_timeout``. The server also gets SIGTERM when the process that
    started it ends, however it ends (Linux; see ``naiad.testing.parent_death``).
    """

    def __init__(
        self,
        cmd: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | Path | None = None,
        ready_timeout: float = 60 * SECONDS,
        stop_timeout: float = 20 * SECONDS,
        ready_status: int = 200,
        ready_headers: dict[str, str] | None = None,
    ) -> None:
        cmd = list(cmd)
        if runs_naiad_serve(cmd):
            cmd += [f"{flag}={{openai_port}}" for flag in installed_frontend_port_flags(cmd)
                    if not any(part.split("=")[0] == flag for part in cmd)]
        self._cmd_template = cmd
        self._choose_ports()
        self.env = {**os.environ, **(env or {})}
        self.cwd = cwd
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self.ready_status = ready_status
        self.ready_headers = ready_headers or {}
        self.log_path = Path(tempfile.mkstemp(prefix="naiad-server-", suffix=".log")[1])
        self.process: subprocess.Popen[bytes] | None = None

    def _choose_ports(self) -> None:
        """Free ports for the command's ``{http_port}``-style fields; ``cmd`` with them."""
        self.http_port = free_port()
        self.grpc_port = free_port()
        self.metrics_port = free_port()
        self.openai_port = free_port()
        ports = {
            "http_port": self.http_port,
            "grpc_port": self.grpc_port,
            "metrics_port": self.metrics_port,
            "openai_port": self.openai_port,
        }
        self.cmd = [part.format(**ports) for part in self._cmd_template]

    @property
    def http_url(self) -> str:
        """``127.0.0.1:PORT`` as tritonclient.http expects it."""
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def log(self) -> str:
        """Everything the server printed so far (stdout and stderr)."""
        return self.log_path.read_text(errors="replace")

    def start(self) -> ServerProcess:
        """Start the server and wait until it is ready. When the port it was given turns out
        to be another process's (taken between ``free_port()`` and the server's bind: that
        process answered the health check), start again on new ports, up to
        ``PORT_TAKEN_ATTEMPTS`` times."""
        # only a command that takes its HTTP port from here can be given another one (a test
        # may fix the ports, e.g. two servers sharing one with SO_REUSEPORT on purpose)
        ports_given_here = any("{http_port}" in part for part in self._cmd_template)
        for attempt in range(1, PORT_TAKEN_ATTEMPTS + 1):
            last = attempt == PORT_TAKEN_ATTEMPTS or not ports_given_here
            try:
                self._start_once()
            except ServerExitedEarly:
                # a port taken by then makes the server itself fail to bind and exit
                if last or not any(words in self.log().lower() for words in PORT_TAKEN_WORDS):
                    raise
                self._choose_ports()
                continue
            assert self.process is not None
            if not ports_given_here or not port_listener_is_foreign(self.http_port,
                                                                    self.process.pid):
                return self
            taken = self.http_port
            self.stop()
            if last:
                raise RuntimeError(
                    f"another process listens on port {taken}, given to this server "
                    f"({PORT_TAKEN_ATTEMPTS} attempts on new free ports):\n{self.log()}")
            self._choose_ports()
        return self

    def _start_once(self) -> None:
        with open(self.log_path, "wb") as log:
            self.process = popen_ending_with_this_process(
                self.cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
            )
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerExitedEarly(
                    f"server exited with {self.process.returncode} before it was ready:\n"
                    f"{self.log()}"
                )
            if self._ready():
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"server not ready after {self.ready_timeout} s:\n{self.log()}")

    def _ready(self) -> bool:
        conn = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=2)
        try:
            conn.request("GET", "/v2/health/ready", headers=self.ready_headers)
            status = conn.getresponse().status
        except OSError:  # not listening yet, or (frontend processes) not accepting yet
            return False
        finally:
            conn.close()
        return status == self.ready_status

    def signal(self, signum: int) -> None:
        assert self.process is not None
        os.killpg(self.process.pid, signum)

    def stop(self) -> int | None:
        """Stop the server (SIGTERM, then SIGKILL); return its exit code."""
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        try:
            self.signal(signal.SIGTERM)
            return self.process.wait(self.stop_timeout)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            return self.process.wait(self.stop_timeout)
        except ProcessLookupError:
            return self.process.wait(self.stop_timeout)

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def naiad_server(*args: str, env: dict[str, str] | None = None,
                 **kwargs: object) -> Iterator[ServerProcess]:
    """``naiad serve ARGS`` on free loopback ports (HTTP, gRPC, metrics, and the OpenAI
    API's where that plugin is installed and ``--allow-openai`` given: ``openai_port``),
    ready on entry.

    ``NAIAD_TEST_SERVE_ARGS`` in the environment adds flags to every server a suite starts
    (e.g. ``--frontend-processes=2``: the same suite against another process layout)."""
    cmd = [
        sys.executable, "-m", "naiad", "serve",
        "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1",
        "--metrics-address", "127.0.0.1", "--http-port", "{http_port}",
        "--grpc-port", "{grpc_port}", "--metrics-port", "{metrics_port}", *args,
        *shlex.split(os.environ.get("NAIAD_TEST_SERVE_ARGS", "")),
    ]
    with ServerProcess(cmd, env=env, **kwargs) as server:  # type: ignore[arg-type]
        yield server
