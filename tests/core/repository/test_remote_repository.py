"""A remote repository served through its mirror, with the server in process: start-up,
poll mode picking up a new version and a removed model, explicit loads fetching on demand,
and a repository that cannot be reached. The "remote" store is a folder behind a source
plugin that hides its local path (``mem://``), so the core mirrors it as it does a bucket;
the S3, GCS and Azure plugins' own tests do the same against their emulators."""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from loop_thread import loop_in_thread
from zoo import ADD_SUB_CONFIG, ADD_SUB_PY, write_model

import naiad
from naiad.errors import InferenceServerError, unavailable
from naiad.plugins import PluginManager
from naiad.repository.local import LocalRepository
from naiad.repository.mirror import MirrorSettings
from naiad.server import InferenceServer, ServerOptions
from naiad.types import InferenceRequest, Repository, RepositoryFile, RepositorySource, Tensor

WAIT_S = 30.0
POLL_S = 1


class FolderAsBucket(Repository):
    """A folder listed and downloaded as a remote store would be (no local_path)."""

    def __init__(self, folder: Path, reachable: threading.Event) -> None:
        self._folder = LocalRepository(folder)
        self.reachable = reachable

    def list_files(self, prefix: str = "") -> list[RepositoryFile]:
        if not self.reachable.is_set():
            raise unavailable("model repository 'mem://bucket' cannot be reached: "
                              "connection refused")
        return self._folder.list_files(prefix)

    def download(self, file: RepositoryFile, destination: Path) -> None:
        self._folder.download(file, destination)


class Source(RepositorySource):
    def __init__(self, folder: Path, reachable: threading.Event) -> None:
        self.folder, self.reachable = folder, reachable

    def open(self, uri: str) -> Repository:
        return FolderAsBucket(self.folder, self.reachable)


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    with loop_in_thread() as loop:
        yield loop


def serve(loop: asyncio.AbstractEventLoop, bucket: Path, cache: Path, mode: str,
          reachable: threading.Event, exit_on_error: bool = False) -> InferenceServer:
    source = Source(bucket, reachable)

    class Plugin:
        @naiad.hookimpl
        def naiad_source(self, scheme: str) -> RepositorySource | None:
            return source if scheme == "mem" else None

    plugins = PluginManager()
    plugins.register(Plugin())
    options = ServerOptions(model_repositories=["mem://bucket"], model_control_mode=mode,
                            repository_poll_secs=POLL_S, exit_on_error=exit_on_error,
                            repository_mirror=MirrorSettings(cache_dir=cache, settle_s=0.05))
    server = InferenceServer(options, plugins)
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(WAIT_S)
    return server


def stop(loop: asyncio.AbstractEventLoop, server: InferenceServer) -> None:
    asyncio.run_coroutine_threadsafe(server.shutdown(WAIT_S), loop).result(WAIT_S * 2)


def infer(server: InferenceServer, version: str = "") -> np.ndarray:
    a = np.arange(4, dtype=np.float32)
    request = InferenceRequest("add_sub", -1, {"INPUT0": Tensor("INPUT0", "FP32", (4,), a),
                                               "INPUT1": Tensor("INPUT1", "FP32", (4,), a)})
    response = server.infer(server.model("add_sub", version), request).result(WAIT_S)
    assert response.error is None, response.error
    return response.outputs[0].data


def eventually(check, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            check()
            return
        except (AssertionError, InferenceServerError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.fixture
def bucket(tmp_path: Path) -> Path:
    folder = tmp_path / "bucket"
    write_model(folder, "add_sub", ADD_SUB_CONFIG, ADD_SUB_PY)
    return folder


def test_poll_mode_follows_the_bucket(loop, bucket: Path, tmp_path: Path) -> None:
    reachable = threading.Event()
    reachable.set()
    server = serve(loop, bucket, tmp_path / "cache", "poll", reachable)
    try:
        np.testing.assert_array_equal(infer(server), np.arange(4) * 2)
        # a new version uploaded: served within a few polls (two polls must agree)
        write_model(bucket, "add_sub", None, ADD_SUB_PY, version=2)
        eventually(lambda: infer(server, "2"))
        # the store unreachable for a while: what was mirrored keeps serving
        reachable.clear()
        time.sleep(POLL_S * 2.5)
        infer(server)
        reachable.set()
        # the model removed from the bucket: unloaded
        shutil.rmtree(bucket / "add_sub")

        def gone() -> None:
            try:
                server.model("add_sub")
            except InferenceServerError as exc:
                assert "unknown model" in exc.message
            else:
                raise AssertionError("add_sub still serves")

        eventually(gone)
    finally:
        stop(loop, server)


def test_explicit_loads_fetch_on_demand(loop, bucket: Path, tmp_path: Path) -> None:
    reachable = threading.Event()
    reachable.set()
    shutil.rmtree(bucket / "add_sub")
    server = serve(loop, bucket, tmp_path / "cache", "explicit", reachable)
    try:
        write_model(bucket, "add_sub", ADD_SUB_CONFIG, ADD_SUB_PY)
        asyncio.run_coroutine_threadsafe(server.load_model("add_sub"), loop).result(WAIT_S)
        np.testing.assert_array_equal(infer(server), np.arange(4) * 2)
    finally:
        stop(loop, server)


def test_an_unreachable_bucket_fails_start_up_naming_it(loop, bucket: Path,
                                                        tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"mem://bucket.*connection refused"):
        serve(loop, bucket, tmp_path / "cache", "none", threading.Event(),
              exit_on_error=True)


def test_without_exit_on_error_the_server_starts_anyway(loop, bucket: Path,
                                                        tmp_path: Path) -> None:
    server = serve(loop, bucket, tmp_path / "cache", "none", threading.Event())
    try:
        assert server.live and not server.models.models
    finally:
        stop(loop, server)
