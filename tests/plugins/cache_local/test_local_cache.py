"""naiad-cache-local: the LRU within its byte budget, its settings, and its thread safety."""

from __future__ import annotations

import threading

import pytest

from naiad.errors import InferenceServerError
from naiad.plugins import PluginManager
from naiad_cache_local import LocalCache

KEY_BYTES = 32


def key(n: int) -> bytes:
    return n.to_bytes(KEY_BYTES, "little")


def test_lookup_gives_back_what_was_inserted() -> None:
    cache = LocalCache(1000)
    assert cache.lookup(key(1)) is None
    cache.insert(key(1), b"one")
    assert cache.lookup(key(1)) == b"one"
    assert (cache.counts.lookups, cache.counts.hits, cache.counts.misses) == (2, 1, 1)


def test_the_budget_counts_keys_and_values() -> None:
    cache = LocalCache(2 * (KEY_BYTES + 100))
    cache.insert(key(1), b"a" * 100)
    cache.insert(key(2), b"b" * 100)
    assert cache.counts.bytes_used == 2 * (KEY_BYTES + 100)
    assert cache.counts.evictions == 0
    cache.insert(key(3), b"c")  # one byte more than the budget holds: the oldest goes
    assert cache.lookup(key(1)) is None
    assert cache.lookup(key(2)) is not None and cache.lookup(key(3)) is not None
    assert cache.counts.evictions == 1


def test_the_least_recently_used_entry_is_evicted_first() -> None:
    cache = LocalCache(2 * (KEY_BYTES + 10))
    cache.insert(key(1), b"1" * 10)
    cache.insert(key(2), b"2" * 10)
    assert cache.lookup(key(1))  # 1 is now the most recently used
    cache.insert(key(3), b"3" * 10)
    assert cache.lookup(key(2)) is None
    assert cache.lookup(key(1)) and cache.lookup(key(3))


def test_an_entry_larger_than_the_budget_is_not_stored_and_evicts_nothing() -> None:
    cache = LocalCache(KEY_BYTES + 10)
    cache.insert(key(1), b"x" * 10)
    cache.insert(key(2), b"y" * 11)
    assert cache.lookup(key(2)) is None and cache.lookup(key(1)) == b"x" * 10
    assert cache.counts.too_large == 1 and cache.counts.evictions == 0


def test_inserting_a_key_again_replaces_it_without_counting_it_twice() -> None:
    cache = LocalCache(1000)
    cache.insert(key(1), b"old")
    cache.insert(key(1), b"newer")
    assert cache.lookup(key(1)) == b"newer"
    assert cache.counts.bytes_used == KEY_BYTES + 5 and cache.counts.entries == 1


@pytest.mark.parametrize(("settings", "message"), [
    ({}, "needs size=BYTES"),
    ({"size": "abc"}, "whole number of bytes, got 'abc'"),
    ({"size": "0"}, "at least 1 byte"),
    ({"size": "-5"}, "at least 1 byte"),
    ({"size": "10", "bogus": "1"}, "unknown setting\\(s\\) bogus"),
])
def test_bad_settings_are_refused_naming_them(settings: dict, message: str) -> None:
    with pytest.raises(InferenceServerError, match=message):
        LocalCache.from_settings(settings)


def test_usage_reports_what_the_metrics_port_shows() -> None:
    cache = LocalCache(1000)
    cache.insert(key(1), b"x" * 68)
    cache.lookup(key(1))
    cache.lookup(key(2))
    usage = cache.usage()
    assert (usage.entries, usage.bytes_used, usage.bytes_total) == (1, 100, 1000)
    assert (usage.lookups, usage.hits, usage.misses, usage.evictions) == (2, 1, 1, 0)


def test_the_entry_point_gives_the_cache_by_name() -> None:
    cache = PluginManager().cache("local", {"size": "4096"})
    assert isinstance(cache, LocalCache) and cache.size == 4096 and not cache.blocking


def test_threads_at_once_keep_the_books_straight() -> None:
    budget = 50 * (KEY_BYTES + 64)
    cache = LocalCache(budget)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            for i in range(2000):
                n = (seed * 7919 + i) % 200
                if cache.lookup(key(n)) is None:
                    cache.insert(key(n), bytes([n % 256]) * 64)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    counts = cache.counts
    assert counts.bytes_used <= budget
    assert counts.bytes_used == counts.entries * (KEY_BYTES + 64)
    assert counts.hits + counts.misses == counts.lookups == 8 * 2000
    for n in range(200):  # whatever is kept is what was stored under that key
        value = cache.lookup(key(n))
        assert value is None or value == bytes([n % 256]) * 64
