"""One ``as://`` repository: its blobs listed (every page) and downloaded one at a time."""

from __future__ import annotations

import logging
from pathlib import Path

from azure.core import MatchConditions
from azure.core.exceptions import AzureError

from naiad.errors import InferenceServerError, unavailable
from naiad.types import Repository, RepositoryFile
from naiad_source_azure.credentials import Connection
from naiad_source_azure.errors import storage_error
from naiad_source_azure.settings import AzureSettings
from naiad_source_azure.uri import AzureUri

log = logging.getLogger("naiad.source.azure")

# Accounts with a hierarchical namespace (Data Lake Storage Gen2) list each directory as an
# empty blob carrying this metadata, without a trailing "/".
FOLDER_METADATA = "hdi_isfolder"


def safe_relative_path(name: str) -> str | None:
    """``name`` when it is a relative "/"-separated path with no empty, "." or ".."
    segment; None otherwise."""
    if not name or name.startswith("/"):
        return None
    if any(segment in ("", ".", "..") for segment in name.split("/")):
        return None
    return name


class AzureRepository(Repository):
    """The blobs of one container under one prefix. The service client is thread-safe: the
    core lists and downloads from several threads at once."""

    local_path = None

    def __init__(self, uri: AzureUri, connection: Connection, settings: AzureSettings) -> None:
        self.uri = uri
        self.connection = connection
        self.settings = settings
        self._service = connection.client(settings)
        self._container = self._service.get_container_client(uri.container)

    def _error(self, exc: AzureError, what: str) -> InferenceServerError:
        return storage_error(exc, self.uri.uri, self.connection.endpoint, what)

    def list_files(self, prefix: str = "") -> list[RepositoryFile]:
        """Every blob under the root (or under ``prefix`` below it), every page of the
        listing; folder markers are left out, and so are names that are not safe relative
        paths (with a warning). The tag is the blob's ETag."""
        start = self.uri.root + prefix
        found = []
        try:
            pages = self._container.list_blobs(name_starts_with=start or None,
                                               include=["metadata"],
                                               results_per_page=self.settings.list_page_size)
            for blob in pages:
                name: str = blob.name
                if name.endswith("/") or (blob.metadata or {}).get(FOLDER_METADATA) == "true":
                    continue  # a folder marker: folders are not listed
                path = safe_relative_path(name[len(self.uri.root):])
                if path is None:
                    log.warning("skipping blob '%s' of %s: its name is not a safe relative "
                                "path (an empty, '.' or '..' segment, or a leading '/')",
                                name, self.uri.uri)
                    continue
                found.append(RepositoryFile(path=path, size=int(blob.size), tag=str(blob.etag)))
        except AzureError as exc:
            raise self._error(exc, "listing") from None
        return sorted(found, key=lambda file: file.path)

    def download(self, file: RepositoryFile, destination: Path) -> None:
        """``file``'s blob into ``destination``, only while its ETag is still ``file.tag``
        (a blob overwritten since it was listed fails: the next listing has its new tag)."""
        what = f"downloading '{file.path}'"
        try:
            stream = self._container.download_blob(
                self.uri.root + file.path, etag=file.tag,
                match_condition=MatchConditions.IfNotModified, max_concurrency=1)
            with open(destination, "wb") as out:
                written = stream.readinto(out)
        except AzureError as exc:
            raise self._error(exc, what) from None
        if written != file.size:
            raise unavailable(f"Azure Storage repository '{self.uri.uri}': {what}: got "
                              f"{written} bytes, the listing said {file.size}")

    def close(self) -> None:
        self._service.close()
