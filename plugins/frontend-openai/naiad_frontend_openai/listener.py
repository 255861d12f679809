"""The OpenAI API's listening sockets and its uvicorn server.

Sockets are bound here with SO_REUSEPORT, always: several naiad processes may serve the
OpenAI API on one port and the kernel spreads connections among them. Signals stay with
``naiad serve`` (it stops the frontend through :meth:`Listener.stop`).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from typing import Any

#: how often start() looks whether uvicorn has started
START_POLL_S = 0.01


def bind_reuse_port(host: str, port: int) -> list[socket.socket]:
    """TCP sockets bound to every address of ``host`` at ``port``, SO_REUSEPORT set.
    Raises OSError naming the address when the port cannot be had."""
    try:
        found = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise OSError(f"OpenAI frontend: cannot resolve {host}: {exc}") from None
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(found):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if hasattr(socket, "SO_REUSEPORT"):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.bind(address)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        raise OSError(f"OpenAI frontend: cannot listen on {host}:{port}: "
                      f"{exc.strerror or exc}") from None
    return sockets


class Listener:
    """uvicorn serving ``app`` on sockets bound by :func:`bind_reuse_port`."""

    def __init__(self, app: Any, host: str, port: int, drain_timeout_s: float) -> None:
        import uvicorn

        class Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self) -> Iterator[None]:
                yield

        config = uvicorn.Config(app, host=host, port=port, loop="none", lifespan="off",
                                access_log=False, log_level="warning", proxy_headers=False,
                                server_header=False,
                                timeout_graceful_shutdown=int(drain_timeout_s) or 1)
        self.server = Server(config)
        self.host, self.port = host, port
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        sockets = bind_reuse_port(self.host, self.port)
        self.task = asyncio.create_task(self.server.serve(sockets=sockets))
        while not self.server.started:
            if self.task.done():
                self.task.result()
                raise OSError("OpenAI frontend: the HTTP server stopped during start-up")
            await asyncio.sleep(START_POLL_S)

    async def stop(self) -> None:
        self.server.should_exit = True
        if self.task is not None:
            await self.task
