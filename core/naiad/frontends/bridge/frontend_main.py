"""The program of one frontend process (``python -m naiad.frontends.bridge.frontend_main``),
started by the engine (:mod:`.processes`); not for users to run.

It serves HTTP on the listening sockets it inherited from the engine, forwarding every
request over the engine's Unix socket, until SIGTERM (the engine stops it after draining),
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

from naiad import logs
from naiad.frontends.bridge.frontend import EngineLink, ForwardingApp
from naiad.frontends.http.limits import HTTPLimits
from naiad.frontends.http.listener import UvicornListener

log = logging.getLogger("naiad.http")

_PR_SET_PDEATHSIG = 1


def _end_with_parent(parent: int) -> None:
    """SIGTERM this process when the engine ends, however it ends (Linux)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the lost connection ends it instead
        pass
    if os.getppid() != parent:  # the engine ended before the line above took effect
        sys.exit(0)


async def serve(engine: str, fds: list[int], limits: HTTPLimits) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    link = EngineLink(engine)
    try:
        await link.connect()
    except OSError as exc:
        log.error("frontend process %d: cannot reach the engine at %s: %s", os.getpid(),
                  engine, exc)
        return 1
    sockets = [socket.socket(fileno=fd) for fd in fds]
    listener = UvicornListener(ForwardingApp(link), "", 0, limits=limits)
    await listener.start(sockets)
    lost = asyncio.ensure_future(link.lost.wait())
    await asyncio.wait([asyncio.ensure_future(stop.wait()), lost],
                       return_when=asyncio.FIRST_COMPLETED)
    if lost.done():
        log.error("frontend process %d: the engine's connection ended; stopping",
                  os.getpid())
    await listener.stop()  # finishes the answers in progress
    return 1 if lost.done() and not stop.is_set() else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="naiad-frontend", description=__doc__)
    parser.add_argument("--engine", required=True, help="the engine's Unix socket")
    parser.add_argument("--parent", type=int, required=True, help="the engine's pid")
    parser.add_argument("--listen-fds", required=True,
                        help="inherited listening sockets, comma-separated")
    parser.add_argument("--limits", required=True, help="HTTPLimits fields as JSON")
    parser.add_argument("--log", required=True, help="the engine's log settings as JSON")
    args = parser.parse_args(argv)
    _end_with_parent(args.parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logs.configure(logs.LogSettings(**json.loads(args.log)))
    limits = HTTPLimits(**json.loads(args.limits))
    fds = [int(fd) for fd in args.listen_fds.split(",")]
    try:
        import uvloop
    except ImportError:
        return asyncio.run(serve(args.engine, fds, limits))
    return uvloop.run(serve(args.engine, fds, limits))


if __name__ == "__main__":
    sys.exit(main())
