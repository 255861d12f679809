"""The ``openvino`` backend: OpenVINO IR and ONNX models served on CPU with OpenVINO.

One :class:`OpenVinoBackend` serves every model with ``backend: "openvino"``. The model file
is ``model.xml`` (with ``model.bin`` beside it) unless ``default_model_filename`` names
another file OpenVINO reads (``model.onnx``, ...). A model version is read, fitted to its
config and compiled once; each instance gets its own infer request on it, so N instances
run N inferences at once (Triton's openvino backend works the same way), each with the
``INFERENCE_NUM_THREADS`` / ``NUM_STREAMS`` / ``PERFORMANCE_HINT`` the config asks for, and
in f32 unless the config asks for bf16 or f16 (:mod:`naiad_backend_openvino.parameters`).
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

import openvino as ov
from tritonclient.grpc.model_config_pb2 import ModelConfig

from naiad.backend_utils import (
    model_file_path,
    newest_version_file,
    refuse_unsupported_features,
    run_auto_groups_on_cpu,
)
from naiad.errors import invalid_arg, unsupported
from naiad.types import Backend, InstanceInfo, ModelContext
from naiad_backend_openvino.autocomplete import complete_config
from naiad_backend_openvino.instance import OpenVinoModelInstance
from naiad_backend_openvino.model import (
    DEVICE,
    MODEL_FILENAME,
    CompiledModels,
    compile_model,
    configure,
    precision_of,
    read,
)
from naiad_backend_openvino.parameters import parse

log = logging.getLogger("naiad.backend.openvino")

# Triton's default for --backend-config default-max-batch-size.
DEFAULT_MAX_BATCH_SIZE = 4
BACKEND_KEYS = ("default-max-batch-size",)


class OpenVinoBackend(Backend):
    """Serves models whose config says ``backend: "openvino"``."""

    name = "openvino"
    default_model_filename = MODEL_FILENAME

    def __init__(self, backend_config: dict[str, str] | None = None) -> None:
        values = dict(backend_config or {})
        unknown = sorted(set(values) - set(BACKEND_KEYS))
        if unknown:
            log.warning("the openvino backend ignores --backend-config keys %s (it reads %s)",
                        ", ".join(unknown), ", ".join(BACKEND_KEYS))
        raw = values.get("default-max-batch-size", str(DEFAULT_MAX_BATCH_SIZE))
        if not raw.strip().isdigit():
            raise invalid_arg(f"--backend-config openvino,default-max-batch-size must be an "
                              f"integer >= 0, got '{raw}'")
        self.default_max_batch_size = int(raw)
        self.core = ov.Core()
        self.compiled = CompiledModels()
        log.info("openvino %s, devices: %s (naiad serves on %s)", ov.get_version(),
                 ", ".join(self.core.available_devices), DEVICE)

    def auto_complete_config(self, config: ModelConfig, model_dir: Path) -> list[str]:
        name = config.name or model_dir.name
        filled = run_auto_groups_on_cpu(config, name)
        path = newest_version_file(model_dir, config.default_model_filename or MODEL_FILENAME)
        if path is None:  # the load reports the missing file
            return filled
        return filled + complete_config(config, read(self.core, path, name),
                                        self.default_max_batch_size, name)

    def create_instance(self, context: ModelContext, instance: InstanceInfo
                        ) -> OpenVinoModelInstance:
        config, name = context.config, context.name
        if instance.kind == "KIND_GPU":
            raise unsupported(f"model '{name}': instance group asks for KIND_GPU; naiad's "
                              f"openvino backend supports only the CPU device (as Triton's)")
        refuse_unsupported_features(config, name, self.name)
        parameters = parse(config, name)
        path = model_file_path(context.version_dir,
                               config.default_model_filename or MODEL_FILENAME, name)

        def build() -> ov.CompiledModel:
            model = configure(read(self.core, path, name), config, parameters, name)
            return compile_model(self.core, model, parameters, name)

        key = share_key(context, path)
        compiled = self.compiled.acquire(key, build)
        release = functools.partial(self.compiled.release, key)
        try:
            loaded = OpenVinoModelInstance(compiled, context, instance, parameters, release)
        except BaseException:
            release()
            raise
        log.info("model '%s' instance '%s': OpenVINO model '%s' on %s (%s), computing in %s; "
                 "batch %s", name, instance.name, path, DEVICE,
                 ", ".join(f"{k}={v}" for k, v in parameters.properties.items()),
                 precision_of(compiled),
                 "none" if config.max_batch_size == 0 else
                 f"fixed at {config.max_batch_size}" if parameters.skip_dynamic_batch else
                 f"dynamic up to {config.max_batch_size}")
        return loaded


def share_key(context: ModelContext, path: Path) -> tuple[object, ...]:
    """What instances must have in common to share one compiled model: the model version,
    its configuration and its file as it is now (a reload that changes either compiles
    anew, while the old instances finish with the old one)."""
    try:
        stat = path.stat()
        file_tag: tuple[int, int] = (stat.st_mtime_ns, stat.st_size)
    except OSError:
        file_tag = (0, 0)
    return (context.name, context.version, str(path), file_tag,
            context.config.SerializeToString(deterministic=True))
