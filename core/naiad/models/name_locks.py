"""One asyncio lock per model name, kept only while someone holds or waits for it.

Loads and unloads of one name are serialised; different names run side by side. A lock
kept per name forever would let a client grow the server's memory with every name a load
request mentions, loaded or not (issue 32: 200 loads of different 1 MiB names kept
+199 MiB), so each name's lock goes as soon as its last user leaves."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class NameLocks:
    """Locks by name, each dropped when no task holds or awaits it (event-loop only)."""

    def __init__(self) -> None:
        # name -> (its lock, how many tasks hold or wait for it)
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, name: str) -> AsyncIterator[None]:
        """Hold ``name``'s lock for the body, waiting for any other holder first."""
        lock, users = self._locks.get(name, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[name] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[name]
            if users == 1:
                del self._locks[name]
            else:
                self._locks[name] = (lock, users - 1)

    def __len__(self) -> int:
        """How many names have a lock now (held or awaited)."""
        return len(self._locks)
