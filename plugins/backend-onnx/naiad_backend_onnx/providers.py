"""Choosing ONNX Runtime execution providers for an instance, as Triton's onnxruntime backend.

A KIND_GPU instance runs on ``CUDAExecutionProvider`` (on the instance's ``device_id``), with
``TensorrtExecutionProvider`` in front of it when ``optimization { execution_accelerators {
gpu_execution_accelerator: [ { name: "tensorrt" } ] } }`` asks for it. Every instance may add
``cpu_execution_accelerator: [ { name: "openvino" } ]``, and ``CPUExecutionProvider`` always
comes last, for the nodes no other provider takes. A provider the installed onnxruntime does
not offer fails the load with the package to install: naiad never quietly runs a GPU
instance on the CPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from naiad.errors import invalid_arg, unavailable
from naiad.settings import boolean, integer
from naiad_backend_onnx.settings import parameter

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from naiad.types import InstanceInfo

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
TENSORRT = "TensorrtExecutionProvider"
OPENVINO = "OpenVINOExecutionProvider"

Provider = tuple[str, dict[str, str]]

GPU_ACCELERATORS = ("tensorrt", "cuda")
CPU_ACCELERATORS = ("openvino",)

# Triton's TensorRT accelerator parameters passed to the TensorRT provider under the same
# name, by the kind of value each takes (precision_mode and the two renamed keys aside).
_TRT_INT = frozenset({
    "trt_max_partition_iterations", "trt_min_subgraph_size", "trt_dla_core",
    "trt_builder_optimization_level", "trt_auxiliary_streams", "trt_ep_context_embed_mode",
})
_TRT_BOOL = frozenset({
    "trt_dla_enable", "trt_engine_cache_enable", "trt_dump_subgraphs",
    "trt_force_sequential_engine_build", "trt_context_memory_sharing_enable",
    "trt_layer_norm_fp32_fallback", "trt_timing_cache_enable", "trt_force_timing_cache",
    "trt_detailed_build_log", "trt_build_heuristics_enable", "trt_sparsity_enable",
    "trt_cuda_graph_enable", "trt_dump_ep_context_model",
})
_TRT_STRING = frozenset({
    "trt_engine_cache_path", "trt_engine_cache_prefix", "trt_timing_cache_path",
    "trt_tactic_sources", "trt_extra_plugin_lib_paths", "trt_profile_min_shapes",
    "trt_profile_max_shapes", "trt_profile_opt_shapes", "trt_ep_context_file_path",
})
_TRT_PRECISIONS = {"FP32": None, "FP16": "trt_fp16_enable", "BF16": "trt_bf16_enable",
                   "INT8": "trt_int8_enable"}

# Triton's older way to set CUDA provider options: model-level parameters with int codes.
_CUDNN_SEARCH = {"0": "EXHAUSTIVE", "1": "HEURISTIC", "2": "DEFAULT"}
_ARENA_STRATEGY = {"0": "kNextPowerOfTwo", "1": "kSameAsRequested"}
_CUDA_BOOLS = frozenset({"do_copy_in_default_stream", "use_ep_level_unified_stream"})


def check_accelerators(config: ModelConfig, model_name: str) -> None:
    """Refuse accelerator names this backend does not know (checked for every instance
    kind, so a typo shows at once and not only on a GPU machine)."""
    accelerators = config.optimization.execution_accelerators
    for kind, known, entries in (
            ("gpu_execution_accelerator", GPU_ACCELERATORS,
             accelerators.gpu_execution_accelerator),
            ("cpu_execution_accelerator", CPU_ACCELERATORS,
             accelerators.cpu_execution_accelerator)):
        for entry in entries:
            if entry.name not in known:
                raise invalid_arg(
                    f"model '{model_name}': unknown execution accelerator '{entry.name}' in "
                    f"{kind}; the onnxruntime backend knows "
                    f"{' and '.join(repr(k) for k in known)}")


def select_providers(config: ModelConfig, model_name: str, instance: InstanceInfo,
                     available: Sequence[str]) -> list[Provider]:
    """The providers, best first, with their options, for ``instance`` of the model;
    ``available`` is ``onnxruntime.get_available_providers()``."""
    check_accelerators(config, model_name)
    accelerators = config.optimization.execution_accelerators
    where = f"model '{model_name}' instance '{instance.name}'"
    providers: list[Provider] = []
    if instance.kind == "KIND_GPU":
        if CUDA not in available:
            raise unavailable(
                f"{where} is KIND_GPU but the installed onnxruntime has no {CUDA} (it offers "
                f"{', '.join(available)}): install onnxruntime-gpu in place of onnxruntime, "
                f"or use instance_group {{ kind: KIND_CPU }}")
        device = str(instance.device_id)
        cuda = cuda_options(config, model_name)
        for entry in accelerators.gpu_execution_accelerator:
            if entry.name == "tensorrt":
                if TENSORRT not in available:
                    raise unavailable(
                        f"{where} asks for the 'tensorrt' execution accelerator but the "
                        f"installed onnxruntime has no {TENSORRT} (it offers "
                        f"{', '.join(available)}): install an onnxruntime-gpu build with "
                        f"TensorRT support")
                options = tensorrt_options(dict(entry.parameters), model_name)
                options["device_id"] = device
                providers.append((TENSORRT, options))
            else:  # "cuda": options for the CUDA provider itself
                for key, value in entry.parameters.items():
                    if key in _CUDA_BOOLS:
                        value = _flag(key, value, _cuda_where(model_name))
                    cuda[key] = value
        cuda["device_id"] = device
        providers.append((CUDA, cuda))
    if accelerators.cpu_execution_accelerator:  # "openvino", the one CPU accelerator
        if OPENVINO not in available:
            raise unavailable(
                f"{where} asks for the 'openvino' execution accelerator but the installed "
                f"onnxruntime has no {OPENVINO} (it offers {', '.join(available)}): install "
                f"onnxruntime-openvino in place of onnxruntime")
        providers.append((OPENVINO, {"device_type": "CPU"}))
    providers.append((CPU, {}))
    return providers


def tensorrt_options(parameters: dict[str, str], model_name: str) -> dict[str, str]:
    """Triton's TensorRT accelerator parameters as TensorRT provider options."""
    options: dict[str, str] = {}
    for key, value in parameters.items():
        where = f"model '{model_name}': TensorRT accelerator parameter "
        what = f"{where}'{key}'"
        if key == "precision_mode":
            if value not in _TRT_PRECISIONS:
                raise invalid_arg(f"{what} must be one of {', '.join(_TRT_PRECISIONS)}, "
                                  f"got '{value}'")
            flag = _TRT_PRECISIONS[value]
            if flag is not None:
                options[flag] = "1"
        elif key == "max_workspace_size_bytes":
            options["trt_max_workspace_size"] = str(integer(key, value, minimum=0,
                                                                    unit="bytes", where=where))
        elif key == "int8_calibration_table_name":
            options["trt_int8_calibration_table_name"] = value
        elif key == "int8_use_native_calibration_table":
            options["trt_int8_use_native_calibration_table"] = _flag(key, value, where)
        elif key in _TRT_INT:
            options[key] = str(integer(key, value, where=where))
        elif key in _TRT_BOOL:
            options[key] = _flag(key, value, where)
        elif key in _TRT_STRING:
            options[key] = value
        else:
            raise invalid_arg(f"model '{model_name}': unknown parameter '{key}' for the "
                              f"TensorRT execution accelerator")
    return options


