"""An in-memory LRU of stored responses within a byte budget.

What counts against the budget is what an entry holds: its key and its stored bytes (the
serialized response the core hands over), so ``size`` bounds the memory the cache keeps,
less Python's small per-entry overhead. Lookups and inserts come from the HTTP event loop,
gRPC threads and instance threads at once: one lock guards the table, held for a dict
operation, never while a response is copied or decoded.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from naiad.errors import invalid_arg
from naiad.types import CacheUsage, ResponseCache

#: The settings ``--cache-config local,...`` takes.
SETTINGS = ("size",)


def physical_memory() -> int | None:
    """This machine's memory in bytes (None where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


@dataclass
class LocalCacheCounts:
    """What the cache did since it was made (read for metrics and tests)."""

    entries: int = 0
    bytes_used: int = 0
    lookups: int = 0
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    #: inserts dropped because one entry alone exceeds the budget
    too_large: int = 0
    #: nanoseconds spent in lookups (hits and misses) and in inserts, lock waits included
    lookup_ns: int = 0
    insertion_ns: int = 0


class LocalCache(ResponseCache):
    """Least recently used responses, at most ``size`` bytes of keys and values."""

    blocking = False

    def __init__(self, size: int) -> None:
        if size < 1:
            raise invalid_arg(f"response cache 'local': size must be at least 1 byte, "
                              f"got {size}")
        # The budget is filled lazily, so a size no machine has would be no bound at all
        # (Triton allocates it at once, and fails).
        memory = physical_memory()
        if memory is not None and size > memory:
            raise invalid_arg(f"response cache 'local': size={size} bytes is more than this "
                              f"machine's memory ({memory} bytes)")
        self.size = size
        self._entries: OrderedDict[bytes, bytes] = OrderedDict()
        self._lock = threading.Lock()
        self.counts = LocalCacheCounts()

    @classmethod
    def from_settings(cls, settings: dict[str, str]) -> LocalCache:
        """From ``--cache-config local,KEY=VALUE`` settings: ``size`` in bytes, required
        (as in Triton); any other key is refused."""
        unknown = sorted(set(settings) - set(SETTINGS))
        if unknown:
            raise invalid_arg(f"response cache 'local': unknown setting(s) "
                              f"{', '.join(unknown)}; it takes size=BYTES")
        raw = settings.get("size")
        if raw is None:
            raise invalid_arg("response cache 'local' needs size=BYTES "
                              "(--cache-config local,size=1048576)")
        try:
            size = int(raw)
        except ValueError:
            raise invalid_arg(f"response cache 'local': size must be a whole number of "
                              f"bytes, got '{raw}'") from None
        return cls(size)

    def lookup(self, key: bytes) -> bytes | None:
        start = time.perf_counter_ns()
        counts = self.counts
        with self._lock:
            counts.lookups += 1
            value = self._entries.get(key)
            if value is None:
                counts.misses += 1
            else:
                self._entries.move_to_end(key)
                counts.hits += 1
            counts.lookup_ns += time.perf_counter_ns() - start
        return value

    def insert(self, key: bytes, value: bytes) -> None:
        start = time.perf_counter_ns()
        cost = len(key) + len(value)
        counts = self.counts
        with self._lock:
            if cost > self.size:
                counts.too_large += 1
                return
            self._store(key, value, cost)
            counts.insertion_ns += time.perf_counter_ns() - start

    def _store(self, key: bytes, value: bytes, cost: int) -> None:
        """Under the lock: make room for ``cost`` bytes, then keep ``value``."""
        counts = self.counts
        old = self._entries.pop(key, None)
        if old is not None:  # two misses of one key ran at once: keep the newer
            counts.bytes_used -= len(key) + len(old)
        while counts.bytes_used + cost > self.size:
            evicted_key, evicted = self._entries.popitem(last=False)
            counts.bytes_used -= len(evicted_key) + len(evicted)
            counts.evictions += 1
        self._entries[key] = value
        counts.bytes_used += cost
        counts.entries = len(self._entries)

    def usage(self) -> CacheUsage:
        with self._lock:
            counts = self.counts
            return CacheUsage(entries=counts.entries, bytes_used=counts.bytes_used,
                              bytes_total=self.size, lookups=counts.lookups,
                              hits=counts.hits, misses=counts.misses,
                              evictions=counts.evictions, lookup_ns=counts.lookup_ns,
                              insertion_ns=counts.insertion_ns)

    def close(self) -> None:
        with self._lock:
            self._entries.clear()
            self.counts.bytes_used = self.counts.entries = 0
