"""Fixtures and helpers shared by the core's unit tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from naiad.shm import SharedMemoryRegistry

# The test folders mirror the core's packages and are not packages themselves: pytest puts
# each test file's folder on sys.path as it imports the file. Helpers here at the top
# (grpc_helpers, wire_tap...) and test modules that others import (test_http_e2e's raw,
# test_unit_ensemble_plan's builders) are found whichever folder is collected first.
for _folder in sorted(p for p in Path(__file__).parent.rglob("*") if p.is_dir()
                      and p.name != "__pycache__"):
    if str(_folder) not in sys.path:
        sys.path.append(str(_folder))


@pytest.fixture
def registry() -> Iterator[SharedMemoryRegistry]:
    """An empty shared memory registry, emptied again after the test."""
    registry = SharedMemoryRegistry()
    try:
        yield registry
    finally:
        registry.unregister_all()
