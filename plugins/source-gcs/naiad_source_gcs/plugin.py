"""The ``naiad.sources`` entry point ``gs``: ``--model-repository gs://bucket/path``."""

from __future__ import annotations

from naiad.hookspecs import hookimpl
from naiad.types import RepositorySource
from naiad_source_gcs.repository import GcsSource
from naiad_source_gcs.uri import SCHEME


@hookimpl
def naiad_source(scheme: str) -> RepositorySource | None:
    return GcsSource() if scheme == SCHEME else None
