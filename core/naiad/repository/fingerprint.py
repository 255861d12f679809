"""Cheap change detection for ``--model-control-mode=poll``.

A model folder's fingerprint is the path, size and modification time of everything in it,
grouped by top-level entry (``config.pbtxt``, ``1/``, ``labels.txt``, ...). No file is read,
so a scan of a large repository costs one ``stat`` per file. Two fingerprints differ when a
file was added, removed, resized or rewritten; grouping by top-level entry also tells which
version folders a change touched.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from naiad.config.parse import CONFIG_FILENAME, CUSTOM_CONFIG_FOLDER
from naiad.repository.scan import model_folders

# (path relative to the model folder, size in bytes, mtime in ns); directories carry
# size -1 and mtime 0: what they hold is listed anyway, and their own mtime changes
# whenever Python writes bytecode into them.
Entry = tuple[str, int, int]

# Python writes __pycache__ next to an imported model.py; counting it would make every load
# look like a change and reload the model at the next poll, forever. Names starting with a
# dot (editor swap files, .git) are not part of a model either.
_IGNORED_NAMES = frozenset({"__pycache__"})
# Deeper than this is a symbolic link that points at one of its own parents.
_MAX_DEPTH = 32
# The files a model's configuration is read from: a change to them is judged by comparing
# the configurations themselves, not the files.
_CONFIG_ENTRIES = frozenset({CONFIG_FILENAME, CUSTOM_CONFIG_FOLDER})


@dataclass(frozen=True)
class ModelFingerprint:
    """What a model folder held when it was scanned: top-level name -> its entries."""

    parts: dict[str, tuple[Entry, ...]] = field(default_factory=dict)

    def same_version_files(self, other: ModelFingerprint, version: int) -> bool:
        """Whether version ``version`` would load from the same files in both: its folder
        and every file shared by all versions (the configuration files aside) unchanged."""
        if self.parts.get(str(version)) != other.parts.get(str(version)):
            return False
        return self._shared() == other._shared()

    def _shared(self) -> dict[str, tuple[Entry, ...]]:
        return {name: entries for name, entries in self.parts.items()
                if not _is_version_name(name) and name not in _CONFIG_ENTRIES}


@dataclass(frozen=True)
class RepositoryChanges:
    """What differs between two scans of the repositories."""

    added: list[str]
    removed: list[str]
    modified: list[str]

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.modified)


def model_fingerprint(model_dir: Path) -> ModelFingerprint:
    """The fingerprint of one model folder (empty when the folder vanished meanwhile)."""
    parts: dict[str, tuple[Entry, ...]] = {}
    try:
        top = sorted(os.scandir(model_dir), key=lambda e: e.name)
    except OSError:
        return ModelFingerprint()
    for entry in top:
        if _ignored(entry.name):
            continue
        entries: list[Entry] = []
        _collect(entry, entry.name, entries, 0)
        parts[entry.name] = tuple(entries)
    return ModelFingerprint(parts)


def scan_repositories(repositories: list[Path]) -> dict[str, ModelFingerprint]:
    """Model name -> fingerprint over every repository. A name found in more than one
    repository is left out: it cannot load (the model manager reports why)."""
    found: dict[str, Path] = {}
    duplicates: set[str] = set()
    for repository in repositories:
        try:
            folders = model_folders(repository)
        except OSError:
            continue  # a repository that is gone for now holds no models
        for name, path in folders.items():
            if name in found:
                duplicates.add(name)
            found[name] = path
    return {name: model_fingerprint(path) for name, path in sorted(found.items())
            if name not in duplicates}


def compare(before: dict[str, ModelFingerprint], after: dict[str, ModelFingerprint]
            ) -> RepositoryChanges:
    """The models added, removed and modified between two scans, each list sorted."""
    return RepositoryChanges(
        added=sorted(set(after) - set(before)),
        removed=sorted(set(before) - set(after)),
        modified=sorted(name for name in set(before) & set(after)
                        if before[name] != after[name]),
    )


def _collect(entry: os.DirEntry[str], relative: str, out: list[Entry], depth: int) -> None:
    try:
        if entry.is_dir():
            out.append((relative, -1, 0))
            if depth >= _MAX_DEPTH:
                return
            children = sorted(os.scandir(entry.path), key=lambda e: e.name)
            for child in children:
                if not _ignored(child.name):
                    _collect(child, f"{relative}/{child.name}", out, depth + 1)
            return
        # stat() follows symbolic links: replacing the file a link points to is a change.
        info = entry.stat()
    except OSError:
        # Removed while we looked (or unreadable): recorded as such, so that it differs
        # from both the state before and the state after the removal completes.
        out.append((relative, -2, 0))
        return
    out.append((relative, info.st_size, info.st_mtime_ns))


def _ignored(name: str) -> bool:
    return name.startswith(".") or name in _IGNORED_NAMES


def _is_version_name(name: str) -> bool:
    return name.isascii() and name.isdigit()