def cuda_options(config: ModelConfig, model_name: str) -> dict[str, str]:
    """CUDA provider options from the model-level parameters Triton still honours
    (``cudnn_conv_algo_search``, ``gpu_mem_limit``, ``arena_extend_strategy``,
    ``do_copy_in_default_stream``); unset ones keep ONNX Runtime's defaults."""
    options: dict[str, str] = {}
    for key, codes in (("cudnn_conv_algo_search", _CUDNN_SEARCH),
                       ("arena_extend_strategy", _ARENA_STRATEGY)):
        value = parameter(config, key)
        if value is None:
            continue
        if value.strip() not in codes:
            raise invalid_arg(f"{_cuda_what(model_name, key)} must be one of "
                              f"{', '.join(f'{c} ({n})' for c, n in codes.items())}, "
                              f"got '{value}'")
        options[key] = codes[value.strip()]
    value = parameter(config, "gpu_mem_limit")
    if value is not None:
        options["gpu_mem_limit"] = str(integer("gpu_mem_limit", value, minimum=0, unit="bytes",
                                                where=_cuda_where(model_name)))
    value = parameter(config, "do_copy_in_default_stream")
    if value is not None:
        options["do_copy_in_default_stream"] = _flag("do_copy_in_default_stream", value,
                                                     _cuda_where(model_name))
    return options


def _cuda_what(model_name: str, key: str) -> str:
    return f"model '{model_name}': CUDA parameter '{key}'"


def _cuda_where(model_name: str) -> str:
    return f"model '{model_name}': CUDA parameter "


def _flag(key: str, value: str, where: str) -> str:
    return "1" if boolean(key, value, where=where) else "0"
