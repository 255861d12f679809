"""Fixtures of the GCS source tests: a real gcp-storage-emulator per module (stopped by PID),
the fake JSON API server where the emulator falls short, and a clean environment."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from fake_gcs import FakeGcsServer
from gcs_emulator import GcsEmulator

# Every variable the source reads: a test sets what it needs, never inherits them.
SOURCE_ENVS = (
    "CLOUD_STORAGE_EMULATOR_ENDPOINT", "STORAGE_EMULATOR_HOST", "NAIAD_GCS_ENDPOINT",
    "TRITON_CLOUD_CREDENTIAL_PATH", "GOOGLE_APPLICATION_CREDENTIALS",
    "NAIAD_GCS_CONNECT_TIMEOUT_S", "NAIAD_GCS_READ_TIMEOUT_S", "NAIAD_GCS_RETRY_DEADLINE_S",
    "NAIAD_GCS_LIST_PAGE_SIZE", "NAIAD_GCS_MAX_CONNECTIONS",
)
_bucket_numbers = itertools.count()


@pytest.fixture(autouse=True)
def clean_gcs_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in SOURCE_ENVS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def gcs_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GcsEmulator]:
    """gcp-storage-emulator on a free loopback port; skips when it is not installed."""
    emulator = GcsEmulator(tmp_path_factory.mktemp("gcs")).start()
    try:
        yield emulator
    finally:
        emulator.stop()


@pytest.fixture
def fake_gcs() -> Iterator[FakeGcsServer]:
    server = FakeGcsServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def bucket_name() -> str:
    """A bucket name no other test of the session uses."""
    return f"naiad-models-{next(_bucket_numbers)}"
