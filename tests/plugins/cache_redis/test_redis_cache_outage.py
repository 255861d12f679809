"""A Redis that is down, refusing or slow: the cache misses and drops inserts with one
(rate-limited) log line, never raises, waits at most its timeout, and recovers by itself."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis_server import RedisServer

from naiad.plugins import PluginManager
from naiad_cache_redis import RedisResponseCache, parse_settings
from naiad_cache_redis.availability import LOG_INTERVAL_S, Availability

KEY = bytes(range(32))
VALUE = b"stored response"
LOGGER = "naiad.cache.redis"


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == LOGGER and r.levelno == logging.WARNING]


def infos(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == LOGGER and r.levelno == logging.INFO]


def cache_for(server: RedisServer, clock: FakeClock | None = None,
              **extra: str) -> RedisResponseCache:
    cache = RedisResponseCache(parse_settings(server.settings(**extra), {}),
                               clock=clock or FakeClock())
    cache.check()
    return cache


def test_redis_stopped_mid_run_then_restarted(redis_server: RedisServer,
                                              caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    # retry_interval=0: every call asks Redis, so each one below meets the outage itself.
    cache = cache_for(redis_server, retry_interval="0")
    try:
        cache.insert(KEY, VALUE)
        assert cache.lookup(KEY) == VALUE
        assert warnings(caplog) == []

        redis_server.stop()
        for _ in range(5):
            assert cache.lookup(KEY) is None  # a miss, not an exception
            cache.insert(KEY, VALUE)  # dropped, not an exception
        assert cache.availability.down
        [line] = warnings(caplog)  # one line for ten failed calls
        assert f"redis at 127.0.0.1:{redis_server.port} did not answer a lookup" in line
        assert "ConnectionError" in line
        assert "requests run their models until it does" in line

        redis_server.start()  # the same port; it kept nothing (no persistence)
        assert cache.lookup(KEY) is None  # answered: a true miss
        assert not cache.availability.down
        assert any(f"redis at 127.0.0.1:{redis_server.port} answers again" in line
                   for line in infos(caplog))
        cache.insert(KEY, VALUE)
        assert cache.lookup(KEY) == VALUE
        assert len(warnings(caplog)) == 1
    finally:
        cache.close()


def test_after_a_failure_redis_is_left_alone_for_the_retry_interval(
        redis_server: RedisServer, caplog: pytest.LogCaptureFixture) -> None:
    """A Redis that stopped answering costs one timeout per interval, not one per request."""
    clock = FakeClock()
    cache = cache_for(redis_server, clock, retry_interval="5000")
    try:
        cache.insert(KEY, VALUE)
        redis_server.stop()
        assert cache.lookup(KEY) is None  # tried, failed
        redis_server.start()
        redis_server.client().set(b"naiad:" + KEY, VALUE)
        # Redis is back, but the interval has not passed: the cache does not ask it.
        clock.now += 4.9
        assert cache.lookup(KEY) is None
        cache.insert(KEY[::-1], VALUE)
        assert redis_server.client().get(b"naiad:" + KEY[::-1]) is None
        clock.now += 0.2
        assert cache.lookup(KEY) == VALUE
        assert len(warnings(caplog)) == 1
    finally:
        cache.close()


def test_redis_down_at_start_up_does_not_stop_the_server(
        redis_server: RedisServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    settings = redis_server.settings(retry_interval="0")
    redis_server.stop()
    cache = PluginManager().cache("redis", settings)
    try:
        [line] = warnings(caplog)
        assert "did not answer a connection check at start-up" in line
        assert cache.lookup(KEY) is None
        redis_server.start()
        cache.insert(KEY, VALUE)
        assert cache.lookup(KEY) == VALUE
        assert any("answers again" in line for line in infos(caplog))
    finally:
        cache.close()


@pytest.fixture
def debug_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """redis-server that takes DEBUG SLEEP from loopback clients."""
    server = RedisServer(tmp_path, ["--enable-debug-command", "local"]).start()
    try:
        yield server
    finally:
        server.stop()


class Stall:
    """Redis busy with ``DEBUG SLEEP`` (sent by a connection of the test's own) for
    ``seconds``; on entry, Redis has stopped answering."""

    def __init__(self, server: RedisServer, seconds: int) -> None:
        self.server = server
        self.seconds = seconds
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._sleep)

    def _sleep(self) -> None:
        try:
            self.server.client(socket_timeout=None).execute_command("DEBUG", "SLEEP",
                                                                    self.seconds)
        except BaseException as exc:
            self.error = exc

    @property
    def sleeping(self) -> bool:
        return self.thread.is_alive()

    def __enter__(self) -> Stall:
        probe = self.server.client(socket_timeout=0.05)
        probe.ping()  # connected before the stall: the next pings only wait for replies
        self.thread.start()
        try:
            while self.sleeping:
                try:
                    probe.ping()
                except redis.TimeoutError:
                    return self
        finally:
            probe.close()
        raise AssertionError(f"DEBUG SLEEP ended before Redis stalled: {self.error!r}")

    def __exit__(self, *exc: object) -> None:
        self.thread.join()
        assert self.error is None, self.error


def test_slow_redis_is_a_miss_within_the_socket_timeout(
        debug_redis: RedisServer, caplog: pytest.LogCaptureFixture) -> None:
    cache = cache_for(debug_redis, socket_timeout="100", retry_interval="0")
    try:
        cache.insert(KEY, VALUE)
        assert cache.lookup(KEY) == VALUE  # a pooled connection is open and healthy
        with Stall(debug_redis, 2) as stall:
            # The entry is there, yet Redis cannot answer before the timeout: a miss, and
            # the lookup is back while Redis still sleeps.
            assert cache.lookup(KEY) is None
            assert stall.sleeping
        [line] = warnings(caplog)
        assert "did not answer a lookup (TimeoutError" in line
        assert cache.lookup(KEY) == VALUE  # recovered by itself
    finally:
        cache.close()


def test_a_full_pool_is_a_miss_after_wait_timeout(debug_redis: RedisServer) -> None:
    """pool_size=1: while Redis holds the one connection, another call waits wait_timeout
    for it and misses instead of queueing for as long as Redis stalls."""
    cache = cache_for(debug_redis, pool_size="1", socket_timeout="0", wait_timeout="100",
                      retry_interval="0")
    try:
        cache.insert(KEY, VALUE)
        pool = cache._client.connection_pool
        with Stall(debug_redis, 2) as stall:
            # This lookup takes the one connection and waits (socket_timeout=0: forever).
            holder = threading.Thread(target=cache.lookup, args=(KEY,))
            holder.start()
            while pool.pool.qsize() > 0:
                time.sleep(0.01)
            assert cache.lookup(KEY) is None
            assert stall.sleeping
            holder.join()
        assert cache.lookup(KEY) == VALUE
    finally:
        cache.close()


# --- the bookkeeping alone, on a clock the test moves ----------------------------------------


def test_warnings_are_rate_limited_and_count_the_misses(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    clock = FakeClock()
    availability = Availability("redis:6379", 1.0, logging.getLogger(LOGGER), clock=clock)
    error = ConnectionError("refused")
    availability.failed("lookup", error)
    for _ in range(99):
        clock.now += 0.1
        availability.failed("insert", error)
    assert len(warnings(caplog)) == 1
    clock.now = 1000.0 + LOG_INTERVAL_S
    availability.failed("lookup", error)
    first, second = warnings(caplog)
    assert "1 cache call(s) missed since the previous such line" in first
    assert "100 cache call(s) missed since the previous such line" in second

    availability.succeeded()
    [back] = infos(caplog)
    assert "redis at redis:6379 answers again (after 30.0 s)" in back
    # Down again soon after: still rate-limited, and its end is not logged either.
    clock.now += 1
    availability.failed("lookup", error)
    availability.succeeded()
    assert len(warnings(caplog)) == 2 and len(infos(caplog)) == 1


def test_one_caller_probes_per_retry_interval() -> None:
    clock = FakeClock()
    availability = Availability("redis:6379", 2.0, logging.getLogger(LOGGER), clock=clock)
    assert availability.should_try()
    availability.failed("lookup", TimeoutError("slow"))
    assert not availability.should_try()
    clock.now += 2.0
    assert availability.should_try()  # this caller probes...
    assert not availability.should_try()  # ...the others miss meanwhile
    availability.succeeded()
    assert availability.should_try() and availability.should_try()
