"""A remote repository as a local folder the server reads: listed, downloaded into the
content-addressed store (:mod:`naiad.repository.blobs`), and laid out as model folders of
hard links.

:meth:`RepositoryMirror.sync` runs at start-up, at every poll and before an explicit load,
on a worker thread. It lists the repository (or the models asked for), gives each model a
token (a digest of its files' paths, sizes and tags), and brings the folder of every model
whose token changed up to date:

- **A model still being uploaded is not loaded.** A changed model is laid out only once two
  listings agree on it: at start-up and for an explicit load, a second listing
  ``settle_s`` later; in poll mode, the previous poll's listing. Until then the folder keeps
  what it had, so a poll never loads a half-uploaded version.
- Downloads run ``download_threads`` at a time and fetch only what the store has not seen.
- A model folder is replaced whole (built beside it, then renamed into place), so a scan
  never sees half of one; a model gone from the repository loses its folder (poll mode then
  unloads it).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from naiad.errors import InferenceServerError, unavailable
from naiad.repository.blobs import BlobStore
from naiad.types import Repository, RepositoryFile

log = logging.getLogger("naiad.repository")


@dataclass
class ModelListing:
    """One model's files in one listing, and their token."""

    files: list[tuple[str, RepositoryFile]] = field(default_factory=list)  # (path in the
    # model folder, the file)

    @property
    def token(self) -> str:
        digest = hashlib.sha256()
        for inner, file in sorted(self.files, key=lambda item: item[0]):
            digest.update(f"{inner}\0{file.size}\0{file.tag}\n".encode())
        return digest.hexdigest()


class RepositoryMirror:
    """``repository`` (opened from ``uri``) mirrored into ``folder``."""

    def __init__(self, uri: str, repository: Repository, store: BlobStore, folder: Path,
                 download_threads: int) -> None:
        self.uri = uri
        self.repository = repository
        self.store = store
        self.folder = folder
        self.download_threads = max(1, download_threads)
        folder.mkdir(parents=True, exist_ok=True)
        #: model -> (token, digests of its blobs) of what its folder holds now
        self._mirrored: dict[str, tuple[str, set[str]]] = {}
        #: model -> its token in the previous listing (poll mode's second look)
        self._previous: dict[str, str] = {}
        #: model -> why its latest version could not be mirrored (cleared once it is)
        self.failures: dict[str, str] = {}

    def sync(self, models: Iterable[str] | None = None, settle_s: float = 0.0) -> None:
        """Bring the folder up to date with the repository (every model, or ``models``).
        ``settle_s`` > 0: list a second time that much later and lay out the models both
        listings agree on; 0: lay out those the previous call listed alike. Raises
        :class:`InferenceServerError` when the repository cannot be listed."""
        wanted = None if models is None else sorted(set(models))
        listing = self._checked_list(wanted)
        changed = [m for m, found in listing.items() if found.token != self._token_of(m)]
        if changed and settle_s > 0:
            time.sleep(settle_s)
            again = self._checked_list(wanted)
            settled = {m for m in changed if m in again and again[m].token == listing[m].token}
            listing.update({m: again[m] for m in settled})
        else:
            settled = {m for m in changed if self._previous.get(m) == listing[m].token}
        self._previous.update({m: found.token for m, found in listing.items()})
        for model in changed:
            if model in settled:
                self._lay_out(model, listing[model])
            else:
                log.info("model '%s' in %s is changing (its files differ between two "
                         "listings): waiting for it to settle", model, self.uri)
        gone = [m for m in self._on_disk() if m not in listing
                and (wanted is None or m in wanted)]
        for model in gone:
            self._remove(model)
        self.store.evict(self.in_use())

    def in_use(self) -> set[str]:
        """The digests the mirrored model folders link to."""
        return {digest for _, digests in self._mirrored.values() for digest in digests}

    # --- listing ------------------------------------------------------------------------

    def _checked_list(self, models: list[str] | None) -> dict[str, ModelListing]:
        try:
            return self._list(models)
        except InferenceServerError:
            raise
        except Exception as exc:  # a plugin's own error: one line, naming the URI
            raise _unreachable(self.uri, exc) from exc

    def _list(self, models: list[str] | None) -> dict[str, ModelListing]:
        files: list[RepositoryFile] = []
        if models is None:
            files = self.repository.list_files()
        else:
            for model in models:
                files.extend(self.repository.list_files(f"{model}/"))
        grouped: dict[str, ModelListing] = {}
        for file in files:
            parts = _safe_parts(file.path)
            if parts is None:
                log.warning("skipping '%s' in %s: not a safe relative path", file.path,
                            self.uri)
                continue
            if len(parts) < 2 or parts[0].startswith("."):
                continue  # a file at the root, or a hidden folder: not a model
            grouped.setdefault(parts[0], ModelListing()).files.append(
                ("/".join(parts[1:]), file))
        if models is not None:
            grouped = {m: found for m, found in grouped.items() if m in models}
        return grouped

    def _token_of(self, model: str) -> str | None:
        mirrored = self._mirrored.get(model)
        return None if mirrored is None else mirrored[0]

    def _on_disk(self) -> list[str]:
        return [entry.name for entry in self.folder.iterdir()
                if entry.is_dir() and not entry.name.startswith(".")]

    # --- laying out ---------------------------------------------------------------------

    def _lay_out(self, model: str, listing: ModelListing) -> None:
        """Download what the store lacks, build the model's folder beside the old one and
        rename it into place. A failure leaves the old folder and is remembered."""
        try:
            with ThreadPoolExecutor(self.download_threads,
                                    thread_name_prefix="naiad-download") as pool:
                blobs = list(pool.map(lambda item: self._blob(item[1]), listing.files))
        except InferenceServerError as exc:
            self._failed(model, exc.message)
            return
        except OSError as exc:
            self._failed(model, f"{type(exc).__name__}: {exc}")
            return
        staging = Path(tempfile.mkdtemp(dir=self.folder, prefix=f".staging-{model}-"))
        try:
            for (inner, _), blob in zip(listing.files, blobs, strict=True):
                target = staging / inner
                target.parent.mkdir(parents=True, exist_ok=True)
                _link_or_copy(blob, target)
            self._replace(model, staging)
        except OSError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            self._failed(model, f"{type(exc).__name__}: {exc}")
            return
        self._mirrored[model] = (listing.token, {blob.name for blob in blobs})
        self.failures.pop(model, None)
        log.info("mirrored model '%s' from %s (%d files)", model, self.uri,
                 len(listing.files))

    def _blob(self, file: RepositoryFile) -> Path:
        return self.store.fetch(self.uri, file,
                                lambda partial: self.repository.download(file, partial))

    def _replace(self, model: str, staging: Path) -> None:
        current = self.folder / model
        if current.exists():
            retired = Path(tempfile.mkdtemp(dir=self.folder, prefix=f".retired-{model}-"))
            os.replace(current, retired / model)
            os.replace(staging, current)
            shutil.rmtree(retired, ignore_errors=True)
        else:
            os.replace(staging, current)

    def _remove(self, model: str) -> None:
        retired = Path(tempfile.mkdtemp(dir=self.folder, prefix=f".retired-{model}-"))
        os.replace(self.folder / model, retired / model)
        shutil.rmtree(retired, ignore_errors=True)
        self._mirrored.pop(model, None)
        self._previous.pop(model, None)
        log.info("model '%s' is gone from %s: its mirrored folder is removed", model,
                 self.uri)

    def _failed(self, model: str, reason: str) -> None:
        message = f"model '{model}' could not be fetched from {self.uri}: {reason}"
        self.failures[model] = message
        log.error("%s", message)


