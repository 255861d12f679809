"""The ``parameters`` of a PyTorch model's config.pbtxt, under the keys Triton documents.

Values are strings (``string_value``) as in Triton. Keys this backend does not know are left
alone, as Triton leaves them; a known key with a value it cannot read fails the load.
"""

from __future__ import annotations

from dataclasses import dataclass

from tritonclient.grpc.model_config_pb2 import ModelConfig

from naiad.errors import invalid_arg

_TRUE = frozenset({"true", "1", "on", "yes"})
_FALSE = frozenset({"false", "0", "off", "no"})


@dataclass(frozen=True, slots=True)
class TorchSettings:
    """One model's PyTorch settings. ``None`` means the key is absent: leave torch's own
    setting as it is."""

    optimized_execution: bool = True  # DISABLE_OPTIMIZED_EXECUTION inverted
    inference_mode: bool = True  # INFERENCE_MODE (Triton's default is enabled)
    cudnn: bool = True  # DISABLE_CUDNN inverted
    weight_sharing: bool = False  # ENABLE_WEIGHT_SHARING
    cache_cleaning: bool = False  # ENABLE_CACHE_CLEANING
    jit_executor: bool | None = None  # ENABLE_JIT_EXECUTOR
    jit_profiling: bool | None = None  # ENABLE_JIT_PROFILING
    tensor_fuser: bool | None = None  # ENABLE_TENSOR_FUSER
    nvfuser: bool | None = None  # ENABLE_NVFUSER
    intra_op_threads: int | None = None  # INTRA_OP_THREAD_COUNT (or NUM_THREADS)
    inter_op_threads: int | None = None  # INTER_OP_THREAD_COUNT (or NUM_INTEROP_THREADS)


def read_settings(config: ModelConfig, model: str) -> TorchSettings:
    """The settings in ``config.parameters``; raise a load error naming the model and key
    for a value that is not a boolean or a positive count."""
    params = {key: value.string_value for key, value in config.parameters.items()}

    def flag(key: str) -> bool | None:
        if key not in params:
            return None
        value = params[key].strip().lower()
        if value in _TRUE:
            return True
        if value in _FALSE:
            return False
        raise invalid_arg(f"model '{model}': parameter '{key}' must be \"true\" or \"false\", "
                          f"got \"{params[key]}\"")

    def count(key: str, alias: str) -> int | None:
        chosen = key if key in params else alias if alias in params else None
        if chosen is None:
            return None
        text = params[chosen].strip()
        if not text.isdigit() or int(text) < 1:
            raise invalid_arg(f"model '{model}': parameter '{chosen}' must be a positive "
                              f"thread count, got \"{params[chosen]}\"")
        return int(text)

    return TorchSettings(
        optimized_execution=not flag("DISABLE_OPTIMIZED_EXECUTION"),
        inference_mode=flag("INFERENCE_MODE") is not False,
        cudnn=not flag("DISABLE_CUDNN"),
        weight_sharing=bool(flag("ENABLE_WEIGHT_SHARING")),
        cache_cleaning=bool(flag("ENABLE_CACHE_CLEANING")),
        jit_executor=flag("ENABLE_JIT_EXECUTOR"),
        jit_profiling=flag("ENABLE_JIT_PROFILING"),
        tensor_fuser=flag("ENABLE_TENSOR_FUSER"),
        nvfuser=flag("ENABLE_NVFUSER"),
        intra_op_threads=count("INTRA_OP_THREAD_COUNT", "NUM_THREADS"),
        inter_op_threads=count("INTER_OP_THREAD_COUNT", "NUM_INTEROP_THREADS"),
    )
