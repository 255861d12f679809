"""What framework backends share: a public module of helpers for plugin authors.

A backend plugin imports from the public modules only (:mod:`naiad`, :mod:`naiad.hookspecs`,
:mod:`naiad.types`, :mod:`naiad.errors`, :mod:`naiad.metrics.custom_metrics` and this one); the rest
of ``naiad`` may change between releases. Everything here is documented in
``docs/plugin-author-guide.md``. Each helper has one implementation: the ones the core uses
itself are re-exported from the core module that holds them, so a backend and the core never
disagree on a datatype name, a batch split or a version folder.

- datatypes: :data:`NUMPY_DTYPES`, :func:`config_to_datatype`, :func:`datatype_to_config`;
- batches: :func:`batch_sizes`, :func:`merge_inputs`, :func:`split_outputs`;
- model folders: :func:`version_folders`, :func:`newest_version_file`, :func:`model_file_path`;
- configs: :func:`config_to_json`; messages: :func:`format_shape`; devices: :func:`gpu_count`.
"""

from __future__ import annotations

from pathlib import Path

from naiad.batching import batch_sizes, merge_inputs, split_outputs
from naiad.config.render import config_to_json
from naiad.datatypes import NUMPY_DTYPES, config_to_datatype, datatype_to_config, format_shape
from naiad.gpus import gpu_count
from naiad.models.paths import inside_folder
from naiad.repository.scan import available_versions

__all__ = [
    "NUMPY_DTYPES",
    "batch_sizes",
    "config_to_datatype",
    "config_to_json",
    "datatype_to_config",
    "format_shape",
    "gpu_count",
    "merge_inputs",
    "model_file_path",
    "newest_version_file",
    "split_outputs",
    "version_folders",
]


def version_folders(model_dir: Path) -> list[Path]:
    """The version folders of a model, newest first: the folders the core serves versions
    from (positive decimal names; anything else is ignored, as in Triton). Empty when
    ``model_dir`` cannot be read (the load reports the missing folder)."""
    try:
        versions = available_versions(model_dir)
    except OSError:
        return []
    return [model_dir / str(version) for version in reversed(versions)]


def model_file_path(version_dir: Path, filename: str, model: str,
                    field: str = "default_model_filename") -> Path:
    """``version_dir / filename``, the file a configuration's ``field`` names: how a backend
    turns ``default_model_filename`` (or ``cc_model_filenames[...]``) into the path it
    opens. Raises INVALID_ARG naming ``model`` and ``field`` when ``filename`` is empty,
    absolute or climbs out with ``..``. Symbolic links inside the folder are followed: the
    core has already refused a name from a load request that leads out through one."""
    return inside_folder(version_dir, filename, model=model, field=field)


def newest_version_file(model_dir: Path, filename: str) -> Path | None:
    """``filename`` in the newest version folder that holds it as a file, or None: where a
    backend's ``auto_complete_config`` reads the model when several versions exist. A
    ``filename`` that leaves the version folder is refused as :func:`model_file_path`
    refuses it."""
    for version_dir in version_folders(model_dir):
        path = model_file_path(version_dir, filename, model_dir.name)
        if path.is_file():
            return path
    return None
