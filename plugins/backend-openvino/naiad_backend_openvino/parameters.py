"""What an OpenVINO model's config.pbtxt asks for: Triton's openvino backend parameters.

The keys and values are those of triton-inference-server/openvino_backend (Triton 2.51,
``src/openvino.cc``): ``PERFORMANCE_HINT`` (LATENCY, THROUGHPUT, CUMULATIVE_THROUGHPUT),
``INFERENCE_NUM_THREADS`` and ``COMPILATION_NUM_THREADS`` (non-negative numbers),
``HINT_BF16`` (YES), ``NUM_STREAMS`` (AUTO, NUMA or a number) become OpenVINO CPU
properties; ``SKIP_OV_DYNAMIC_BATCHSIZE``, ``ENABLE_BATCH_PADDING`` and
``RESHAPE_IO_LAYERS`` (YES to enable, any other value leaves them off, as in Triton) steer
how batches and shapes are handled. Values are case-insensitive, as in Triton. A bad value
fails the load naming the model, the parameter and what was expected.

Precision differs on purpose. Triton passes no inference precision unless ``HINT_BF16: YES``,
so OpenVINO's CPU plugin picks its own: bf16 on CPUs with avx512_bf16 or AMX (f16 on ARM), so
an FP32 model answers with bf16 accuracy (about 1 % off) on some machines and not on others.
naiad compiles with ``INFERENCE_PRECISION_HINT: f32`` unless the config asks for less:
``HINT_BF16: YES`` (Triton's) or naiad's ``INFERENCE_PRECISION_HINT`` (F32, BF16, F16).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from naiad.errors import invalid_arg, unsupported

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

log = logging.getLogger("naiad.backend.openvino")

PROPERTY_KEYS = ("PERFORMANCE_HINT", "INFERENCE_NUM_THREADS", "COMPILATION_NUM_THREADS",
                 "HINT_BF16", "NUM_STREAMS", "INFERENCE_PRECISION_HINT")
FLAG_KEYS = ("SKIP_OV_DYNAMIC_BATCHSIZE", "ENABLE_BATCH_PADDING", "RESHAPE_IO_LAYERS")
PERFORMANCE_HINTS = ("LATENCY", "THROUGHPUT", "CUMULATIVE_THROUGHPUT")
# INFERENCE_PRECISION_HINT's values -> OpenVINO's names (which are lower case).
PRECISIONS = {"F32": "f32", "BF16": "bf16", "F16": "f16"}
#: What a model computes in when its config asks for no precision: FP32 accuracy everywhere,
#: not OpenVINO's per-CPU default (bf16 on avx512_bf16 / AMX CPUs, f16 on ARM).
DEFAULT_PRECISION = "f32"


@dataclass(frozen=True)
class OpenVinoParameters:
    """One model's parameters, checked."""

    #: OpenVINO CPU properties for ``Core.compile_model`` (their OpenVINO names)
    properties: dict[str, Any] = field(default_factory=dict)
    #: compile the batch dimension at max_batch_size instead of leaving it dynamic
    skip_dynamic_batch: bool = False
    #: with a batch fixed at max_batch_size, pad smaller batches with zeros
    batch_padding: bool = False
    #: give the model's inputs the config's dims (-1: any size) instead of checking them
    reshape_io: bool = False


def parameter(config: ModelConfig, key: str) -> str | None:
    """The ``string_value`` of ``parameters { key: KEY }``, or None when it is absent."""
    if key not in config.parameters:
        return None
    return config.parameters[key].string_value


def parse(config: ModelConfig, model_name: str) -> OpenVinoParameters:
    """Read and check the parameters of ``config``."""

    def what(key: str) -> str:
        return f"model '{model_name}': parameter '{key}'"

    properties: dict[str, Any] = {}
    for key in PROPERTY_KEYS:
        value = parameter(config, key)
        if value is None or value == "":
            continue
        upper = value.strip().upper()
        if key in ("INFERENCE_NUM_THREADS", "COMPILATION_NUM_THREADS"):
            if not upper.isdigit():
                raise invalid_arg(f"{what(key)} must be a non-negative number, got '{value}'")
            properties[key] = int(upper)
        elif key == "HINT_BF16":
            if upper != "YES":
                raise invalid_arg(f"{what(key)} must be YES, got '{value}'")
            properties[key] = "bf16"
        elif key == "INFERENCE_PRECISION_HINT":
            if upper not in PRECISIONS:
                raise invalid_arg(f"{what(key)} must be one of {', '.join(PRECISIONS)}, "
                                  f"got '{value}'")
            properties[key] = PRECISIONS[upper]
        elif key == "NUM_STREAMS":
            if upper not in ("AUTO", "NUMA") and not upper.isdigit():
                raise invalid_arg(f"{what(key)} must be AUTO, NUMA or a number, got '{value}'")
            # OpenVINO's Python API takes AUTO and numbers; NUMA is its older name for AUTO
            # on machines with several NUMA nodes (-2, as OpenVINO defines it).
            properties[key] = ("AUTO" if upper == "AUTO" else
                               "-2" if upper == "NUMA" else int(upper))
        else:  # PERFORMANCE_HINT
            if upper not in PERFORMANCE_HINTS:
                raise invalid_arg(f"{what(key)} must be one of {', '.join(PERFORMANCE_HINTS)}, "
                                  f"got '{value}'")
            properties[key] = upper
    bf16 = properties.pop("HINT_BF16", None)
    precision = properties.get("INFERENCE_PRECISION_HINT")
    if bf16 is not None and precision not in (None, bf16):
        raise invalid_arg(f"model '{model_name}': parameters 'HINT_BF16' (YES: bf16) and "
                          f"'INFERENCE_PRECISION_HINT' ({precision.upper()}) disagree; set one")
    properties["INFERENCE_PRECISION_HINT"] = precision or bf16 or DEFAULT_PRECISION
    if parameter(config, "CPU_EXTENSION_PATH"):
        raise unsupported(f"{what('CPU_EXTENSION_PATH')}: custom CPU layer libraries are not "
                          f"supported by naiad's openvino backend")
    unknown = sorted(set(config.parameters) - set(PROPERTY_KEYS) - set(FLAG_KEYS)
                     - {"CPU_EXTENSION_PATH"})
    if unknown:
        log.warning("model '%s': the openvino backend ignores parameters %s (it reads %s)",
                    model_name, ", ".join(unknown), ", ".join((*PROPERTY_KEYS, *FLAG_KEYS)))

    def flag(key: str) -> bool:
        # Triton's ParseBoolParameter: YES (any case) turns it on, anything else leaves it off.
        return (parameter(config, key) or "").strip().lower() == "yes"

    return OpenVinoParameters(properties=properties,
                              skip_dynamic_batch=flag("SKIP_OV_DYNAMIC_BATCHSIZE"),
                              batch_padding=flag("ENABLE_BATCH_PADDING"),
                              reshape_io=flag("RESHAPE_IO_LAYERS"))
