"""What a TensorFlow model's config.pbtxt and ``--backend-config tensorflow,...`` ask for.

The names are Triton's tensorflow backend's (README and ``src/tensorflow.cc``, Triton 2.51):
model ``parameters`` ``TF_NUM_INTRA_THREADS``, ``TF_NUM_INTER_THREADS``,
``TF_USE_PER_SESSION_THREADS``, ``TF_GRAPH_TAG``, ``TF_SIGNATURE_DEF``,
``MAX_SESSION_SHARE_COUNT`` and ``TF_INIT_OPS_FILE``; backend settings
``default-max-batch-size`` (4), ``allow-soft-placement``, ``gpu-memory-fraction`` and
``version`` (2 only). Checked once, at load; a bad value fails the load naming the model, the
key and what was expected.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from naiad.errors import invalid_arg, unsupported

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

log = logging.getLogger("naiad.backend.tensorflow")

DEFAULT_MAX_BATCH_SIZE = 4
DEFAULT_GRAPH_TAG = "serve"
DEFAULT_SIGNATURE_DEF = "serving_default"
MODEL_KEYS = ("TF_NUM_INTRA_THREADS", "TF_NUM_INTER_THREADS", "TF_USE_PER_SESSION_THREADS",
              "TF_GRAPH_TAG", "TF_SIGNATURE_DEF", "MAX_SESSION_SHARE_COUNT", "TF_INIT_OPS_FILE")
BACKEND_KEYS = ("default-max-batch-size", "allow-soft-placement", "gpu-memory-fraction",
                "version")

_TRUE = frozenset({"true", "on", "1", "yes"})


def parameter(config: ModelConfig, key: str) -> str | None:
    """The ``string_value`` of ``parameters { key: KEY }``, or None when it is absent."""
    if key not in config.parameters:
        return None
    return config.parameters[key].string_value


def _count(value: str, what: str, minimum: int) -> int:
    try:
        number = int(value.strip())
    except ValueError:
        number = None
    if number is None or number < minimum:
        raise invalid_arg(f"{what} must be an integer >= {minimum}, got '{value}'")
    return number


@dataclass(frozen=True)
class BackendSettings:
    """``--backend-config tensorflow,KEY=VALUE``."""

    default_max_batch_size: int = DEFAULT_MAX_BATCH_SIZE
    allow_soft_placement: bool = True

    @classmethod
    def parse(cls, values: dict[str, str]) -> BackendSettings:
        unknown = sorted(set(values) - set(BACKEND_KEYS))
        if unknown:
            log.warning("the tensorflow backend ignores --backend-config keys %s (it reads %s)",
                        ", ".join(unknown), ", ".join(BACKEND_KEYS))
        version = values.get("version", "2").strip()
        if version != "2":
            raise unsupported(f"--backend-config tensorflow,version={version}: naiad's "
                              f"tensorflow backend runs TensorFlow 2 only")
        if "gpu-memory-fraction" in values:
            log.warning("--backend-config tensorflow,gpu-memory-fraction has no effect: naiad's "
                        "tensorflow backend runs models on the CPU")
        return cls(
            default_max_batch_size=_count(values.get("default-max-batch-size",
                                                     str(DEFAULT_MAX_BATCH_SIZE)),
                                          "--backend-config tensorflow,default-max-batch-size",
                                          0),
            allow_soft_placement=values.get("allow-soft-placement", "true").strip().lower()
            in _TRUE,
        )


@dataclass(frozen=True)
class ModelSettings:
    """One model's TensorFlow parameters."""

    intra_threads: int = 0  # 0: TensorFlow chooses
    inter_threads: int = 0
    per_session_threads: bool = False
    graph_tag: str = DEFAULT_GRAPH_TAG
    signature_def: str = ""  # "": serving_default, else the first non-init, non-train one
    session_share_count: int = 1
    init_ops_file: str = ""


def model_settings(config: ModelConfig, model_name: str) -> ModelSettings:
    """Read and check the parameters of ``config``."""

    def what(key: str) -> str:
        return f"model '{model_name}': parameter '{key}'"

    def count(key: str, minimum: int, default: int) -> int:
        value = parameter(config, key)
        return default if value is None else _count(value, what(key), minimum)

    unknown = sorted(set(config.parameters) - set(MODEL_KEYS))
    if unknown:
        log.warning("model '%s': the tensorflow backend ignores parameters %s", model_name,
                    ", ".join(unknown))
    per_session = parameter(config, "TF_USE_PER_SESSION_THREADS")
    return ModelSettings(
        intra_threads=count("TF_NUM_INTRA_THREADS", 0, 0),
        inter_threads=count("TF_NUM_INTER_THREADS", 0, 0),
        per_session_threads=per_session is not None and per_session.strip().lower() in _TRUE,
        graph_tag=parameter(config, "TF_GRAPH_TAG") or DEFAULT_GRAPH_TAG,
        signature_def=parameter(config, "TF_SIGNATURE_DEF") or "",
        session_share_count=count("MAX_SESSION_SHARE_COUNT", 1, 1),
        init_ops_file=parameter(config, "TF_INIT_OPS_FILE") or "",
    )
