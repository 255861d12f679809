"""The OpenAI API's listening sockets and its uvicorn server.

Sockets are bound by :func:`naiad.sockets.bind_listening_sockets`: a port another process
holds stops start-up with a message naming the address, unless every process sharing it sets
``--reuse-openai-port`` (SO_REUSEPORT; the kernel spreads connections among them). Signals
stay with ``naiad serve`` (it stops the frontend through :meth:`Listener.stop`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

from naiad.sockets import bind_listening_sockets

#: how often start() looks whether uvicorn has started
START_POLL_S = 0.01
#: the flag that lets other processes listen on the OpenAI port
REUSE_FLAG = "--reuse-openai-port"


class Listener:
    """uvicorn serving ``app`` on sockets bound here, shared with other processes only
    with ``reuse_port``."""

    def __init__(self, app: Any, host: str, port: int, drain_timeout_s: float,
                 reuse_port: bool = False) -> None:
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
        self.host, self.port, self.reuse_port = host, port, reuse_port
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        sockets = bind_listening_sockets(self.host, self.port, reuse_port=self.reuse_port,
                                         reuse_flag=REUSE_FLAG, service="OpenAI frontend: ")
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
