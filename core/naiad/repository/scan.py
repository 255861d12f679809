"""Reading a repository folder: model folders, numeric version folders, version policy."""

from __future__ import annotations

import logging
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelVersionPolicy

from naiad.errors import invalid_arg

log = logging.getLogger("naiad.repository")


def scheme_of(uri: str) -> str:
    """``s3://bucket/x`` -> ``s3``; a plain path -> ``file``."""
    head, sep, _ = uri.partition("://")
    return head if sep else "file"


def model_folders(repository: Path) -> dict[str, Path]:
    """Every model folder of a repository: visible sub-directories, by name."""
    return {
        entry.name: entry
        for entry in sorted(repository.iterdir())
        if entry.is_dir() and not entry.name.startswith(".")
    }


def available_versions(model_dir: Path) -> list[int]:
    """The numeric version folders of a model, ascending (other names are ignored, as in
    Triton; a version 0 folder is ignored too)."""
    versions = []
    for entry in model_dir.iterdir():
        # isascii: str.isdigit() accepts digits such as '²' that int() refuses
        if entry.is_dir() and entry.name.isascii() and entry.name.isdigit() \
                and int(entry.name) > 0:
            versions.append(int(entry.name))
    return sorted(versions)


def select_versions(model_name: str, available: list[int], policy: ModelVersionPolicy) -> list[int]:
    """The versions a ``version_policy`` serves out of ``available`` (Triton's rules:
    ``latest`` by default with ``num_versions`` 1; ``specific`` versions must exist)."""
    which = policy.WhichOneof("policy_choice")
    if which == "all":
        return list(available)
    if which == "specific":
        wanted = sorted(set(policy.specific.versions))
        present = [v for v in wanted if v in available]
        missing = [v for v in wanted if v not in available]
        if missing:
            # Triton logs the missing versions and serves the others.
            log.error("model '%s': version_policy names version(s) %s but the model folder "
                      "has %s", model_name, ", ".join(map(str, missing)), available)
        if not present:
            raise invalid_arg(
                f"model '{model_name}': none of the versions named by version_policy "
                f"({', '.join(map(str, wanted))}) has a folder; the model has "
                f"{available or 'no version folders'}")
        return present
    count = policy.latest.num_versions if which == "latest" else 1
    if count < 1:
        raise invalid_arg(f"model '{model_name}': version_policy latest num_versions must be "
                          f">= 1, got {count}")
    return available[-count:]


def model_config_versions(model_name: str, model_dir: Path, config: ModelConfig) -> list[int]:
    """The versions to load for a model folder, or an error naming the model."""
    available = available_versions(model_dir)
    if not available:
        raise invalid_arg(f"model '{model_name}' has no version folder (a sub-directory named "
                          f"by a positive integer, e.g. '{model_dir}/1')")
    return select_versions(model_name, available, config.version_policy)
