"""The content-addressed store behind remote repositories: every downloaded file once, by
the SHA-256 of its content, with a byte bound.

A remote file is known by its repository URI, path and tag (:class:`naiad.types.RepositoryFile`);
the store remembers which content each (URI, path, tag) had (``index.json``, rewritten after
every change), so neither a restart nor a poll downloads a file it has seen. Two files with
the same content (the same weights under two model names) are stored once. Mirrored model
folders hard-link to the blobs, so a blob costs its size once however many models use it.

Past ``max_bytes`` the blobs no mirrored model uses are removed, least recently used first;
those in use are kept even over the bound (with a warning): evicting them would only make
the next poll download them again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from naiad.types import RepositoryFile

log = logging.getLogger("naiad.repository")

#: Bytes read at a time while hashing a download.
HASH_CHUNK_BYTES = 1 << 20
_INDEX = "index.json"
_INDEX_FORMAT = 1


class BlobStore:
    """Blobs under ``root/blobs``, the (URI, path, tag) -> digest index beside them."""

    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self._blobs = root / "blobs"
        self._partial = root / "partial"
        self._blobs.mkdir(parents=True, exist_ok=True)
        self._partial.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._index: dict[str, str] = self._read_index()
        #: digest -> last time a mirror used it (monotonic seconds), for eviction order
        self._used: dict[str, float] = {}

    # --- the index ----------------------------------------------------------------------

    def _read_index(self) -> dict[str, str]:
        try:
            document = json.loads((self.root / _INDEX).read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(document, dict) or document.get("format") != _INDEX_FORMAT:
            return {}
        entries = document.get("files")
        return dict(entries) if isinstance(entries, dict) else {}

    def _write_index(self) -> None:
        """Under the lock: replace index.json atomically."""
        fd, name = tempfile.mkstemp(dir=self.root, prefix=".index-")
        with os.fdopen(fd, "w") as out:
            json.dump({"format": _INDEX_FORMAT, "files": self._index}, out)
        os.replace(name, self.root / _INDEX)

    @staticmethod
    def _key(uri: str, file: RepositoryFile) -> str:
        return f"{uri}\0{file.path}\0{file.size}\0{file.tag}"

    # --- blobs --------------------------------------------------------------------------

    def blob_path(self, digest: str) -> Path:
        return self._blobs / digest[:2] / digest

    def known(self, uri: str, file: RepositoryFile) -> Path | None:
        """The blob holding ``file`` when the store has it, else None."""
        with self._lock:
            digest = self._index.get(self._key(uri, file))
        if digest is None:
            return None
        path = self.blob_path(digest)
        return path if path.is_file() else None

    def fetch(self, uri: str, file: RepositoryFile, download: Callable[[Path], None]) -> Path:
        """The blob holding ``file``: the one the store has, or ``download(partial_path)``
        hashed and stored. Runs on download threads, several at once."""
        found = self.known(uri, file)
        if found is not None:
            return found
        fd, name = tempfile.mkstemp(dir=self._partial, prefix="download-")
        os.close(fd)
        partial = Path(name)
        try:
            download(partial)
            digest = _sha256(partial)
            blob = self.blob_path(digest)
            blob.parent.mkdir(exist_ok=True)
            if blob.exists():  # the same content under another name: keep one copy
                partial.unlink()
            else:
                os.chmod(partial, 0o444)  # mirrors hard-link to it: nobody writes through
                os.replace(partial, blob)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        with self._lock:
            self._index[self._key(uri, file)] = digest
            self._used[digest] = time.monotonic()
            self._write_index()
        return blob

    def evict(self, in_use: Iterable[str]) -> None:
        """Remove blobs no mirrored model uses until the store fits ``max_bytes``, least
        recently used first; forget index entries whose blob is gone."""
        keep = set(in_use)
        now = time.monotonic()
        with self._lock:
            for digest in keep:
                self._used[digest] = now
            blobs = {path.name: path for path in self._blobs.glob("*/*")}
            total = sum(_size(path) for path in blobs.values())
            if total > self.max_bytes:
                idle = sorted((d for d in blobs if d not in keep),
                              key=lambda d: self._used.get(d, 0.0))
                for digest in idle:
                    if total <= self.max_bytes:
                        break
                    total -= _size(blobs[digest])
                    blobs.pop(digest).unlink(missing_ok=True)
                    self._used.pop(digest, None)
                if total > self.max_bytes:
                    log.warning("the repository cache holds %d bytes, more than its bound of "
                                "%d (--repository-cache-max-bytes): the models in use need "
                                "them", total, self.max_bytes)
            present = set(blobs)
            stale = [key for key, digest in self._index.items() if digest not in present]
            for key in stale:
                del self._index[key]
            if stale:
                self._write_index()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
