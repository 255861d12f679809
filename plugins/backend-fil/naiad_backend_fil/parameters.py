"""What a FIL model's config.pbtxt asks for: Triton FIL's ``parameters``, read once at load.

The names, values and defaults are those of triton-inference-server/fil_backend as shipped
with Triton 2.51 (``src/shared_state.h``): ``model_type`` (default ``xgboost``),
``output_class`` (required), ``predict_proba``, ``threshold``, ``xgboost_allow_unknown_field``,
``cpu_nthread``, ``use_experimental_optimizations``, and the GPU-only ``storage_type``,
``algo``, ``threads_per_tree``, ``blocks_per_sm`` and ``transfer_threshold``. Booleans are
the strings ``true`` and ``false``, as in FIL. A bad value fails the load with a message
naming the model, the parameter and what was expected.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from naiad.errors import invalid_arg

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

log = logging.getLogger("naiad.backend.fil")

#: ``model_type`` -> the file FIL loads when ``default_model_filename`` is not set.
MODEL_FILENAMES = {
    "xgboost": "xgboost.model",  # XGBoost's legacy binary format
    "xgboost_json": "xgboost.json",
    "xgboost_ubj": "xgboost.ubj",
    "lightgbm": "model.txt",
    "treelite_checkpoint": "checkpoint.tl",
}
DEFAULT_MODEL_TYPE = "xgboost"
DEFAULT_THRESHOLD = 0.5

#: GPU-only parameters: checked, then without effect (naiad's FIL runs on CPU), as FIL
#: itself ignores them in a CPU deployment.
GPU_ONLY_CHOICES = {
    "storage_type": ("AUTO", "DENSE", "SPARSE", "SPARSE8"),
    "algo": ("ALGO_AUTO", "NAIVE", "TREE_REORG", "BATCH_TREE_REORG"),
}
GPU_ONLY_INTEGERS = ("threads_per_tree", "blocks_per_sm", "transfer_threshold")

KNOWN = frozenset({"model_type", "output_class", "predict_proba", "threshold",
                   "xgboost_allow_unknown_field", "cpu_nthread",
                   "use_experimental_optimizations", *GPU_ONLY_CHOICES, *GPU_ONLY_INTEGERS})


@dataclass(frozen=True)
class FilParameters:
    """One model's FIL parameters, checked."""

    model_type: str
    output_class: bool
    predict_proba: bool
    threshold: float
    allow_unknown_field: bool
    #: threads GTIL predicts with, per instance; None: shared out from the available cores
    cpu_nthread: int | None


def parameter(config: ModelConfig, key: str) -> str | None:
    """The ``string_value`` of ``parameters { key: KEY }``, or None when it is absent."""
    if key not in config.parameters:
        return None
    return config.parameters[key].string_value


def parse(config: ModelConfig, model_name: str) -> FilParameters:
    """Read and check the FIL parameters of ``config``."""

    def what(key: str) -> str:
        return f"model '{model_name}': parameter '{key}'"

    def boolean(key: str, default: bool | None) -> bool:
        value = parameter(config, key)
        if value is None:
            if default is None:
                raise invalid_arg(f"{what(key)} is required by the FIL backend: set it to "
                                  f"\"true\" for a classifier or \"false\" for a regressor")
            return default
        if value not in ("true", "false"):
            raise invalid_arg(f"{what(key)} must be \"true\" or \"false\", got '{value}'")
        return value == "true"

    def integer(key: str, minimum: int) -> int | None:
        value = parameter(config, key)
        if value is None:
            return None
        try:
            number = int(value.strip())
        except ValueError:
            number = None
        if number is None or number < minimum:
            raise invalid_arg(f"{what(key)} must be an integer >= {minimum}, got '{value}'")
        return number

    model_type = parameter(config, "model_type") or DEFAULT_MODEL_TYPE
    if model_type not in MODEL_FILENAMES:
        raise invalid_arg(f"{what('model_type')} must be one of "
                          f"{', '.join(MODEL_FILENAMES)}, got '{model_type}'")
    output_class = boolean("output_class", None)
    threshold = DEFAULT_THRESHOLD
    raw_threshold = parameter(config, "threshold")
    if raw_threshold is not None:
        try:
            threshold = float(raw_threshold)
        except ValueError:
            threshold = math.nan
        if not math.isfinite(threshold):
            raise invalid_arg(f"{what('threshold')} must be a number, got '{raw_threshold}'")
    for key, choices in GPU_ONLY_CHOICES.items():
        value = parameter(config, key)
        if value is not None and value not in choices:
            raise invalid_arg(f"{what(key)} must be one of {', '.join(choices)}, got '{value}'")
    for key in GPU_ONLY_INTEGERS:
        integer(key, 0)
    gpu_only = [key for key in (*GPU_ONLY_CHOICES, *GPU_ONLY_INTEGERS)
                if parameter(config, key) is not None]
    if gpu_only:
        log.info("model '%s': %s only tune FIL on a GPU; naiad's fil backend predicts on the "
                 "CPU, where they change nothing", model_name, ", ".join(gpu_only))
    if boolean("use_experimental_optimizations", False):
        log.info("model '%s': use_experimental_optimizations selects Triton FIL's alternative "
                 "CPU engine; naiad always predicts with Treelite's GTIL (same results)",
                 model_name)
    unknown = sorted(set(config.parameters) - KNOWN)
    if unknown:
        log.warning("model '%s': the fil backend ignores parameters %s", model_name,
                    ", ".join(unknown))
    nthread = integer("cpu_nthread", -1)
    if nthread == 0:
        raise invalid_arg(f"{what('cpu_nthread')} must be -1 (every core) or a thread count "
                          f">= 1, got '0'")
    return FilParameters(
        model_type=model_type,
        output_class=output_class,
        predict_proba=boolean("predict_proba", False),
        threshold=threshold,
        allow_unknown_field=boolean("xgboost_allow_unknown_field", False),
        cpu_nthread=nthread,
    )
