"""The ``tensorflow`` backend: SavedModel and GraphDef models served with TensorFlow.

One :class:`TensorFlowBackend` serves every model with ``backend: "tensorflow"`` (Triton's
platforms ``tensorflow_savedmodel``, ``model.savedmodel/``, and ``tensorflow_graphdef``,
``model.graphdef``). Each instance gets a session (or shares one, ``MAX_SESSION_SHARE_COUNT``)
with the thread settings the config asks for. Models run on the CPU: on a GPU machine
``KIND_GPU`` is refused rather than silently run elsewhere.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import tensorflow as tf
from tritonclient.grpc.model_config_pb2 import ModelConfig

from naiad.backend_utils import (
    model_file_path,
    refuse_unsupported_features,
    run_auto_groups_on_cpu,
    version_folders,
)
from naiad.errors import unsupported
from naiad.types import Backend, InstanceInfo, ModelContext
from naiad_backend_tensorflow.autocomplete import complete_config
from naiad_backend_tensorflow.check import check_config
from naiad_backend_tensorflow.instance import TensorFlowModelInstance
from naiad_backend_tensorflow.model import GRAPHDEF, SAVEDMODEL, LoadedModel, load
from naiad_backend_tensorflow.settings import BackendSettings, model_settings

log = logging.getLogger("naiad.backend.tensorflow")

MODEL_FILENAMES = {SAVEDMODEL: "model.savedmodel", GRAPHDEF: "model.graphdef"}


class TensorFlowBackend(Backend):
    """Serves models whose config says ``backend: "tensorflow"``."""

    name = "tensorflow"
    default_model_filename = MODEL_FILENAMES[SAVEDMODEL]

    def __init__(self, backend_config: dict[str, str] | None = None) -> None:
        self.settings = BackendSettings.parse(dict(backend_config or {}))
        self._lock = threading.Lock()
        self._sessions: dict[object, tuple[LoadedModel, int]] = {}
        log.info("tensorflow %s on CPU", tf.__version__)

    def auto_complete_config(self, config: ModelConfig, model_dir: Path) -> list[str]:
        """A SavedModel's signature fills what the config leaves out; a GraphDef names no
        tensors, so its config must (as in Triton)."""
        filled = run_auto_groups_on_cpu(config, config.name or model_dir.name)
        if (config.platform or SAVEDMODEL) != SAVEDMODEL:
            return filled
        name = config.name or model_dir.name
        filename = config.default_model_filename or MODEL_FILENAMES[SAVEDMODEL]
        # The newest version that has the SavedModel folder (the load reports a missing one).
        path = next((model_file_path(v, filename, name) for v in version_folders(model_dir)
                     if model_file_path(v, filename, name).is_dir()), None)
        if path is None:
            return filled
        model = load(path, SAVEDMODEL, model_settings(config, name),
                     self.settings.allow_soft_placement, name)
        try:
            return filled + complete_config(config, model,
                                            self.settings.default_max_batch_size, name)
        finally:
            model.close()

    def create_instance(self, context: ModelContext, instance: InstanceInfo
                        ) -> TensorFlowModelInstance:
        config, name = context.config, context.name
        if instance.kind == "KIND_GPU":
            raise unsupported(f"model '{name}': instance group asks for KIND_GPU; naiad's "
                              f"tensorflow backend runs models on the CPU only (use KIND_CPU)")
        refuse_unsupported_features(config, name, self.name, {
            "GPU execution accelerators (TF-TRT, auto mixed precision)": bool(
                config.optimization.execution_accelerators.gpu_execution_accelerator),
            "CPU execution accelerators": bool(
                config.optimization.execution_accelerators.cpu_execution_accelerator),
            "optimization { graph { level } } (XLA)": config.optimization.graph.level != 0,
        })
        platform = config.platform or SAVEDMODEL
        settings = model_settings(config, name)
        path = model_file_path(context.version_dir,
                               config.default_model_filename or MODEL_FILENAMES[platform], name)
        key = (context.name, context.version, str(path),
               config.SerializeToString(deterministic=True),
               instance.index // settings.session_share_count)
        with self._lock:
            entry = self._sessions.get(key)
            if entry is None:
                model = load(path, platform, settings, self.settings.allow_soft_placement,
                             name, context.version_dir)
                try:
                    check_config(config, model, name)
                except BaseException:
                    model.close()
                    raise
                entry = (model, 0)
            self._sessions[key] = (entry[0], entry[1] + 1)
        model = entry[0]
        log.info("model '%s' instance '%s': %s '%s' (intra-op threads %s, inter-op threads "
                 "%s%s)", name, instance.name, platform, path,
                 settings.intra_threads or "auto", settings.inter_threads or "auto",
                 ", session shared" if settings.session_share_count > 1 else "")
        return TensorFlowModelInstance(model, context, instance, lambda: self._release(key))

    def _release(self, key: object) -> None:
        with self._lock:
            model, users = self._sessions[key]
            if users > 1:
                self._sessions[key] = (model, users - 1)
                return
            del self._sessions[key]
        model.close()
