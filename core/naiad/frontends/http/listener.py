"""The HTTP listeners naiad runs an ASGI application on: uvicorn (httptools behind naiad's
guard, the default) or hypercorn, on sockets naiad binds itself (:func:`bind_sockets`), so
that a taken port is an error naming the address and several processes may share a port or
one accepting socket (frontend processes, ``naiad.frontends.bridge``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator, Sequence
from typing import Any

from naiad.frontends.http.limits import (
    HTTPLimits,
    HypercornGuard,
    guarded_protocol,
    hypercorn_settings,
)

HTTP_SERVERS = ("uvicorn", "hypercorn")


def bind_sockets(host: str, port: int, reuse_port: bool = False) -> list[socket.socket]:
    """TCP sockets bound (not yet listening) to every address of ``host`` at ``port``, for
    an HTTP listener to serve. With ``reuse_port`` (``--reuse-http-port``), SO_REUSEPORT:
    processes that all set it may listen on one port, and the kernel spreads new
    connections among them.

    naiad binds rather than the HTTP server so that both servers can reuse ports and a
    taken port is an OSError naming the address, raised before the HTTP server starts.
    """
    if reuse_port and not hasattr(socket, "SO_REUSEPORT"):
        raise OSError("--reuse-http-port needs SO_REUSEPORT, which this system lacks")
    try:
        found = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise OSError(f"cannot resolve {host}: {exc}") from None
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(found):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            # As asyncio's create_server does: restart on a port in TIME_WAIT, and keep an
            # IPv6 socket off the IPv4 addresses another of these sockets binds.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            # Accepted connections inherit it, as hypercorn sets it on sockets of its own.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.bind(address)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        how = " with SO_REUSEPORT" if reuse_port else ""
        raise OSError(f"cannot listen on {host}:{port}{how}: {exc.strerror or exc}") from None
    return sockets


class UvicornListener:
    """A uvicorn server that leaves signal handling to naiad."""

    def __init__(self, app: Any, host: str, port: int, reuse_port: bool = False,
                 limits: HTTPLimits | None = None) -> None:
        import uvicorn

        class Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self) -> Iterator[None]:
                yield

        # No proxy-header rewriting (naiad never reads the client address) and no
        # "server: uvicorn" header: less work per request. httptools behind naiad's guard
        # (header size and count, header and body timeouts); the keep-alive is uvicorn's.
        limits = limits or HTTPLimits()
        config = uvicorn.Config(app, host=host, port=port, loop="none",
                                http=guarded_protocol(limits),
                                timeout_keep_alive=limits.keepalive_timeout,  # type: ignore[arg-type]
                                lifespan="off", access_log=False, log_level="warning",
                                timeout_graceful_shutdown=5, proxy_headers=False,
                                server_header=False)
        self.server = Server(config)
        self.host, self.port, self.reuse_port = host, port, reuse_port
        self.task: asyncio.Task[None] | None = None

    async def start(self, sockets: Sequence[socket.socket] | None = None) -> None:
        """Serve on ``sockets`` (bound, possibly listening already: a frontend process
        shares its engine's), or on sockets bound here to the host and port."""
        if sockets is None:
            sockets = bind_sockets(self.host, self.port, self.reuse_port)
        self.task = asyncio.create_task(self.server.serve(sockets=list(sockets)))
        while not self.server.started:
            if self.task.done():
                self.task.result()
                raise RuntimeError("the HTTP server stopped during start-up")
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        self.server.should_exit = True
        if self.task is not None:
            await self.task


class HypercornListener:
    def __init__(self, app: Any, host: str, port: int, reuse_port: bool = False,
                 limits: HTTPLimits | None = None) -> None:
        from hypercorn.config import Config

        limits = limits or HTTPLimits()
        self.app = HypercornGuard(app, limits)
        self.config = Config()
        for name, value in hypercorn_settings(limits).items():
            setattr(self.config, name, value)
        self.host, self.port, self.reuse_port = host, port, reuse_port
        self.config.accesslog = None
        self.config.errorlog = logging.getLogger("naiad.hypercorn")
        self.stopping = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        from hypercorn.asyncio import serve

        # hypercorn serves inherited file descriptors ("fd://N"), whose sockets it then owns.
        self.config.bind = [f"fd://{sock.detach()}"
                            for sock in bind_sockets(self.host, self.port, self.reuse_port)]
        self.task = asyncio.create_task(
            serve(self.app, self.config, shutdown_trigger=self.stopping.wait))  # type: ignore[arg-type]
        await asyncio.sleep(0.05)
        if self.task.done():
            self.task.result()

    async def stop(self) -> None:
        self.stopping.set()
        if self.task is not None:
            await self.task


def http_listener(kind: str, app: Any, host: str, port: int, reuse_port: bool = False,
                   limits: HTTPLimits | None = None) -> UvicornListener | HypercornListener:
    listener = UvicornListener if kind == "uvicorn" else HypercornListener
    return listener(app, host, port, reuse_port, limits)
