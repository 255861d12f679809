"""naiad-source-gcs: model repositories in Google Cloud Storage (``--model-repository
gs://bucket/path``), listed and downloaded with google-cloud-storage; credentials and the
emulator endpoint as Triton reads them."""

from naiad_source_gcs.repository import GcsRepository, GcsSource
from naiad_source_gcs.settings import GcsSettings, settings_from_environ
from naiad_source_gcs.uri import GcsLocation, parse_uri

__all__ = ["GcsLocation", "GcsRepository", "GcsSettings", "GcsSource", "parse_uri",
           "settings_from_environ"]
