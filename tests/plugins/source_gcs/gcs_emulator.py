"""A real Cloud Storage emulator (gcp-storage-emulator, from PyPI) on a free loopback port,
started and stopped by PID, and the helpers the tests upload a repository with."""

from __future__ import annotations

import http.client
import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from naiad.testing.server import free_port, stop_process

SECONDS = 1.0
# How long the emulator may take to answer its first request (it usually takes a second).
READY_TIMEOUT_S = 30 * SECONDS
STOP_TIMEOUT_S = 20 * SECONDS
EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "model_repository"


def emulator_installed() -> None:
    """Skips the test, saying how to install it, when gcp-storage-emulator is missing."""
    if importlib.util.find_spec("gcp_storage_emulator") is None:
        pytest.skip("gcp-storage-emulator is not installed (pip install gcp-storage-emulator; "
                    "scripts/test installs it from requirements-test.txt)")


class GcsEmulator:
    """``python -m gcp_storage_emulator start`` on 127.0.0.1, objects kept in memory."""

    def __init__(self, workdir: Path) -> None:
        emulator_installed()
        self.port = free_port()
        self.log_path = workdir / f"gcs-emulator-{self.port}.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> GcsEmulator:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "gcp_storage_emulator", "start", "--host", "127.0.0.1",
                 "--port", str(self.port), "--in-memory"],
                stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self._answers():
            if self.process.poll() is not None:
                raise RuntimeError(f"gcp-storage-emulator exited with "
                                   f"{self.process.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"gcp-storage-emulator did not answer within "
                                   f"{READY_TIMEOUT_S} s:\n{self.log()}")
            time.sleep(0.05)
        return self

    def _answers(self) -> bool:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            conn.request("GET", "/storage/v1/b?project=test")
            status = conn.getresponse().status
            conn.close()
        except OSError:
            return False
        return status == 200

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        """SIGTERM to its PID, SIGKILL if it lingers."""
        stop_process(self.process, STOP_TIMEOUT_S)


def uploader_client(endpoint: str) -> storage.Client:
    """The tests' own anonymous client of an emulator (or of the fake), to upload with."""
    return storage.Client(project="naiad-test", credentials=AnonymousCredentials(),
                          client_options={"api_endpoint": endpoint})


def upload_tree(bucket: storage.Bucket, folder: Path, prefix: str) -> list[str]:
    """Every file under ``folder`` uploaded as ``prefix/RELATIVE/PATH``; the names."""
    names = []
    for path in sorted(folder.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            name = f"{prefix}/{path.relative_to(folder).as_posix()}"
            bucket.blob(name).upload_from_filename(str(path))
            names.append(name)
    return names
