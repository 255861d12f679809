"""A model repository in a Google Cloud Storage bucket: listed and downloaded with
google-cloud-storage; the core mirrors it into its local cache (see naiad.types.Repository)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import requests.adapters
from google.api_core import exceptions as api_exceptions
from google.auth.credentials import AnonymousCredentials
from google.auth.transport.requests import AuthorizedSession
from google.cloud import storage
from google.cloud.storage.retry import DEFAULT_RETRY

from naiad.errors import InferenceServerError, invalid_arg, not_found
from naiad.types import Repository, RepositoryFile, RepositorySource
from naiad_source_gcs.credentials import ChosenCredentials, choose_credentials
from naiad_source_gcs.errors import failure, is_client_failure
from naiad_source_gcs.settings import (
    RETRY_INITIAL_DELAY_S,
    RETRY_MAX_DELAY_S,
    GcsSettings,
    settings_from_environ,
)
from naiad_source_gcs.uri import GcsLocation, is_safe_relative, parse_uri

log = logging.getLogger("naiad.source.gcs")

# Only what a listing needs from each object: less to send and to parse for a large bucket.
_LIST_FIELDS = "items(name,size,generation),nextPageToken"


class GcsRepository(Repository):
    """The objects under ``gs://bucket/prefix/``. Each file's tag is its object generation,
    which Cloud Storage changes whenever the object's content is written; a download asks
    for that generation, so what the core stores under a tag is that tag's content."""

    local_path = None

    def __init__(self, uri: str, location: GcsLocation, settings: GcsSettings,
                 credentials: ChosenCredentials) -> None:
        self.uri = uri
        self.location = location
        self.settings = settings
        self.credentials = credentials
        # Anonymous credentials cannot be refreshed: a 401 is then the answer, not a reason
        # to ask for a new token.
        if isinstance(credentials.credentials, AnonymousCredentials):
            self._session = AuthorizedSession(credentials.credentials, refresh_status_codes=())
        else:
            self._session = AuthorizedSession(credentials.credentials)
        adapter = requests.adapters.HTTPAdapter(pool_connections=1,
                                                pool_maxsize=settings.max_connections)
        self._session.mount("https://", adapter)
        self._session.mount("http://", adapter)
        self._client = storage.Client(
            project=None, credentials=credentials.credentials, _http=self._session,
            client_options={"api_endpoint": settings.endpoint.url}
            if settings.endpoint.url else None)
        self._bucket = self._client.bucket(location.bucket)
        self._retry = (DEFAULT_RETRY.with_delay(initial=RETRY_INITIAL_DELAY_S,
                                                maximum=RETRY_MAX_DELAY_S)
                       .with_timeout(settings.retry_deadline_s)
                       if settings.retry_deadline_s > 0 else None)
        # Object names refused once are not logged again at every poll.
        self._refused: set[str] = set()
        self._refused_lock = threading.Lock()

    def list_files(self, prefix: str = "") -> list[RepositoryFile]:
        if prefix and not is_safe_relative(prefix.rstrip("/")):
            raise invalid_arg(f"model repository '{self.uri}': cannot list '{prefix}': not a "
                              f"relative path")
        root = self.location.prefix
        try:
            blobs = self._client.list_blobs(
                self._bucket, prefix=root + prefix, page_size=self.settings.list_page_size,
                fields=_LIST_FIELDS, timeout=self.settings.timeout, retry=self._retry)
            found = [self._file(blob.name, blob.size, blob.generation) for blob in blobs]
        except api_exceptions.NotFound:
            raise not_found(f"model repository '{self.uri}': the bucket "
                            f"'{self.location.bucket}' does not exist") from None
        except Exception as exc:
            if is_client_failure(exc):
                raise self._failure("listing", exc) from None
            raise
        return sorted((file for file in found if file is not None), key=lambda f: f.path)

    def _file(self, name: str, size: int | None, generation: int | None) -> RepositoryFile | None:
        """The listed object as a file of the repository; None for a folder marker (a name
        ending in "/") and for a name that is not a safe relative path (logged once)."""
        if name.endswith("/"):
            return None
        relative = name[len(self.location.prefix):]
        if not name.startswith(self.location.prefix) or not is_safe_relative(relative):
            with self._refused_lock:
                first_time = name not in self._refused
                self._refused.add(name)
            if first_time:
                log.warning("model repository '%s': skipping the object '%s': its name is not "
                            "a relative path under the repository (an empty, '.' or '..' "
                            "part, or a control character)", self.uri, name)
            return None
        return RepositoryFile(relative, int(size or 0), str(generation))

    def download(self, file: RepositoryFile, destination: Path) -> None:
        name = self.location.prefix + file.path
        try:
            generation = int(file.tag)
        except ValueError:
            raise invalid_arg(f"model repository '{self.uri}': '{file.tag}' is not a "
                              f"generation of '{file.path}' (tags come from list_files)"
                              ) from None
        blob = self._bucket.blob(name, generation=generation)
        try:
            with open(destination, "wb") as out:
                blob.download_to_file(out, timeout=self.settings.timeout, retry=self._retry)
        except api_exceptions.NotFound:
            raise not_found(f"model repository '{self.uri}': '{file.path}' (generation "
                            f"{generation}) is gone: removed or overwritten since it was "
                            f"listed") from None
        except Exception as exc:
            if is_client_failure(exc):
                raise self._failure(f"downloading '{file.path}'", exc) from None
            raise

    def close(self) -> None:
        self._client.close()
        self._session.close()

    def _failure(self, doing: str, exc: BaseException) -> InferenceServerError:
        return failure(self.uri, doing, exc, self.settings, self.credentials.origin)


class GcsSource(RepositorySource):
    """``gs://`` repositories."""

    def open(self, uri: str) -> GcsRepository:
        location = parse_uri(uri)
        settings = settings_from_environ()
        credentials = choose_credentials(uri, settings.endpoint)
        log.info("model repository '%s': Cloud Storage at %s, credentials: %s", uri,
                 settings.endpoint.describe(), credentials.origin)
        return GcsRepository(uri, location, settings, credentials)
