"""A real Azurite blob service (the Azure Storage emulator, from the npm registry) on a free
loopback port, for the Azure source's tests: started and stopped by PID, reached with its
well-known development account through a connection string."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from azure.core.exceptions import AzureError
from azure.storage.blob import BlobServiceClient, ContainerClient, LinearRetry

from naiad.testing.server import free_port, stop_process

SECONDS = 1.0
# How long Azurite may take to answer its first call (it usually takes about a second).
READY_TIMEOUT_S = 30 * SECONDS
STOP_TIMEOUT_S = 20 * SECONDS
REPO_ROOT = Path(__file__).resolve().parents[3]
# Where scripts/test installs it (npm install --prefix .venv/azurite azurite).
INSTALLED = REPO_ROOT / ".venv" / "azurite" / "node_modules" / ".bin" / "azurite-blob"
INSTALL_HINT = ("npm install --prefix .venv/azurite azurite (scripts/test does it when npm "
                "is installed), or set NAIAD_AZURITE_BLOB to an azurite-blob executable")

# Azurite's development account and its published key (Microsoft's documentation of the
# emulator; they open nothing but a local emulator).
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/"
               "KBHBeksoGMGw==")


def azurite_binary() -> str:
    """The azurite-blob executable; skips the test (saying how to install it) when there is
    none."""
    for candidate in (os.environ.get("NAIAD_AZURITE_BLOB"), str(INSTALLED),
                      shutil.which("azurite-blob")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    pytest.skip(f"Azurite is not installed: {INSTALL_HINT}")


def connection_string(port: int, key: str = ACCOUNT_KEY, account: str = ACCOUNT) -> str:
    """A connection string for the emulator on ``port`` (path-style BlobEndpoint)."""
    return (f"DefaultEndpointsProtocol=http;AccountName={account};AccountKey={key};"
            f"BlobEndpoint=http://127.0.0.1:{port}/{account};")


class Azurite:
    """``azurite-blob`` on 127.0.0.1, its data in ``workdir``, telemetry off."""

    def __init__(self, workdir: Path) -> None:
        self.binary = azurite_binary()
        self.workdir = workdir
        self.port = free_port()
        self.log_path = workdir / f"azurite-{self.port}.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def connection_string(self) -> str:
        return connection_string(self.port)

    def service(self) -> BlobServiceClient:
        """The test's own client (to create containers and upload), no retries."""
        return BlobServiceClient.from_connection_string(
            self.connection_string, connection_timeout=5 * SECONDS, read_timeout=30 * SECONDS,
            retry_policy=LinearRetry(retry_total=0))

    def start(self) -> Azurite:
        """Start it and wait until it answers; skips the test, with its log, when it cannot
        start (no node, a broken install)."""
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [self.binary, "--blobHost", "127.0.0.1", "--blobPort", str(self.port),
                 "--location", str(data), "--skipApiVersionCheck", "--loose",
                 "--disableTelemetry"],
                stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + READY_TIMEOUT_S
        probe = self.service()
        try:
            while True:
                if self.process.poll() is not None:
                    pytest.skip(f"Azurite could not start (exit {self.process.returncode}): "
                                f"{self.log_path.read_text(errors='replace')[-2000:]}")
                try:
                    probe.get_service_properties()
                    return self
                except AzureError:
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    pytest.skip(f"Azurite did not answer within {READY_TIMEOUT_S} s: "
                                f"{self.log_path.read_text(errors='replace')[-2000:]}")
                time.sleep(0.1)
        finally:
            probe.close()

    def stop(self) -> None:
        """Stop this Azurite (SIGTERM to its PID, SIGKILL if it lingers)."""
        stop_process(self.process, STOP_TIMEOUT_S)

    @contextmanager
    def container(self) -> Iterator[ContainerClient]:
        """A new container with a unique name, deleted afterwards."""
        with self.service() as service:
            client = service.create_container(f"models-{uuid.uuid4().hex[:12]}")
            try:
                yield client
            finally:
                client.delete_container()


def upload_folder(container: ContainerClient, folder: Path, prefix: str) -> list[str]:
    """Every file under ``folder`` as a blob named ``prefix`` + its relative path (no
    ``__pycache__``); returns the relative paths."""
    uploaded = []
    for path in sorted(folder.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            relative = path.relative_to(folder).as_posix()
            container.upload_blob(prefix + relative, path.read_bytes(), overwrite=True)
            uploaded.append(relative)
    return uploaded
