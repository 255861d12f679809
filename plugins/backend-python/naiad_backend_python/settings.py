"""The Python backend's settings: ``--backend-config python,KEY=VALUE`` and, per model,
``parameters`` in config.pbtxt. Every size and timeout has its unit in its name.

=====================================  ===========  ===========================================
``--backend-config python,...``        default      what it does
=====================================  ===========  ===========================================
``execution-mode``                     ``isolated`` ``isolated``: one worker process per
                                                    instance; ``in_process``: threads in the
                                                    server (a model's ``EXECUTION_MODE``
                                                    parameter overrides it)
``shm-default-byte-size``              1 MiB        first size of an instance's shared memory
                                                    region (Triton's name)
``shm-growth-byte-size``               1 MiB        the region grows in steps of this size
                                                    (Triton's name)
``shm-max-byte-size``                  1 GiB        the largest region; bigger batches travel
                                                    over the worker's socket
``shm-region-dir``                     /dev/shm     where regions are made
``shm-inline-max-byte-size``           64 KiB       batches with fewer tensor bytes travel
                                                    inside their message, not the region
``worker-finalize-timeout-seconds``    30           how long ``finalize`` may take at unload
                                                    before the worker is killed
``worker-restart-delay-min-seconds``   0.5          wait before restarting a dead worker ...
``worker-restart-delay-max-seconds``   30           ... doubling per quick crash, up to this
``worker-restart-stable-seconds``      60           a worker that lived this long crashed
                                                    "slowly": the delay starts over
``execute-timeout-seconds``            0 (none)     a batch whose ``execute`` runs longer
                                                    fails (503) and its worker is ended and
                                                    restarted; a model's
                                                    ``EXECUTE_TIMEOUT_SECONDS`` parameter
                                                    overrides it (Triton has none: off)
``initialize-timeout-seconds``         0 (none)     a worker whose ``initialize`` (and start)
                                                    takes longer is killed and the load fails
                                                    naming this setting (Triton has none: off)
``env-cache-dir``                      see below    unpacked and built environments
                                                    (``environment.default_cache_dir()``)
``pip-timeout-seconds``                600          the longest a requirements.txt build runs
``env-max-unpacked-bytes``             16 GiB       an EXECUTION_ENV_PATH tarball whose files
                                                    hold more unpacked is refused
``allow-requirements-txt``             true         false: a model with a requirements.txt
                                                    fails its load naming this setting instead
                                                    of being built (pip runs a build's code)
``allow-execution-env-path``           true         false: a model with EXECUTION_ENV_PATH
                                                    fails its load naming this setting
=====================================  ===========  ===========================================
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig

from naiad.errors import invalid_arg
from naiad_backend_python.environment import default_cache_dir

MIB = 1024 * 1024
ISOLATED, IN_PROCESS = "isolated", "in_process"
EXECUTION_MODES = (ISOLATED, IN_PROCESS)
#: The model parameter that chooses a model's execution mode.
EXECUTION_MODE_PARAMETER = "EXECUTION_MODE"
#: The model parameter that sets a model's execute timeout (seconds; 0: none).
EXECUTE_TIMEOUT_PARAMETER = "EXECUTE_TIMEOUT_SECONDS"


@dataclass(frozen=True)
class PythonBackendSettings:
    execution_mode: str = ISOLATED
    shm_default_byte_size: int = 1 * MIB
    shm_growth_byte_size: int = 1 * MIB
    shm_max_byte_size: int = 1024 * MIB
    shm_region_dir: str = "/dev/shm"
    shm_inline_max_byte_size: int = 64 * 1024
    worker_finalize_timeout_seconds: float = 30.0
    worker_restart_delay_min_seconds: float = 0.5
    worker_restart_delay_max_seconds: float = 30.0
    worker_restart_stable_seconds: float = 60.0
    execute_timeout_seconds: float = 0.0
    initialize_timeout_seconds: float = 0.0
    env_cache_dir: str = ""
    pip_timeout_seconds: float = 600.0
    env_max_unpacked_bytes: int = 16 * 1024 * MIB
    allow_requirements_txt: bool = True
    allow_execution_env_path: bool = True

    @classmethod
    def parse(cls, backend_config: dict[str, str]) -> PythonBackendSettings:
        """Settings from ``--backend-config python,KEY=VALUE`` pairs. Keys this backend
        does not know are left to others (``--backend-config`` also passes shared keys)."""
        values: dict[str, object] = {}
        for field in fields(cls):
            key = field.name.replace("_", "-")
            if key not in backend_config:
                continue
            text = backend_config[key]
            if field.type == "bool":
                values[field.name] = _switch(key, text)
                continue
            try:
                if field.type == "int":
                    value: object = int(text)
                elif field.type == "float":
                    value = float(text)
                else:
                    value = text
            except ValueError:
                raise invalid_arg(f"--backend-config python,{key}={text}: expected "
                                  f"{'an integer' if field.type == 'int' else 'a number'}"
                                  ) from None
            if isinstance(value, (int, float)) and value < 0:
                raise invalid_arg(f"--backend-config python,{key}={text}: must not be "
                                  f"negative")
            values[field.name] = value
        settings = cls(**values)  # type: ignore[arg-type]
        if settings.execution_mode not in EXECUTION_MODES:
            raise invalid_arg(f"--backend-config python,execution-mode="
                              f"{settings.execution_mode}: expected one of "
                              f"{', '.join(EXECUTION_MODES)}")
        return settings

    def mode_of(self, config: ModelConfig) -> str:
        """The execution mode of one model: its ``EXECUTION_MODE`` parameter, else the
        server-wide setting."""
        if EXECUTION_MODE_PARAMETER not in config.parameters:
            return self.execution_mode
        mode = config.parameters[EXECUTION_MODE_PARAMETER].string_value.strip().lower()
        if mode not in EXECUTION_MODES:
            raise invalid_arg(f"model '{config.name}': parameter {EXECUTION_MODE_PARAMETER} is "
                              f"'{mode}', expected one of {', '.join(EXECUTION_MODES)}")
        return mode

    def for_model(self, config: ModelConfig) -> PythonBackendSettings:
        """These settings with the model's own ``EXECUTE_TIMEOUT_SECONDS`` (when it sets
        one). Raises INVALID_ARG for a value that is not a number of seconds >= 0."""
        if EXECUTE_TIMEOUT_PARAMETER not in config.parameters:
            return self
        text = config.parameters[EXECUTE_TIMEOUT_PARAMETER].string_value.strip()
        try:
            seconds = float(text)
        except ValueError:
            seconds = -1.0
        if not seconds >= 0 or seconds == float("inf"):
            raise invalid_arg(f"model '{config.name}': parameter {EXECUTE_TIMEOUT_PARAMETER} is "
                              f"'{text}', expected a number of seconds (0: no timeout)")
        return replace(self, execute_timeout_seconds=seconds)

    def cache_dir(self) -> Path:
        return Path(self.env_cache_dir) if self.env_cache_dir else default_cache_dir()


_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _switch(key: str, text: str) -> bool:
    """A boolean setting's value; INVALID_ARG naming the key for anything else."""
    word = text.strip().lower()
    if word in _TRUE or word in _FALSE:
        return word in _TRUE
    raise invalid_arg(f"--backend-config python,{key}={text}: expected true or false")
