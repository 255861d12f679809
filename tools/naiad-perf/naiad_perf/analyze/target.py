"""The server a run tunes: the repository API (read the model's configuration, load a
candidate with a config override, restore the original), its GPUs, its process for memory.
Either one given by URL (remote) or a ``naiad serve`` this module starts (local).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from naiad_perf.analyze.memory import pid_listening_on

SECONDS = 1.0
LOAD_TIMEOUT_S = 300 * SECONDS  # default of --load-timeout: a load may build an environment
METRICS_TIMEOUT_S = 5 * SECONDS
READY_TIMEOUT_S = 120 * SECONDS  # default of --server-ready-timeout (local mode)
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")

_GPU_LINE = re.compile(r'^nv_gpu_memory_total_bytes\{[^}]*gpu_uuid="([^"]+)"', re.MULTILINE)


class LoadFailed(Exception):
    """The server refused to load a candidate (its message says why)."""


def host_port(url: str) -> tuple[str, int | None]:
    """``127.0.0.1:8000`` or ``http://host:port`` -> (host, port)."""
    bare = url.split("://", 1)[-1].split("/", 1)[0]
    host, sep, port = bare.rpartition(":")
    if not sep or not port.isdigit():
        return bare, None
    return host, int(port)


@dataclass
class Server:
    """A running server with Triton's repository API in explicit model control mode."""

    url: str
    protocol: str = "http"
    metrics_url: str | None = None  # host:port of the metrics endpoint, None: no metrics
    pid: int | None = None  # its process, for memory; None: memory unknown
    load_timeout_s: float = LOAD_TIMEOUT_S

    def _client(self) -> Any:
        if self.protocol == "grpc":
            import tritonclient.grpc as grpcclient

            return grpcclient.InferenceServerClient(self.url)
        import tritonclient.http as httpclient

        return httpclient.InferenceServerClient(self.url, connection_timeout=self.load_timeout_s,
                                                network_timeout=self.load_timeout_s)

    def config(self, model: str) -> dict[str, Any]:
        """The model's configuration as the server serves it (``GET .../config``)."""
        client = self._client()
        try:
            if self.protocol == "grpc":
                return dict(client.get_model_config(model, as_json=True)["config"])
            return dict(client.get_model_config(model))
        finally:
            client.close()

    def load(self, model: str, config: dict[str, Any]) -> None:
        """Load ``model`` with ``config`` as its override (``POST .../load``)."""
        from tritonclient.utils import InferenceServerException

        client = self._client()
        try:
            kwargs: dict[str, Any] = {"config": json.dumps(config)}
            if self.protocol == "grpc":
                kwargs["client_timeout"] = self.load_timeout_s
            client.load_model(model, **kwargs)
        except InferenceServerException as exc:
            raise LoadFailed(exc.message() or str(exc)) from None
        finally:
            client.close()

    def gpu_count(self) -> int | None:
        """The GPUs the server's metrics report (``nv_gpu_*`` series, one per GPU), or None
        when the metrics endpoint cannot be read."""
        if not self.metrics_url:
            return None
        try:
            with urllib.request.urlopen(f"http://{self.metrics_url}/metrics",
                                        timeout=METRICS_TIMEOUT_S) as response:
                text = response.read().decode(errors="replace")
        except OSError:
            return None
        return len(set(_GPU_LINE.findall(text)))


def find_server_pid(url: str) -> int | None:
    """The process serving ``url`` when it is a loopback address of this machine and /proc
    shows which process listens on its port; None otherwise."""
    host, port = host_port(url)
    if host not in LOOPBACK or port is None:
        return None
    return pid_listening_on(port)


# Runs before naiad serve, in its process: asks Linux to send it SIGTERM when its parent (this
# analyze run) ends, however it ends (a kill -9 included), then becomes naiad serve.
_LAUNCHER = """
import ctypes, os, signal, sys
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
except (AttributeError, OSError):
    pass  # not Linux: the server outlives a killed run
if os.getppid() != int(os.environ["NAIAD_ANALYZE_PID"]):
    sys.exit(1)  # the run ended before the request was in place
os.execv(sys.executable, [sys.executable, "-m", "naiad", "serve", *sys.argv[1:]])
"""
SERVER_FOLDER = "server-repository"  # in the output folder: the copy naiad serve serves


@contextmanager
def local_server(repository: Path, model: str, serve_args: Sequence[str], output: Path, *,
                 protocol: str = "http", load_timeout_s: float = LOAD_TIMEOUT_S,
                 ready_timeout_s: float = READY_TIMEOUT_S) -> Iterator[Server]:
    """``naiad serve --model-control-mode explicit`` on free loopback ports, serving a copy
    of ``repository/model`` in ``output/server-repository`` (the user's folder is never
    written to; the copy is removed at the end, or replaced by the next run after a kill).
    The server ends with this process; its log is copied to ``output/server.log``."""
    try:
        from naiad.testing.server import ServerProcess
    except ImportError:
        raise SystemExit("naiad analyze --model-repository starts naiad itself: install the "
                         "server (pip install naiad) or give a running one with -u") from None
    source = repository / model
    if not source.is_dir():
        raise SystemExit(f"no model '{model}' in {repository}")
    workdir = output / SERVER_FOLDER
    shutil.rmtree(workdir, ignore_errors=True)
    try:
        shutil.copytree(source, workdir / model, symlinks=True)
        command = [sys.executable, "-c", _LAUNCHER,
                   "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1",
                   "--metrics-address", "127.0.0.1", "--http-port", "{http_port}",
                   "--grpc-port", "{grpc_port}", "--metrics-port", "{metrics_port}",
                   "--model-repository", str(workdir), "--model-control-mode", "explicit",
                   "--load-model", model, *serve_args]
        process = ServerProcess(command, env={"NAIAD_ANALYZE_PID": str(os.getpid())},
                                ready_timeout=ready_timeout_s)
        try:
            process.start()
            assert process.process is not None
            url = process.grpc_url if protocol == "grpc" else process.http_url
            yield Server(url, protocol, f"127.0.0.1:{process.metrics_port}",
                         process.process.pid, load_timeout_s)
        finally:
            process.stop()
            shutil.copyfile(process.log_path, output / "server.log")
            process.log_path.unlink(missing_ok=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
