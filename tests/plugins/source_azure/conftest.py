"""Fixtures of the Azure source tests: one real Azurite for the session (stopped by PID),
a fresh container per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from azure.storage.blob import ContainerClient
from azurite_server import Azurite


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    """Azurite's blob service on a free loopback port; skips when it is not installed or
    cannot start."""
    server = Azurite(tmp_path_factory.mktemp("azurite")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def container(azurite: Azurite) -> Iterator[ContainerClient]:
    """A new, empty container of the emulator's development account."""
    with azurite.container() as client:
        yield client
