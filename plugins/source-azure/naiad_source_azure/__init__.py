"""naiad-source-azure: model repositories in Azure Blob Storage
(``--model-repository as://account/container/path``), with Triton's credentials
(``AZURE_STORAGE_ACCOUNT`` / ``AZURE_STORAGE_KEY``, ``TRITON_CLOUD_CREDENTIAL_PATH``) and,
beyond Triton, ``AZURE_STORAGE_CONNECTION_STRING`` with its ``BlobEndpoint`` (private
endpoints, the Azurite emulator)."""

from naiad_source_azure.plugin import AzureSource
from naiad_source_azure.repository import AzureRepository
from naiad_source_azure.settings import AzureSettings, settings_from_env
from naiad_source_azure.uri import AzureUri, parse_uri

__all__ = ["AzureRepository", "AzureSettings", "AzureSource", "AzureUri", "parse_uri",
           "settings_from_env"]
