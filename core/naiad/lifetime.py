"""The server process around its models: loading them once the listeners run, and ending
the process within a bounded time whatever a model does.

Exit status of ``naiad serve``:

- 0: stopped by SIGTERM or SIGINT, every request in flight finished, every model unloaded;
- 1: a runtime failure: a listener could not start (a port in use), a start-up model failed
  to load with ``--exit-on-error``, or the shutdown had to end requests still running after
  ``--exit-timeout-secs`` (they were answered UNAVAILABLE; instances stuck in a model's
  code were left behind and the process ended without them);
- 2: the command line or a repository cannot be used (a bad flag value, a missing or
  unreadable ``--model-repository``, a repository source that is not installed).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from naiad.server import InferenceServer

log = logging.getLogger("naiad")

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


async def start_models(server: InferenceServer, stop: asyncio.Event) -> int:
    """Load the start-up models (:meth:`InferenceServer.start`) while the listeners answer:
    live at once, ready once this is over. A stop requested meanwhile abandons the loads.
    Returns the exit status so far (1 when start-up failed, and ``stop`` is then set)."""
    loading = asyncio.ensure_future(server.start())
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({loading, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if not loading.done():
        log.info("stopping during start-up: the models still loading are abandoned")
        loading.cancel()
        with contextlib.suppress(BaseException):
            await loading
        return EXIT_OK
    stopping.cancel()
    problem = loading.exception()
    if problem is None:
        return EXIT_OK
    # One line, no traceback: --exit-on-error names the models and reasons, a repository
    # that cannot be listed names itself.
    log.error("start-up failed: %s", getattr(problem, "message", None) or problem)
    stop.set()
    return EXIT_FAILURE


class ShutdownWatchdog:
    """The last resort: a daemon thread that ends the process (exit status 1) when the
    shutdown has not finished ``limit_s`` seconds after it began, naming what still runs.
    The shutdown's own steps are bounded; this bounds everything else (a listener that
    does not close, a thread that holds the interpreter's exit)."""

    def __init__(self, server: InferenceServer, limit_s: float) -> None:
        self.server = server
        self.limit_s = limit_s
        self._over = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="naiad-shutdown-watchdog",
                                        daemon=True)

    def start(self) -> ShutdownWatchdog:
        self._thread.start()
        return self

    def cancel(self) -> None:
        self._over.set()

    def _watch(self) -> None:
        if self._over.wait(self.limit_s):
            return
        log.error("shutdown still not over after %.0f s (--exit-timeout-secs plus "
                  "--exit-grace-secs): exiting now; still running: %s", self.limit_s,
                  "; ".join(_busy(self.server)) or "no model instance")
        hard_exit(EXIT_FAILURE)


def exit_status(server: InferenceServer, code: int) -> int:
    """The process's exit status once the shutdown is over. When it had to end requests
    (:attr:`InferenceServer.forced`), the interpreter's own exit would wait for threads
    still inside a model's code, forever: the process ends here instead."""
    if not server.forced:
        return code
    stuck = _busy(server)
    if stuck:
        log.warning("exiting with %d instance(s) still running a model: %s", len(stuck),
                    "; ".join(stuck))
    hard_exit(code or EXIT_FAILURE)
    return code or EXIT_FAILURE  # not reached


def hard_exit(code: int) -> None:
    """Flush the log and standard streams, then end the process at once (``os._exit``):
    no thread is waited for."""
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(Exception):
            handler.flush()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _busy(server: InferenceServer) -> list[str]:
    try:
        return server.models.busy_instances()
    except RuntimeError:  # read from another thread while the loop changed the records
        return []
