"""Fixtures and helpers shared by the core's unit tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from naiad.shm import SharedMemoryRegistry


@pytest.fixture
def registry() -> Iterator[SharedMemoryRegistry]:
    """An empty shared memory registry, emptied again after the test."""
    registry = SharedMemoryRegistry()
    try:
        yield registry
    finally:
        registry.unregister_all()
