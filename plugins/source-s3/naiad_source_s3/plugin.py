"""The ``naiad.sources`` entry point ``s3``: ``--model-repository s3://bucket/path``."""

from __future__ import annotations

from naiad.hookspecs import hookimpl
from naiad.types import RepositorySource
from naiad_source_s3.repository import S3Source

SCHEME = "s3"


@hookimpl
def naiad_source(scheme: str) -> RepositorySource | None:
    return S3Source() if scheme == SCHEME else None
