"""An asyncio event loop running on a thread of its own, for tests that drive the server
(or a scheduler) in process the way the frontends do: from other threads."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: How long stopping the loop may take before the test moves on.
STOP_TIMEOUT_S = 30.0


@contextmanager
def loop_in_thread() -> Iterator[asyncio.AbstractEventLoop]:
    """A new event loop running forever on a daemon thread; stopped and closed after."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield loop
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(STOP_TIMEOUT_S)
        loop.close()
