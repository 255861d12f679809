"""The program of one frontend process (``python -m naiad.frontends.bridge.frontend_main``),
started by the engine (:mod:`.processes`); not for users to run.

It serves HTTP on the listening sockets it inherited from the engine, and gRPC on the gRPC
port (shared with the other frontends), forwarding every request and call over the engine's
Unix sockets, until SIGTERM (the engine stops it after draining),
or until the engine's connection ends (the engine is gone). It ignores SIGINT: a Ctrl-C
reaches the whole process group, and the engine decides when its frontends stop.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import logging
import os
import signal
import socket
import sys
from typing import Any

from naiad import logs
from naiad.frontends.bridge.frontend import (
    EngineLink,
    ForwardedGRPCInfer,
    ForwardedInfer,
    ForwardedStreams,
    ForwardingApp,
)
from naiad.frontends.http.limits import HTTPLimits
from naiad.frontends.http.listener import UvicornListener

log = logging.getLogger("naiad.http")

_PR_SET_PDEATHSIG = 1
# How long gRPC calls in progress may take to finish once the engine stops this frontend (it
# has drained them already; what is left is writing their answers).
GRPC_GRACE_S = 5.0


def _end_with_parent(parent: int) -> None:
    """SIGTERM this process when the engine ends, however it ends (Linux)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the lost connection ends it instead
        pass
    if os.getppid() != parent:  # the engine ended before the line above took effect
        sys.exit(0)


async def serve(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    ended: list[asyncio.Future[Any]] = [asyncio.ensure_future(stop.wait())]
    listener = grpc_server = link = None
    try:
        if args.engine:
            link = EngineLink(args.engine)
            await link.connect()
        if args.grpc_engine:
            grpc_server, grpc_link = await _start_grpc(args, link)
            grpc_lost = asyncio.Event()
            # Not a thread waiting on link.lost: the loop's executor would wait for it at exit.
            grpc_link.on_lost = lambda: loop.call_soon_threadsafe(grpc_lost.set)
            if grpc_link.lost.is_set():
                grpc_lost.set()
            ended.append(asyncio.ensure_future(grpc_lost.wait()))
        if link is not None:
            plain = None if args.infer_limit is None else ForwardedInfer(link, args.infer_limit)
            listener = UvicornListener(ForwardingApp(link), "", 0,
                                       limits=HTTPLimits(**json.loads(args.limits)),
                                       infer=plain)
            await listener.start([socket.socket(fileno=int(fd))
                                  for fd in args.listen_fds.split(",")])
            ended.append(asyncio.ensure_future(link.lost.wait()))
    except OSError as exc:
        log.error("frontend process %d: cannot start: %s", os.getpid(), exc)
        return 1
    await asyncio.wait(ended, return_when=asyncio.FIRST_COMPLETED)
    for waiting in ended:
        waiting.cancel()
    if not stop.is_set():
        log.error("frontend process %d: the engine's connection ended; stopping",
                  os.getpid())
    if grpc_server is not None:  # refuse new calls; those in progress finish (as the engine)
        await grpc_server.stop(GRPC_GRACE_S)
    if listener is not None:
        await listener.stop()  # finishes the answers in progress
    return 0 if stop.is_set() else 1


async def _start_grpc(args: argparse.Namespace, link: EngineLink | None) -> tuple[Any, Any]:
    """The gRPC server (grpc's or naiad's, as ``--grpc-server`` says), forwarding to the
    engine, and its link to the engine. With the HTTP ``link`` (HTTP is served too), either
    server sends ``ModelInfer`` and ``ModelStreamInfer`` there, for the engine's event
    loop."""
    from naiad.frontends.bridge.grpc_forwarding import (
        GRPCEngineLink,
        forwarding_handlers,
        start_forwarding_server,
    )
    from naiad.frontends.bridge.grpc_loop_calls import LoopCalls
    from naiad.frontends.grpc.options import GRPCOptions

    settings = json.loads(args.grpc)
    options = GRPCOptions(**settings["options"])
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(args.grpc_engine)
    grpc_link = GRPCEngineLink(sock)
    if options.server == "naiad":
        from naiad.frontends.grpc.naiad_server import GRPCService, serve_grpc

        # Every frontend process listens on the same port (SO_REUSEPORT).
        options.reuse_port = True
        service = GRPCService(
            options, asyncio.get_running_loop(), forwarding_handlers(grpc_link, None),
            settings["max_input_size"], None if link is None else ForwardedGRPCInfer(link),
            None if link is None else ForwardedStreams(link))
        return await serve_grpc(service, settings["address"], settings["port"]), grpc_link
    server, _watch = start_forwarding_server(
        grpc_link, options, settings["address"], settings["port"],
        settings["max_input_size"], settings["max_response_size"],
        None if link is None else LoopCalls(link, asyncio.get_running_loop()))
    return _StoppingGRPCServer(server), grpc_link


class _StoppingGRPCServer:
    """grpc's server with the naiad listener's ``await stop(grace)``."""

    def __init__(self, server: Any) -> None:
        self.server = server

    async def stop(self, grace: float) -> None:
        stopped = self.server.stop(grace)
        await asyncio.get_running_loop().run_in_executor(None, stopped.wait)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="naiad-frontend", description=__doc__)
    parser.add_argument("--parent", type=int, required=True, help="the engine's pid")
    parser.add_argument("--log", required=True, help="the engine's log settings as JSON")
    parser.add_argument("--engine", help="the engine's Unix socket for HTTP")
    parser.add_argument("--listen-fds", help="inherited HTTP listening sockets, comma-separated")
    parser.add_argument("--limits", help="HTTPLimits fields as JSON")
    parser.add_argument("--infer-limit", type=int,
                        help="forward plain inferences up to this many bytes without ASGI "
                             "(absent: every request through the application)")
    parser.add_argument("--grpc-engine", help="the engine's Unix socket for gRPC")
    parser.add_argument("--grpc", help="where and how to serve gRPC, as JSON")
    args = parser.parse_args(argv)
    _end_with_parent(args.parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logs.configure(logs.LogSettings(**json.loads(args.log)))
    try:
        import uvloop
    except ImportError:
        return asyncio.run(serve(args))
    return uvloop.run(serve(args))


if __name__ == "__main__":
    sys.exit(main())
