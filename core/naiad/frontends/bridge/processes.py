"""Starting, watching and stopping the frontend processes, from the engine.

:class:`FrontendProcesses` stands where the HTTP and gRPC listeners stand in a
single-process server (``naiad.serve``): it binds the HTTP port, starts
``--frontend-processes`` processes that share that one accepting socket (and bind the gRPC
port together, SO_REUSEPORT), and serves their requests through a
:class:`~naiad.frontends.bridge.engine.BridgeServer` and a
:class:`~naiad.frontends.bridge.grpc_engine.GRPCBridge`. A frontend that ends while the server
runs is logged and started again, so the port keeps being served; the engine stops them
all, after draining, with SIGTERM (each finishes the answers it is writing).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import time
from typing import Any

from naiad import logs
from naiad.frontends.bridge.engine import BridgeServer
from naiad.frontends.bridge.grpc_engine import GRPCBridge
from naiad.frontends.grpc.options import GRPCOptions
from naiad.frontends.http.limits import HTTPLimits
from naiad.frontends.http.listener import REUSE_FLAG
from naiad.sockets import bind_listening_sockets

log = logging.getLogger("naiad.http")

# How long the frontends may take to connect at start-up, and to finish at shutdown.
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
# How often the engine looks whether a frontend ended, and the least time between two
# starts of one frontend (a frontend that cannot start must not spin).
WATCH_INTERVAL_S = 0.5
RESTART_DELAY_S = 1.0
# Connections waiting to be accepted on the shared socket (uvicorn's default).
LISTEN_BACKLOG = 2048


@dataclasses.dataclass
class HTTPForwarding:
    """What the frontends serve over HTTP: the engine's application, where and how."""

    app: Any
    host: str
    port: int
    reuse_port: bool = False
    limits: HTTPLimits = dataclasses.field(default_factory=HTTPLimits)


@dataclasses.dataclass
class GRPCForwarding:
    """What the frontends serve over gRPC: the engine's method handlers, where and how."""

    handlers: dict[str, Any]
    address: str
    port: int
    options: GRPCOptions
    max_input_size: int
    max_response_size: int
    # Answers the ModelInfer and ModelStreamInfer calls frontends send on their HTTP link
    # (frames.GRPC_INFER, GRPC_STREAM); None: every call goes through the gRPC bridge.
    infer: Any = None

    def settings(self) -> str:
        """What a frontend needs to listen, as JSON (the restricted APIs and the forwarded
        headers are the engine's to apply)."""
        fields = {f.name: getattr(self.options, f.name)
                  for f in dataclasses.fields(self.options)
                  if f.name not in ("restricted", "header_forward_pattern")}
        return json.dumps({"address": self.address, "port": self.port, "options": fields,
                           "max_input_size": self.max_input_size,
                           "max_response_size": self.max_response_size})


class FrontendProcesses:
    """``count`` frontend processes serving ``http`` and/or ``grpc`` for the engine."""

    def __init__(self, count: int, http: HTTPForwarding | None,
                 grpc: GRPCForwarding | None) -> None:
        if count < 1:
            raise ValueError(f"--frontend-processes must be at least 1 here, got {count}")
        self.count = count
        self.http, self.grpc = http, grpc
        self.bridge = BridgeServer(None if http is None else http.app,
                                   None if grpc is None else grpc.infer)
        self.grpc_bridge = (None if grpc is None else GRPCBridge(
            grpc.handlers, os.path.join(self.bridge.folder, "grpc.sock")))
        self.processes: list[subprocess.Popen[bytes]] = []
        self._sockets: list[Any] = []
        self._stopping = False
        self._watch: asyncio.Task[None] | None = None

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self.processes]

    def _connected(self) -> int:
        """How many frontends have connected (to every bridge they use)."""
        counts = []
        if self.http is not None:
            counts.append(len(self.bridge.connections))
        if self.grpc_bridge is not None:
            counts.append(len(self.grpc_bridge.connections))
        return min(counts, default=self.count)

    async def start(self) -> None:
        http = self.http
        if http is not None:
            self._sockets = bind_listening_sockets(http.host, http.port, reuse_port=http.reuse_port,
                                                  reuse_flag=REUSE_FLAG)
            for sock in self._sockets:
                sock.listen(LISTEN_BACKLOG)
            await self.bridge.start()
        if self.grpc_bridge is not None:
            self.grpc_bridge.start()
        self.processes = [self._spawn() for _ in range(self.count)]
        deadline = time.monotonic() + START_TIMEOUT_S
        while self._connected() < self.count:
            ended = [p for p in self.processes if p.poll() is not None]
            if ended:
                await self.stop()
                raise OSError(f"a frontend process (pid {ended[0].pid}) exited with code "
                              f"{ended[0].returncode} during start-up")
            if time.monotonic() > deadline:
                await self.stop()
                raise OSError(f"the frontend processes did not connect within "
                              f"{START_TIMEOUT_S:g} s")
            await asyncio.sleep(0.01)
        self._watch = asyncio.ensure_future(self._watch_processes())
        served = " and ".join(name for name, on in (("HTTP", self.http), ("gRPC", self.grpc))
                              if on is not None)
        log.info("%d frontend processes serve %s (pids %s)", self.count, served,
                 ", ".join(map(str, self.pids)))

    def _spawn(self) -> subprocess.Popen[bytes]:
        fds = [sock.fileno() for sock in self._sockets]
        argv = [sys.executable, "-m", "naiad.frontends.bridge.frontend_main",
                "--parent", str(os.getpid()), "--log", json.dumps(logs.current.as_dict())]
        if self.http is not None:
            argv += ["--engine", self.bridge.path, "--listen-fds", ",".join(map(str, fds)),
                     "--limits", json.dumps(dataclasses.asdict(self.http.limits))]
            route = getattr(self.http.app, "fast_infer", None)
            if route is not None:  # plain inferences skip ASGI (frames.INFER)
                argv += ["--infer-limit", str(route.limit)]
        if self.grpc is not None and self.grpc_bridge is not None:
            argv += ["--grpc-engine", self.grpc_bridge.path, "--grpc", self.grpc.settings()]
        # A session of its own: a signal to the server's process group (Ctrl-C) is the
        # engine's to handle; the engine stops its frontends once it has drained.
        return subprocess.Popen(argv, pass_fds=fds, stdin=subprocess.DEVNULL,
                                start_new_session=True)

    async def _watch_processes(self) -> None:
        started = {process.pid: time.monotonic() for process in self.processes}
        while not self._stopping:
            await asyncio.sleep(WATCH_INTERVAL_S)
            for index, process in enumerate(self.processes):
                if process.poll() is None or self._stopping:
                    continue
                if time.monotonic() - started.get(process.pid, 0.0) < RESTART_DELAY_S:
                    continue
                log.error("frontend process %d exited with code %s; starting another",
                          process.pid, process.returncode)
                replacement = self._spawn()
                self.processes[index] = replacement
                started[replacement.pid] = time.monotonic()

    async def stop(self) -> None:
        """SIGTERM every frontend, wait for them (SIGKILL after ``STOP_TIMEOUT_S``), then
        close the port and the engine's socket."""
        self._stopping = True
        if self._watch is not None:
            self._watch.cancel()
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while any(p.poll() is None for p in self.processes) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for process in self.processes:
            if process.poll() is None:
                log.warning("frontend process %d did not stop within %g s; killed",
                            process.pid, STOP_TIMEOUT_S)
                process.kill()
                process.wait()
        for sock in self._sockets:
            sock.close()
        if self.grpc_bridge is not None:
            self.grpc_bridge.stop()
        await self.bridge.stop()