def _safe_parts(path: str) -> list[str] | None:
    """The "/"-separated parts of a listed path; None when one could leave the folder or
    is no file name."""
    if not path or path.startswith("/") or "\\" in path or "\0" in path:
        return None
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return None
    return parts


def _link_or_copy(blob: Path, target: Path) -> None:
    try:
        os.link(blob, target)
    except OSError:  # another file system, or one without hard links
        shutil.copyfile(blob, target)


def _unreachable(uri: str, exc: BaseException) -> InferenceServerError:
    """A listing that failed with something other than naiad's own error."""
    return unavailable(f"model repository '{uri}' cannot be listed: "
                       f"{type(exc).__name__}: {exc}")


@dataclass
class MirrorSettings:
    """Where and how remote repositories are mirrored (the ``--repository-*`` flags)."""

    #: the folder holding the content-addressed store and the mirrored model folders
    cache_dir: Path = field(default_factory=lambda: default_cache_dir())
    #: the store's bound in bytes (blobs no mirrored model uses are evicted past it)
    max_bytes: int = 10 * 1024**3
    #: files downloaded at the same time, per repository
    download_threads: int = 8
    #: seconds between the two listings that must agree before a changed model is laid out
    #: (start-up and explicit loads; poll mode compares with the previous poll)
    settle_s: float = 1.0


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/naiad/repositories``, else ``~/.cache/naiad/repositories``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "naiad" / "repositories"


def local_folders(uris: list[str], repositories: list[Repository],
                  settings: MirrorSettings) -> tuple[list[Path], list[RepositoryMirror]]:
    """The folder the server reads for each repository (its own for a local one, a mirror
    for a remote one), and the mirrors to keep in sync."""
    folders: list[Path] = []
    mirrors: list[RepositoryMirror] = []
    store: BlobStore | None = None
    for uri, repository in zip(uris, repositories, strict=True):
        if repository.local_path is not None:
            folders.append(repository.local_path)
            continue
        if store is None:
            store = BlobStore(settings.cache_dir, settings.max_bytes)
        name = hashlib.sha256(uri.encode()).hexdigest()[:16]
        mirror = RepositoryMirror(uri, repository, store,
                                  settings.cache_dir / "mirrors" / name,
                                  settings.download_threads)
        folders.append(mirror.folder)
        mirrors.append(mirror)
    return folders, mirrors
