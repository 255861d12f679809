"""Per-model execution environments: which interpreter a Python model's workers start with.

The backend calls :func:`worker_environment` once per model instance, before it starts the
instance's worker process. The answer, in this order:

1. ``EXECUTION_ENV_PATH`` in config.pbtxt's ``parameters``, as Triton reads it: an absolute
   path (``$$TRITON_MODEL_DIRECTORY`` stands for the model folder) to a tarball of an
   environment (conda-pack's output, or any ``.tar.gz`` whose root holds ``bin/python``) or to
   a directory that is such an environment. A tarball is unpacked once into the cache, under
   the SHA-256 of its bytes, and conda-pack's ``bin/conda-unpack`` runs once there.
2. Beyond Triton: a ``requirements.txt`` beside config.pbtxt. pip builds a virtual environment
   from the server's interpreter into the cache, under a hash of the requirements, the
   interpreter and the platform; every later start reuses it.
3. Otherwise the server's own interpreter.

Either of the first two can be turned off (``--backend-config
python,allow-execution-env-path=false`` / ``allow-requirements-txt=false``): both run code
a model's folder brings (an environment's ``bin/python``, a source distribution's build), so
a server whose load API is exposed may refuse them; a model that needs one then fails its
load naming the setting.

The cache is shared by the threads that load models and by server processes on one machine.
Each entry is built under an exclusive ``flock`` on ``<entry>.lock``, and it counts as finished
only once ``<entry>.ready`` has been renamed into place after the last step. An entry without
it (a crash, a kill, a failed build) is removed and built again. The entry is built at its
final path, not renamed there when done, because conda-unpack and venv both write the
environment's absolute path into its files (prefixes, ``bin/activate``, script shebangs).

One module per job: this one chooses; :mod:`.archives` reads ``EXECUTION_ENV_PATH`` and
unpacks tarballs; :mod:`.requirements` builds ``requirements.txt`` environments; :mod:`.cache`
is the locked cache; :mod:`.interpreters` finds and checks an environment's interpreter;
:mod:`.commands` runs the build steps.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from naiad.errors import unavailable
from naiad_backend_python.environment.archives import (
    DEFAULT_MAX_UNPACKED_BYTES,
    EXECUTION_ENV_PATH,
    MODEL_DIRECTORY_KEYWORD,
    execution_env,
)
from naiad_backend_python.environment.cache import default_cache_dir
from naiad_backend_python.environment.commands import UNSET_VARIABLES
from naiad_backend_python.environment.interpreters import WorkerEnvironment
from naiad_backend_python.environment.requirements import REQUIREMENTS_FILE, requirements_env

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

__all__ = ["EXECUTION_ENV_PATH", "EXECUTION_ENV_SWITCH", "MODEL_DIRECTORY_KEYWORD",
           "REQUIREMENTS_FILE", "REQUIREMENTS_SWITCH", "UNSET_VARIABLES",
           "EnvironmentSettings", "WorkerEnvironment", "default_cache_dir", "worker_environment"]

log = logging.getLogger("naiad.backend.python")


@dataclass(frozen=True)
class EnvironmentSettings:
    """Where environments are cached and how long building one may take."""

    #: Where unpacked and built environments live; reused across restarts and shared by
    #: server processes (:func:`default_cache_dir` unless configured).
    cache_dir: Path
    #: A requirements.txt build (venv and pip together) that takes longer is stopped and fails.
    pip_timeout_s: float = 600.0
    #: An EXECUTION_ENV_PATH tarball whose files hold more bytes unpacked is refused.
    max_unpacked_bytes: int = DEFAULT_MAX_UNPACKED_BYTES
    #: False: a model with a requirements.txt is refused instead of built (pip runs code).
    allow_requirements: bool = True
    #: False: a model with EXECUTION_ENV_PATH is refused instead of started in it.
    allow_execution_env: bool = True


#: The settings that turn environments off, as a user writes them.
REQUIREMENTS_SWITCH = "--backend-config python,allow-requirements-txt=false"
EXECUTION_ENV_SWITCH = "--backend-config python,allow-execution-env-path=false"


def worker_environment(model_name: str, model_dir: Path, config: ModelConfig,
                       settings: EnvironmentSettings) -> WorkerEnvironment:
    """The interpreter and variables for the workers of ``model_name``, whose folder
    (``<repository>/<model>``) is ``model_dir``. Unpacks or builds the environment into
    ``settings.cache_dir`` the first time; safe to call from several threads and processes at
    once. Raises an UNAVAILABLE :class:`~naiad.errors.InferenceServerError` naming the model
    and what is wrong when the environment cannot be had."""
    model_dir = Path(model_dir).absolute()
    cache_dir = Path(settings.cache_dir).absolute()
    requirements = model_dir / REQUIREMENTS_FILE
    value = ""
    if EXECUTION_ENV_PATH in config.parameters:  # indexing a protobuf map would add the key
        value = config.parameters[EXECUTION_ENV_PATH].string_value
    if value:
        if not settings.allow_execution_env:
            raise unavailable(f"model '{model_name}' sets {EXECUTION_ENV_PATH}, and this server "
                              f"runs no model in an environment of its own "
                              f"({EXECUTION_ENV_SWITCH}): remove the parameter to run it with "
                              f"the server's interpreter")
        if os.path.lexists(requirements):
            log.warning("model '%s': %s is ignored because %s is set", model_name,
                        requirements, EXECUTION_ENV_PATH)
        return execution_env(model_name, model_dir, value, cache_dir,
                             settings.max_unpacked_bytes)
    if os.path.lexists(requirements):
        if not settings.allow_requirements:
            raise unavailable(f"model '{model_name}' has a {REQUIREMENTS_FILE}, and this server "
                              f"builds none ({REQUIREMENTS_SWITCH}): remove the file to run it "
                              f"with the server's interpreter and its packages")
        return requirements_env(model_name, model_dir, requirements, cache_dir,
                                 settings.pip_timeout_s)
    return WorkerEnvironment(sys.executable, {}, f"the server's interpreter {sys.executable}")
