"""The built-in repository source for plain paths and ``file://`` URIs."""

from __future__ import annotations

from pathlib import Path

from naiad.errors import not_found
from naiad.hookspecs import hookimpl
from naiad.types import RepositorySource


class LocalSource(RepositorySource):
    """A repository that is already a local folder."""

    def localize(self, uri: str) -> Path:
        path = Path(uri.removeprefix("file://")).expanduser().resolve()
        if not path.is_dir():
            raise not_found(f"model repository '{uri}' is not a directory")
        return path


@hookimpl(trylast=True)
def naiad_source(scheme: str) -> RepositorySource | None:
    return LocalSource() if scheme == "file" else None
