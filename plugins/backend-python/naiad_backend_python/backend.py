"""The ``python`` backend: Triton Python models (``TritonPythonModel`` in model.py).

Each instance runs its model in a worker process of its own (``isolated``, the default, as
Triton's stub processes do), or on its thread inside the server (``in_process``, opt-in per
model with the ``EXECUTION_MODE`` parameter or server-wide with ``--backend-config
python,execution-mode=in_process``). Both run the model through the same code
(``stub/naiad_stub_runner.py``), so a model behaves the same either way. In isolated mode
the server never imports model.py: ``auto_complete_config`` runs in a short-lived worker.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from naiad.backend_utils import config_to_json, model_file_path, newest_version_file
from naiad.errors import invalid_arg, unavailable
from naiad.types import Backend, InstanceInfo, ModelContext, ModelInstance
from naiad_backend_python.environment import (
    UNSET_VARIABLES,
    EnvironmentSettings,
    worker_environment,
)
from naiad_backend_python.inprocess import InProcessInstance
from naiad_backend_python.isolated.channel import WorkerDied
from naiad_backend_python.isolated.instance import IsolatedInstance
from naiad_backend_python.isolated.metrics import MetricsHandler
from naiad_backend_python.isolated.process import Launch, WorkerProcess
from naiad_backend_python.isolated.regions import RegionPolicy
from naiad_backend_python.metrics import DirectMetrics
from naiad_backend_python.settings import (
    EXECUTE_TIMEOUT_PARAMETER,
    IN_PROCESS,
    PythonBackendSettings,
)
from naiad_backend_python.stub import naiad_stub_metrics as stub_metrics
from naiad_backend_python.stub import naiad_stub_runner as runner

log = logging.getLogger("naiad.backend.python")

DEFAULT_MODEL_FILENAME = "model.py"
#: the backend_config key that makes this backend a Triton "Python-based backend": every model
#: naming that backend runs this model.py (``<backend directory>/<backend>/model.py``)
BASED_BACKEND_FILE = "python-based-backend-file"


def render_config(config: ModelConfig) -> str:
    """``config`` as the JSON string Triton gives Python models (``args['model_config']``)."""
    return json.dumps(config_to_json(config), separators=(",", ":"))


class PythonBackend(Backend):
    """Serves models whose config says ``backend: "python"``."""

    name = "python"
    default_model_filename = DEFAULT_MODEL_FILENAME

    def __init__(self, backend_config: dict[str, str] | None = None) -> None:
        self.backend_config = dict(backend_config or {})
        self.settings = PythonBackendSettings.parse(self.backend_config)
        based = self.backend_config.get(BASED_BACKEND_FILE)
        #: a Python-based backend's model.py, which every model of that backend runs
        self.based_file = Path(based) if based else None

    def _model_file(self, version_dir: Path, config: ModelConfig, name: str) -> Path:
        if self.based_file is not None:
            return self.based_file
        return model_file_path(version_dir, config.default_model_filename
                               or DEFAULT_MODEL_FILENAME, name)

    # --- auto-complete ------------------------------------------------------------------

    def auto_complete_config(self, config: ModelConfig, model_dir: Path) -> list[str]:
        """Let ``TritonPythonModel.auto_complete_config`` (a static method, if the model has
        one) fill in ``config`` as Triton does, in the model's execution mode. The newest
        version folder holding the model file is imported for it."""
        model_file = self.based_file or newest_version_file(
            model_dir, config.default_model_filename or DEFAULT_MODEL_FILENAME)
        if model_file is None:
            return []
        model_name = config.name or model_dir.name
        config_json = render_config(config)
        if self.settings.mode_of(config) == IN_PROCESS:
            try:
                result = runner.auto_complete(str(model_file), config_json, model_name)
            except runner.LoadFailure as exc:
                raise invalid_arg(str(exc)) from None
        else:
            result = self._auto_complete_in_worker(model_file, config_json, model_name,
                                                   config, model_dir)
        completed = ModelConfig()
        try:
            json_format.ParseDict(result, completed)
        except json_format.ParseError as exc:
            raise invalid_arg(f"model '{model_name}': the configuration returned by "
                              f"auto_complete_config is not valid: {exc}") from None
        filled = _changed_fields(config, completed)
        config.CopyFrom(completed)
        return filled

    def _auto_complete_in_worker(self, model_file: Path, config_json: str, model_name: str,
                                 config: ModelConfig, model_dir: Path) -> dict[str, Any]:
        launch = self._launch(model_name, model_dir, config)
        regions = RegionPolicy(self.settings.shm_region_dir, 0, 1, 0, 0)  # no tensors travel
        worker = WorkerProcess(launch, model_name, f"{model_name}_auto_complete", regions)
        try:
            reply = worker.channel.call({"op": "auto_complete", "model_file": str(model_file),
                                    "config": config_json, "model_name": model_name})
            worker.finalize(self.settings.worker_finalize_timeout_seconds)
        except WorkerDied:
            returncode = worker.wait(1.0)
            worker.reap()
            raise unavailable(f"model '{model_name}': the worker process running "
                              f"auto_complete_config (pid {worker.pid}) ended: "
                              f"{'exit status ' + str(returncode)}") from None
        if reply.get("op") != "config":
            message = reply.get("message", "")
            if reply.get("contract"):
                raise invalid_arg(message)
            raise invalid_arg(f"model '{model_name}': auto-complete of the configuration "
                              f"failed: {message}")
        return reply["config"]

    # --- instances ----------------------------------------------------------------------

    def create_instance(self, context: ModelContext, instance: InstanceInfo) -> ModelInstance:
        config = context.config
        name = context.name
        model_file = self._model_file(context.version_dir, config, name)
        if not model_file.is_file():
            raise unavailable(f"model '{name}': Python model file not found in '{model_file}'")
        args = runner.initialize_args(render_config(config), instance.kind, instance.name,
                                      instance.device_id, str(context.model_dir),
                                      context.version, name)
        outputs = [output.name for output in config.output]
        if self.settings.mode_of(config) == IN_PROCESS:
            self._no_timeout_in_process(config)
            # The instance's thread (this one) makes its model's metric families.
            stub_metrics.use(DirectMetrics(context.metrics, instance.name))
            return InProcessInstance(str(model_file), args, outputs, context.server)
        init = {"op": "init", "model_file": str(model_file), "args": args, "outputs": outputs}
        return IsolatedInstance(self._launch(name, context.model_dir, config), init, name,
                                instance.name, self.settings.for_model(config), context.loop,
                                context.server,
                                {"metric": MetricsHandler(context.metrics, instance.name).handle})

    def _no_timeout_in_process(self, config: ModelConfig) -> None:
        """An execute timeout ends a worker process; a thread in the server cannot be
        stopped. A model that asks for both is refused; the server-wide setting does not
        apply to in-process models, and the log says so."""
        if EXECUTE_TIMEOUT_PARAMETER in config.parameters and \
                self.settings.for_model(config).execute_timeout_seconds:
            raise invalid_arg(f"model '{config.name}': parameter {EXECUTE_TIMEOUT_PARAMETER} "
                              f"needs EXECUTION_MODE isolated (an in-process execute runs on "
                              f"a server thread, which cannot be stopped)")
        if self.settings.execute_timeout_seconds:
            log.warning("model '%s' runs in-process: --backend-config python,"
                        "execute-timeout-seconds does not apply to it (a server thread cannot "
                        "be stopped)", config.name)
        if self.settings.initialize_timeout_seconds:
            log.warning("model '%s' runs in-process: --backend-config python,"
                        "initialize-timeout-seconds does not apply to it (a server thread "
                        "cannot be stopped)", config.name)

    def _launch(self, model_name: str, model_dir: Path, config: ModelConfig) -> Launch:
        """The interpreter and environment a worker of this model starts with."""
        environment = worker_environment(model_name, model_dir, config, EnvironmentSettings(
            cache_dir=self.settings.cache_dir(),
            pip_timeout_s=self.settings.pip_timeout_seconds,
            max_unpacked_bytes=self.settings.env_max_unpacked_bytes,
            allow_requirements=self.settings.allow_requirements_txt,
            allow_execution_env=self.settings.allow_execution_env_path))
        return Launch(environment.python, dict(environment.variables),
                      environment.description, UNSET_VARIABLES)


def _changed_fields(before: ModelConfig, after: ModelConfig) -> list[str]:
    """Top-level fields of ``after`` that differ from ``before``."""
    changed = []
    for field in ModelConfig.DESCRIPTOR.fields:
        name = field.name
        presence = (field.type == field.TYPE_MESSAGE and not _is_repeated(field)
                    and before.HasField(name) != after.HasField(name))
        if presence or getattr(before, name) != getattr(after, name):
            changed.append(name)
    return changed


def _is_repeated(field: Any) -> bool:
    is_repeated = getattr(field, "is_repeated", None)
    if is_repeated is not None:  # protobuf >= 6 deprecates ``label``
        return bool(is_repeated)
    return bool(field.label == field.LABEL_REPEATED)

