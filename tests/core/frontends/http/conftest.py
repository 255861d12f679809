"""Fixtures of the HTTP frontend's unit tests."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """A fresh event loop, not running: the tests drive the protocols through it."""
    loop = asyncio.new_event_loop()
    try:
        yield loop
    finally:
        loop.close()
