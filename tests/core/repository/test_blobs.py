"""naiad.repository.blobs: the content-addressed store behind remote repositories, on a
real folder: one download per (URI, path, tag), one blob per content, an index that
survives a restart, and eviction of what no mirror uses past the byte bound."""

from __future__ import annotations

import hashlib
import logging
import threading
from pathlib import Path

import pytest

from naiad.repository.blobs import BlobStore
from naiad.types import RepositoryFile

URI = "s3://bucket/models"


def writer(content: bytes, calls: list[str] | None = None):
    def download(partial: Path) -> None:
        if calls is not None:
            calls.append(partial.name)
        partial.write_bytes(content)
    return download


def test_a_file_is_downloaded_once_and_stored_by_its_digest(tmp_path):
    store = BlobStore(tmp_path, max_bytes=1 << 20)
    file = RepositoryFile("m/1/model.onnx", 5, "etag-1")
    calls: list[str] = []
    blob = store.fetch(URI, file, writer(b"hello", calls))
    assert blob.read_bytes() == b"hello"
    assert blob.name == hashlib.sha256(b"hello").hexdigest()
    assert store.fetch(URI, file, writer(b"other", calls)) == blob
    assert len(calls) == 1
    assert store.known(URI, file) == blob
    assert store.known(URI, RepositoryFile("m/1/model.onnx", 5, "etag-2")) is None
    assert not blob.stat().st_mode & 0o222  # read-only: mirrors hard-link to it


def test_the_same_content_under_two_names_is_one_blob(tmp_path):
    store = BlobStore(tmp_path, max_bytes=1 << 20)
    first = store.fetch(URI, RepositoryFile("a/1/w.bin", 3, "t"), writer(b"abc"))
    second = store.fetch(URI, RepositoryFile("b/1/w.bin", 3, "t"), writer(b"abc"))
    assert first == second
    assert len(list((tmp_path / "blobs").glob("*/*"))) == 1
    assert not list((tmp_path / "partial").iterdir())


def test_the_index_survives_a_restart(tmp_path):
    file = RepositoryFile("m/1/model.onnx", 4, "v1")
    blob = BlobStore(tmp_path, max_bytes=1 << 20).fetch(URI, file, writer(b"data"))
    again = BlobStore(tmp_path, max_bytes=1 << 20)
    assert again.known(URI, file) == blob
    (tmp_path / "index.json").write_text("not json")
    assert BlobStore(tmp_path, max_bytes=1 << 20).known(URI, file) is None


def test_a_failed_download_leaves_nothing_behind(tmp_path):
    store = BlobStore(tmp_path, max_bytes=1 << 20)
    file = RepositoryFile("m/1/model.onnx", 4, "v1")

    def broken(partial: Path) -> None:
        partial.write_bytes(b"ha")
        raise ConnectionError("reset")

    with pytest.raises(ConnectionError):
        store.fetch(URI, file, broken)
    assert store.known(URI, file) is None
    assert not list((tmp_path / "partial").iterdir())


def test_eviction_removes_unused_blobs_least_recently_used_first(tmp_path, caplog):
    store = BlobStore(tmp_path, max_bytes=10)
    old = store.fetch(URI, RepositoryFile("old", 6, "t"), writer(b"oldold"))
    new = store.fetch(URI, RepositoryFile("new", 6, "t"), writer(b"newnew"))
    used = store.fetch(URI, RepositoryFile("used", 4, "t"), writer(b"used"))
    store.evict(in_use=[used.name])  # 16 bytes > 10: the oldest idle blob goes
    assert not old.exists() and new.exists() and used.exists()
    assert store.known(URI, RepositoryFile("old", 6, "t")) is None  # forgotten too
    with caplog.at_level(logging.WARNING, logger="naiad.repository"):
        BlobStore(tmp_path, max_bytes=1).evict(in_use=[new.name, used.name])
    assert new.exists() and used.exists()  # in use: kept over the bound, with a warning
    assert "more than its bound" in caplog.text


def test_concurrent_fetches_of_one_content_store_one_blob(tmp_path):
    store = BlobStore(tmp_path, max_bytes=1 << 20)
    found: list[Path] = []
    threads = [threading.Thread(target=lambda i=i: found.append(store.fetch(
        URI, RepositoryFile(f"m{i}/1/w", 4, "t"), writer(b"same")))) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(found)) == 1 and found[0].read_bytes() == b"same"
