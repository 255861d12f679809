"""A model repository in an S3 bucket (or an S3-compatible store): listed page by page and
read object by object with boto3. The core mirrors what it lists; nothing here caches."""

from __future__ import annotations

import logging
import shutil
import threading
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from naiad.errors import invalid_arg
from naiad.types import Repository, RepositoryFile, RepositorySource
from naiad_source_s3.credentials import S3Credentials, resolve_credentials
from naiad_source_s3.errors import one_line, translate
from naiad_source_s3.settings import S3Settings, read_settings
from naiad_source_s3.uri import S3Location, parse_s3_uri

log = logging.getLogger("naiad.source.s3")

BYTES = 1
DOWNLOAD_CHUNK_BYTES = 1024 * 1024 * BYTES


def relative_path(key: str, root: str) -> str | None:
    """``key`` under the repository root ``root`` as a "/"-separated relative path, or None
    when it cannot be one: a folder marker (ending in "/"), or a key whose rest starts with
    "/" or holds an empty, "." or ".." part (it would land outside its folder, or nowhere)."""
    rest = key[len(root):]
    if not rest or rest.endswith("/"):
        return None
    if any(part in ("", ".", "..") for part in rest.split("/")):
        return None
    return rest


def _etag(entry: dict[str, Any]) -> str:
    """The tag of a listed object: its ETag (changes with the content; a multipart upload's
    is not an MD5 but changes too), quoted as S3 sends it; or size and time (unquoted) where
    a store sends none."""
    etag = str(entry.get("ETag") or "")
    return etag or f"{entry.get('Size', 0)}-{entry.get('LastModified', '')}"


class S3Repository(Repository):
    """One ``s3://`` repository; thread-safe (one boto3 client, shared by every call)."""

    local_path = None

    def __init__(self, location: S3Location, client: Any, credentials: S3Credentials,
                 settings: S3Settings) -> None:
        self.location = location
        self.credentials = credentials
        self.settings = settings
        self._client = client
        self._refused: set[str] = set()  # keys refused once, not logged again at every poll
        self._refused_lock = threading.Lock()

    def _refuse(self, key: str) -> None:
        with self._refused_lock:
            if key in self._refused:
                return
            self._refused.add(key)
        log.warning("S3 model repository '%s': skipping object '%s': its name is not a "
                    "path under the repository (an empty, '.' or '..' part)",
                    self.location.uri, key)

    def list_files(self, prefix: str = "") -> list[RepositoryFile]:
        root = self.location.prefix
        pages = self._client.get_paginator("list_objects_v2").paginate(
            Bucket=self.location.bucket, Prefix=root + prefix,
            PaginationConfig={"PageSize": self.settings.list_page_size})
        found = []
        try:
            for page in pages:
                for entry in page.get("Contents", ()):
                    key = entry["Key"]
                    if key.endswith("/"):
                        continue  # a "folder" made by a console or a sync tool
                    path = relative_path(key, root)
                    if path is None:
                        self._refuse(key)
                        continue
                    found.append(RepositoryFile(path, int(entry.get("Size", 0)),
                                                _etag(entry)))
        except (BotoCoreError, ClientError) as exc:
            raise translate(exc, self.location, self.credentials, self.settings) from None
        return sorted(found, key=lambda file: file.path)

    def download(self, file: RepositoryFile, destination: Path) -> None:
        key = self.location.prefix + file.path
        request = {"Bucket": self.location.bucket, "Key": key}
        if file.tag.startswith('"'):
            # Only the content that was listed: an object replaced since answers 412.
            request["IfMatch"] = file.tag
        try:
            answer = self._client.get_object(**request)
            with answer["Body"] as body, open(destination, "wb") as out:
                shutil.copyfileobj(body, out, DOWNLOAD_CHUNK_BYTES)
        except (BotoCoreError, ClientError) as exc:
            raise translate(exc, self.location, self.credentials, self.settings,
                            key=key) from None

    def close(self) -> None:
        self._client.close()


class S3Source(RepositorySource):
    """``s3://`` URIs, in Triton's forms (see :mod:`naiad_source_s3.uri`)."""

    def open(self, uri: str) -> S3Repository:
        location = parse_s3_uri(uri)
        settings = read_settings()
        credentials = resolve_credentials(uri)
        config = Config(
            connect_timeout=settings.connect_timeout_s,
            read_timeout=settings.read_timeout_s,
            retries={"total_max_attempts": settings.max_attempts, "mode": "standard"},
            max_pool_connections=settings.max_pool_connections,
            # Triton addresses buckets by path on its own endpoints (MinIO and most
            # S3-compatible stores need it); Amazon S3 picks its own style.
            s3={"addressing_style": "path"} if location.endpoint_url else None,
        )
        try:
            session = boto3.session.Session(**credentials.session_arguments())
            client = session.client("s3", endpoint_url=location.endpoint_url, config=config)
        except BotoCoreError as exc:  # a profile that is not there, a bad config file
            raise invalid_arg(f"S3 model repository '{uri}': {one_line(str(exc))} "
                              f"(credentials from {credentials.source})") from None
        return S3Repository(location, client, credentials, settings)
