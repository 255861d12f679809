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
- configs: :func:`config_to_json`; messages: :func:`format_shape`; devices: :func:`gpu_count`;
- CPU-only backends and what a backend leaves out: :func:`run_auto_groups_on_cpu`,
  :func:`refuse_unsupported_features`;
- logging: :func:`on_log_level_change` (verbose logging turned on or off at run time).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from naiad.batching import batch_sizes, merge_inputs, split_outputs
from naiad.config.render import config_to_json
from naiad.datatypes import NUMPY_DTYPES, config_to_datatype, datatype_to_config, format_shape
from naiad.errors import unsupported
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
    "on_log_level_change",
    "refuse_unsupported_features",
    "run_auto_groups_on_cpu",
    "split_outputs",
    "version_folders",
]


def on_log_level_change(listener: Callable[[int], object]) -> Callable[[], None]:
    """Call ``listener(level)`` whenever the server's log level changes at run time (the
    logging extension's ``log_verbose_level``: ``logging.DEBUG`` when verbose, else
    ``logging.INFO``), on the thread that changed it: for a backend whose model logs in
    another process, which must follow. Returns the function that removes the listener."""
    from naiad import logs

    logs.level_listeners.append(listener)

    def remove() -> None:
        if listener in logs.level_listeners:
            logs.level_listeners.remove(listener)

    return remove


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


def run_auto_groups_on_cpu(config: ModelConfig, model_name: str) -> list[str]:
    """For a backend that runs on the CPU only, from its ``auto_complete_config``: instance
    groups of ``KIND_AUTO`` (the default) become ``KIND_CPU``, and a config without groups
    gets one CPU group named after the model (as the server names the implicit group),
    before the core would place them on a GPU where there is one. An explicit ``KIND_GPU``
    is left for the backend to refuse at load. Returns ``["instance_group"]`` when it
    changed the config (what ``auto_complete_config`` reports as filled), else ``[]``."""
    groups = [g for g in config.instance_group if g.kind == ModelInstanceGroup.KIND_AUTO]
    for group in groups:
        group.kind = ModelInstanceGroup.KIND_CPU
    if not config.instance_group and config.platform != "ensemble":
        config.instance_group.add(name=config.name or model_name,
                                  kind=ModelInstanceGroup.KIND_CPU)
        groups.append(config.instance_group[0])
    return ["instance_group"] if groups else []


def refuse_unsupported_features(config: ModelConfig, model_name: str, backend_name: str,
                                more: Mapping[str, bool] | None = None) -> None:
    """Raise UNSUPPORTED naming every configuration feature in use that a backend must
    implement itself and ``backend_name``'s does not, rather than load a model whose
    config would be silently ignored: ``batch_input``, ``batch_output``, sequence batching's
    control inputs and state, ``allow_ragged_batch``, decoupled mode, and ``more`` (each
    further feature's description -> whether ``config`` uses it)."""
    features = {
        "batch_input": bool(config.batch_input),
        "batch_output": bool(config.batch_output),
        "sequence_batching control inputs": bool(config.sequence_batching.control_input),
        "sequence_batching state": bool(config.sequence_batching.state),
        "allow_ragged_batch": any(t.allow_ragged_batch for t in config.input),
        "decoupled mode": config.model_transaction_policy.decoupled,
        **(more or {}),
    }
    used = [feature for feature, present in features.items() if present]
    if used:
        raise unsupported(f"model '{model_name}' uses {', '.join(used)}, which naiad's "
                          f"{backend_name} backend does not support")
