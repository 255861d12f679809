"""The built-in repository source for plain paths and ``file://`` URIs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from naiad.errors import not_found
from naiad.hookspecs import hookimpl
from naiad.types import Repository, RepositoryFile, RepositorySource


class LocalRepository(Repository):
    """A repository that is a folder on this machine: the server reads it in place. Its
    listing and download serve what reads every repository alike (tools, tests)."""

    def __init__(self, path: Path) -> None:
        self.local_path = path

    def list_files(self, prefix: str = "") -> list[RepositoryFile]:
        root = self.local_path
        assert root is not None
        start = root / prefix if prefix else root
        found = []
        for folder, _, names in os.walk(start):
            for name in names:
                path = Path(folder) / name
                try:
                    stat = path.stat()
                except OSError:  # removed while listed
                    continue
                found.append(RepositoryFile(path.relative_to(root).as_posix(), stat.st_size,
                                            f"{stat.st_size}-{stat.st_mtime_ns}"))
        return sorted(found, key=lambda f: f.path)

    def download(self, file: RepositoryFile, destination: Path) -> None:
        assert self.local_path is not None
        shutil.copyfile(self.local_path / file.path, destination)


class LocalSource(RepositorySource):
    """Plain paths and ``file://`` URIs."""

    def open(self, uri: str) -> LocalRepository:
        path = Path(uri.removeprefix("file://")).expanduser().resolve()
        if not path.is_dir():
            raise not_found(f"model repository '{uri}' is not a directory")
        return LocalRepository(path)


@hookimpl(trylast=True)
def naiad_source(scheme: str) -> RepositorySource | None:
    return LocalSource() if scheme == "file" else None
