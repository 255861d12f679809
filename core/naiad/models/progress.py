"""What a model load tells the log while it runs.

A load that takes long (an environment built with pip, a repository downloaded, a model
whose ``initialize`` reads gigabytes, a long warmup) must not leave the log silent: each
such step, while it runs, logs that it still does every ``--model-load-progress-secs``
(``model 'X' version 1: initialize still running after 10 s``), and the load logs how long
it took once the version is ready.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

log = logging.getLogger("naiad.models")

SECONDS = 1.0
#: ``--model-load-progress-secs``: how often a step still running says so.
DEFAULT_PROGRESS_S = 10 * SECONDS


@contextlib.asynccontextmanager
async def progress(what: str, step: str, interval_s: float) -> AsyncIterator[None]:
    """Log ``<what>: <step> still running after N s`` every ``interval_s`` seconds while
    the body runs (never when ``interval_s`` is 0 or less)."""
    if interval_s <= 0:
        yield
        return
    started = time.monotonic()

    async def report() -> None:
        while True:
            await asyncio.sleep(interval_s)
            log.info("%s: %s still running after %.0f s", what, step,
                     time.monotonic() - started)

    reporter = asyncio.get_running_loop().create_task(report())
    try:
        yield
    finally:
        reporter.cancel()
