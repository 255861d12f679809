"""Whether Redis is worth asking now, and the log lines about it being unreachable.

After a failed call (Redis down, refusing, slower than the timeout) the cache answers a miss
at once, without touching the network, for ``retry_interval``; then one call tries again.
So a Redis that stopped answering costs one timeout per interval, not one per request. The
warning is written when the trouble starts and then at most once per
:data:`LOG_INTERVAL_S`, with how many calls missed meanwhile, so a dead Redis cannot flood
the log; an info line says when it answers again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

SECONDS = 1.0

#: At most one "redis cache unreachable" warning per this many seconds.
LOG_INTERVAL_S = 30 * SECONDS


class Availability:
    """Thread-safe bookkeeping of Redis failures for one cache (``address`` names it)."""

    def __init__(self, address: str, retry_interval_s: float, log: logging.Logger, *,
                 log_interval_s: float = LOG_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.address = address
        self.retry_interval_s = retry_interval_s
        self.log_interval_s = log_interval_s
        self._log = log
        self._clock = clock
        self._lock = threading.Lock()
        self._down_since: float | None = None
        self._next_try = 0.0
        self._last_warning: float | None = None
        self._missed = 0  # calls answered as misses since the last warning
        self._warned = False  # this outage's warning was written

    @property
    def down(self) -> bool:
        """True from a failed call until the next call that succeeds."""
        return self._down_since is not None

    def should_try(self) -> bool:
        """False while Redis failed less than ``retry_interval`` ago (the call is a miss)."""
        if self._down_since is None:  # the usual case: no lock
            return True
        with self._lock:
            now = self._clock()
            if now < self._next_try:
                self._missed += 1
                return False
            # This caller probes; the others keep missing until it has answered.
            self._next_try = now + self.retry_interval_s
            return True

    def failed(self, operation: str, error: BaseException) -> None:
        """Record that ``operation`` (lookup, insert) failed with ``error``."""
        with self._lock:
            now = self._clock()
            if self._down_since is None:
                self._down_since = now
            self._next_try = now + self.retry_interval_s
            self._missed += 1
            if self._last_warning is not None and now - self._last_warning < self.log_interval_s:
                return
            missed, self._missed = self._missed, 0
            self._last_warning = now
            self._warned = True
        self._log.warning(
            "response cache: redis at %s did not answer a %s (%s: %s); requests run their "
            "models until it does (%d cache call(s) missed since the previous such line; the next "
            "line comes %.0f s after this one at the earliest)",
            self.address, operation, type(error).__name__, error, missed, self.log_interval_s)

    def succeeded(self) -> None:
        """Record a call that Redis answered; logs it if this outage was logged."""
        if self._down_since is None:
            return
        with self._lock:
            if self._down_since is None:
                return
            down_for = self._clock() - self._down_since
            warned, self._warned = self._warned, False
            self._down_since = None
        # A Redis that comes and goes gets at most these two lines per log interval: the
        # warning stays rate-limited across outages, and only a logged outage logs its end.
        if warned:
            self._log.info("response cache: redis at %s answers again (after %.1f s)",
                           self.address, down_for)
