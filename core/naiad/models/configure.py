"""A model's configuration as a version loads with it: config.pbtxt (or a load request's
JSON override) read, auto-completed by its backend, Triton's defaults filled in, checked."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from google.protobuf import json_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from naiad.config.defaults import fill_defaults
from naiad.config.parse import load_config_file
from naiad.config.platforms import ENSEMBLE, resolve_backend
from naiad.config.validate import validate_config
from naiad.errors import InferenceServerError, invalid_arg
from naiad.models.limits import check_config_sizes
from naiad.models.paths import check_config_paths

if TYPE_CHECKING:
    from naiad.models.records import LoadOptions
    from naiad.plugins import PluginManager


class BackendConfigureError(InferenceServerError):
    """A model's backend failed while completing its configuration (the model file did
    not import, its environment did not build). Triton meets such a failure while loading
    the model's versions, so unlike a configuration that cannot be read it holds strict
    readiness back (:attr:`naiad.models.records.ModelRecord.backend_failed`)."""


def configure(name: str, path: Path, override: str | None, options: LoadOptions,
              plugins: PluginManager) -> tuple[ModelConfig, list[str]]:
    """Read, auto-complete, default and validate the config of model ``name`` in ``path``
    (``override``: a JSON config given with a load request instead of config.pbtxt), in a
    worker thread. Returns it and the top-level fields that were filled in.

    Every path the configuration names is checked before a backend sees it (a backend's
    auto-complete may import the model file), and every size that makes the server
    allocate once the defaults are in (:mod:`naiad.models.paths`, :mod:`naiad.models.limits`)."""
    if override is not None:
        config = ModelConfig()
        try:
            json_format.Parse(override, config)
        except json_format.ParseError as exc:
            raise invalid_arg(f"model '{name}': the config override is not a valid "
                              f"model configuration: {exc}") from None
    else:
        config = load_config_file(path, options.config_name)
        if config is None:
            if options.strict_model_config or options.disable_auto_complete_config:
                raise invalid_arg(
                    f"model '{name}' has no config.pbtxt in {path}; one is required with "
                    f"--strict-model-config=true or --disable-auto-complete-config")
            config = ModelConfig()
    check_config_paths(name, path, config, from_request=override is not None)
    before = {f.name for f, _ in config.ListFields()}
    if not config.name:
        config.name = name
    backend_name = resolve_backend(config, name, path)
    if backend_name == ENSEMBLE:
        fill_defaults(config, name)
        validate_config(config, name)
        check_config_sizes(name, config, options.limits)
        return config, sorted({f.name for f, _ in config.ListFields()} - before)
    backend = plugins.backend(backend_name, options.settings_for(backend_name))
    if not options.strict_model_config and not options.disable_auto_complete_config:
        try:
            backend.auto_complete_config(config, path)
        except InferenceServerError as exc:
            raise BackendConfigureError(exc.message, exc.status) from exc
        except Exception as exc:
            raise BackendConfigureError(
                f"model '{name}': auto-complete of the configuration failed: "
                f"{type(exc).__name__}: {exc}") from exc
    fill_defaults(config, name)
    validate_config(config, name)
    # What the backend and the defaults filled in, by its spelling (they name files of the
    # repository, whose links are the operator's).
    check_config_paths(name, path, config, from_request=False)
    check_config_sizes(name, config, options.limits)
    filled = sorted({f.name for f, _ in config.ListFields()} - before)
    return config, filled
