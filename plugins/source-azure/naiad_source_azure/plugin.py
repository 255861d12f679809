"""The ``naiad.sources`` entry point ``as``: ``--model-repository as://account/container/path``."""

from __future__ import annotations

import logging

from naiad.hookspecs import hookimpl
from naiad.types import RepositorySource
from naiad_source_azure.credentials import resolve_connection
from naiad_source_azure.repository import AzureRepository
from naiad_source_azure.settings import settings_from_env
from naiad_source_azure.uri import SCHEME, parse_uri

# The SDK logs every request and response, headers included, at INFO: a dozen lines per
# call in the server's log. Left at WARNING unless the operator set a level for it.
SDK_REQUEST_LOGGER = "azure.core.pipeline.policies.http_logging_policy"


class AzureSource(RepositorySource):
    """Repositories in Azure Blob Storage. ``open`` checks the URI, the settings and the
    credentials; the first listing is the first call to the store."""

    def open(self, uri: str) -> AzureRepository:
        parsed = parse_uri(uri)
        request_log = logging.getLogger(SDK_REQUEST_LOGGER)
        if request_log.level == logging.NOTSET:
            request_log.setLevel(logging.WARNING)
        return AzureRepository(parsed, resolve_connection(parsed), settings_from_env())


@hookimpl
def naiad_source(scheme: str) -> RepositorySource | None:
    return AzureSource() if scheme == SCHEME else None
