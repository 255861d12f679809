"""The HTTP listeners naiad runs an ASGI application on: uvicorn (httptools behind naiad's
guard, the default) or hypercorn, on sockets naiad binds itself
(:func:`naiad.sockets.bind_listening_sockets`), so that a taken port is an error naming the
address and several processes may share a port or one accepting socket (frontend processes,
``naiad.frontends.bridge``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator, Sequence
from typing import Any

from naiad.frontends.http.limits import HTTPLimits, HypercornGuard, hypercorn_settings
from naiad.frontends.http.protocol import PlainInfer, naiad_protocol
from naiad.sockets import bind_listening_sockets

HTTP_SERVERS = ("uvicorn", "hypercorn")
#: the flag that lets other processes listen on the HTTP port
REUSE_FLAG = "--reuse-http-port"


class UvicornListener:
    """A uvicorn server that leaves signal handling to naiad. With ``infer`` (the
    application's :class:`~naiad.frontends.http.infer.InferRoute`, or a frontend process's
    forwarder), naiad's protocol answers plain inferences itself (:mod:`.protocol`);
    everything else reaches ``app``."""

    def __init__(self, app: Any, host: str, port: int, reuse_port: bool = False,
                 limits: HTTPLimits | None = None, infer: PlainInfer | None = None) -> None:
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
                                http=naiad_protocol(limits, infer),
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
            sockets = bind_listening_sockets(self.host, self.port, reuse_port=self.reuse_port,
                                             reuse_flag=REUSE_FLAG)
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
        sockets = bind_listening_sockets(self.host, self.port, reuse_port=self.reuse_port,
                                         reuse_flag=REUSE_FLAG)
        self.config.bind = [f"fd://{sock.detach()}" for sock in sockets]
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
                  limits: HTTPLimits | None = None, infer: PlainInfer | None = None
                  ) -> UvicornListener | HypercornListener:
    """The listener of ``--http-server`` ``kind``. ``infer``: see :class:`UvicornListener`
    (hypercorn serves every request, inferences included, through the ASGI application)."""
    if kind == "uvicorn":
        return UvicornListener(app, host, port, reuse_port, limits, infer)
    return HypercornListener(app, host, port, reuse_port, limits)
