"""The ``onnxruntime`` backend: ``model.onnx`` files served with ONNX Runtime.

One :class:`OnnxBackend` serves every model with ``backend: "onnxruntime"`` (or ``platform:
"onnxruntime_onnx"``). It fills what config.pbtxt leaves out from the graph, and loads one
session per instance with the options and execution providers the config asks for.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

import onnxruntime as ort
from tritonclient.grpc.model_config_pb2 import ModelConfig

from naiad.backend_utils import refuse_unsupported_features, version_folders
from naiad.types import Backend, InstanceInfo, ModelContext
from naiad_backend_onnx.autocomplete import complete_config, needs_graph
from naiad_backend_onnx.instance import OnnxModelInstance
from naiad_backend_onnx.model_io import ModelIO, check_config
from naiad_backend_onnx.providers import select_providers
from naiad_backend_onnx.session import (
    MODEL_FILENAME,
    SharedSessions,
    create_session,
    inspection_session,
    model_path,
    session_options,
)
from naiad_backend_onnx.settings import BackendSettings, instance_group_name, session_settings

log = logging.getLogger("naiad.backend.onnxruntime")


class OnnxBackend(Backend):
    """Serves models whose config says ``backend: "onnxruntime"``."""

    name = "onnxruntime"
    default_model_filename = MODEL_FILENAME

    def __init__(self, backend_config: dict[str, str] | None = None) -> None:
        self.settings = BackendSettings.parse(dict(backend_config or {}))
        self.shared = SharedSessions()
        log.info("onnxruntime %s, execution providers: %s", ort.__version__,
                 ", ".join(ort.get_available_providers()))

    def auto_complete_config(self, config: ModelConfig, model_dir: Path) -> list[str]:
        """Fill inputs, outputs and max_batch_size from the graph of the newest version
        that has a model file (Triton's rules: see :mod:`naiad_backend_onnx.autocomplete`)."""
        model_name = config.name or model_dir.name
        if not needs_graph(config):
            log.info("model '%s': inputs and outputs are given; nothing to auto-complete",
                     model_name)
            return []
        path = newest_model_file(config, model_dir)
        if path is None:  # the load reports the missing file
            return []
        session = inspection_session(path, model_name)
        return complete_config(config, ModelIO.of(session),
                               self.settings.default_max_batch_size, model_name)

    def create_instance(self, context: ModelContext, instance: InstanceInfo
                        ) -> OnnxModelInstance:
        config = context.config
        name = context.name
        refuse_unsupported_features(config, name, self.name, {
            "model_operations (custom operator libraries)": bool(
                config.model_operations.op_library_filename)})
        settings = session_settings(config, name, self.settings)
        providers = select_providers(config, name, instance, ort.get_available_providers())
        path = model_path(context.version_dir, config.default_model_filename, name)

        def create() -> ort.InferenceSession:
            return create_session(path, session_options(settings), providers, name)

        release = None
        if settings.share_session:
            key = (id(context), instance_group_name(config, instance.index), instance.device_id)
            session = self.shared.acquire(key, create, owner=context)
            release = functools.partial(self.shared.release, key)
        else:
            session = create()
        try:
            io = ModelIO.of(session)
            check_config(config, io, name)
            loaded = OnnxModelInstance(session, context, instance, io, settings, release)
        except BaseException:
            if release is not None:
                release()
            raise
        options = session.get_session_options()
        log.info("model '%s' instance '%s': onnxruntime session for '%s' on %s "
                 "(intra_op_num_threads=%d, inter_op_num_threads=%d, execution_mode=%s, "
                 "graph_optimization_level=%s)", name, instance.name, path,
                 ", ".join(session.get_providers()), options.intra_op_num_threads,
                 options.inter_op_num_threads, options.execution_mode.name,
                 options.graph_optimization_level.name)
        return loaded


def newest_model_file(config: ModelConfig, model_dir: Path) -> Path | None:
    """The ONNX file of the highest numbered version folder that has one."""
    filename = config.default_model_filename or MODEL_FILENAME
    for version_dir in version_folders(model_dir):
        path = model_path(version_dir, filename)
        if path.is_file():
            return path
    return None
