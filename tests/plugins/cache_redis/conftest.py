"""Fixtures of the redis cache tests: a real redis-server per test, stopped by PID."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from redis_server import RedisServer


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """redis-server on a free loopback port, without a password; skips without redis-server."""
    server = RedisServer(tmp_path).start()
    try:
        yield server
    finally:
        server.stop()
