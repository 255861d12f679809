"""Reloading without reloading: a version whose configuration and files did not change keeps
serving as it is (poll mode and explicit reloads of unchanged models), as in Triton."""

from __future__ import annotations

from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig

from naiad.config.platforms import ENSEMBLE
from naiad.models.configure import configure
from naiad.models.records import LoadOptions, ModelRecord, ModelVersion
from naiad.plugins import PluginManager
from naiad.repository.fingerprint import ModelFingerprint, model_fingerprint


def configure_and_fingerprint(name: str, path: Path, override: str | None,
                              options: LoadOptions, plugins: PluginManager,
                              track_files: bool
                              ) -> tuple[ModelConfig, list[str], ModelFingerprint | None]:
    """The model's configuration, and (when versions are compared: poll mode) its files'
    fingerprint, taken first: a change made while the configuration is read then shows
    as a difference at the next poll instead of going unnoticed."""
    fingerprint = model_fingerprint(path) if track_files else None
    config, filled = configure(name, path, override, options, plugins)
    return config, filled, fingerprint


def unchanged_version(old: ModelRecord | None, version: int, config: ModelConfig,
                      config_json: dict, fingerprint: ModelFingerprint | None
                      ) -> ModelVersion | None:
    """The serving ``version`` of ``old`` when loading it again would change nothing:
    same configuration, same files. Ensembles always load again, as in Triton."""
    if old is None or config.platform == ENSEMBLE:
        return None
    serving = old.versions.get(version)
    if serving is None or serving.fingerprint is None or fingerprint is None:
        return None
    if serving.config_json != config_json:
        return None
    if not serving.fingerprint.same_version_files(fingerprint, version):
        return None
    return serving
