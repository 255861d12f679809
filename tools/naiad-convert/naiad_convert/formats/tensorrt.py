"""TensorRT plans (``model.plan``), built from the ONNX export with TensorRT 10's builder and
one optimisation profile over the batch range (1 .. max_batch_size, optimum at the preferred
batch size). They run only on an NVIDIA GPU with TensorRT installed: elsewhere the format is
skipped and the report says why. naiad's TensorRT backend serves the plan.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from naiad_convert.formats.base import ExportSettings, Format, Runner

if TYPE_CHECKING:
    from naiad_convert.samples import Samples
    from naiad_convert.source import Source


def gpu_count() -> int:
    """NVIDIA GPUs visible to this process (torch's CUDA, else nvidia-smi), 0 when none."""
    try:
        import torch

        if torch.cuda.is_available():
            return int(torch.cuda.device_count())
    except ImportError:
        pass
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    import subprocess

    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30,
                                check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in listed.splitlines() if line.startswith("GPU "))


class TensorRTFormat(Format):
    name = "tensorrt"
    file_name = "model.plan"
    platform = "tensorrt_plan"
    description = "TensorRT plan, built from the ONNX export"

    def unavailable(self, source: Source, settings: ExportSettings) -> str | None:
        try:
            import tensorrt  # noqa: F401
        except ImportError:
            return "TensorRT is not installed (pip install tensorrt)"
        if gpu_count() == 0:
            return "no NVIDIA GPU is visible: TensorRT plans are built and run on a GPU"
        try:
            import torch

            if not torch.cuda.is_available():
                return ("torch has no CUDA here (a CPU build): the plan's check runs its "
                        "buffers in torch's CUDA memory")
        except ImportError:
            return "the plan's check needs torch with CUDA"
        return None

    def export(self, source: Source, samples: Samples, path: Path, settings: ExportSettings,
               previous: dict[str, Path]) -> None:
        import tensorrt as trt

        onnx_file = previous.get("onnx")
        if onnx_file is None:
            raise RuntimeError("builds from the ONNX export, which did not pass its check "
                               "(or was not in --formats)")
        logger = trt.Logger(trt.Logger.WARNING)
        builder = trt.Builder(logger)
        network = builder.create_network(0)  # TensorRT 10: explicit batch always
        parser = trt.OnnxParser(network, logger)
        if not parser.parse(onnx_file.read_bytes()):
            errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise RuntimeError(f"TensorRT's ONNX parser refused the model: {errors}")
        config = builder.create_builder_config()
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE,
                                     settings.tensorrt_workspace_bytes)
        if settings.tensorrt_fp16:
            config.set_flag(trt.BuilderFlag.FP16)
        if settings.max_batch_size > 0:
            largest = settings.max_batch_size
            optimum = min(settings.tensorrt_opt_batch or largest, largest)
            profile = builder.create_optimization_profile()
            for i in range(network.num_inputs):
                tensor = network.get_input(i)
                rest = tuple(samples.arrays[tensor.name].shape[1:])
                profile.set_shape(tensor.name, (1, *rest), (optimum, *rest), (largest, *rest))
            config.add_optimization_profile(profile)
        plan = builder.build_serialized_network(network, config)
        if plan is None:
            raise RuntimeError("TensorRT's builder returned no plan (its log above says why)")
        path.write_bytes(bytes(plan))

    def load(self, path: Path, source: Source, settings: ExportSettings) -> Runner:
        import tensorrt as trt
        import torch

        logger = trt.Logger(trt.Logger.WARNING)
        runtime = trt.Runtime(logger)  # kept alive with the engine, in the closure below
        engine = runtime.deserialize_cuda_engine(path.read_bytes())
        if engine is None:
            raise RuntimeError(f"TensorRT cannot deserialize {path}")
        context = engine.create_execution_context()
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        outputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]
        def run(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            # torch's current stream: the input copies, the execution and the output copies
            # are ordered on it, with no cross-stream synchronisation to forget
            stream = torch.cuda.current_stream()
            keep: list[Any] = [runtime, engine]
            for name, array in inputs.items():
                tensor = torch.from_numpy(np.ascontiguousarray(array)).cuda()
                keep.append(tensor)
                context.set_input_shape(name, tuple(array.shape))
                context.set_tensor_address(name, tensor.data_ptr())
            results = {}
            for name in outputs:
                shape = tuple(context.get_tensor_shape(name))
                dtype = np.dtype(trt.nptype(engine.get_tensor_dtype(name)))
                tensor = torch.empty(shape, dtype=_torch_dtype(dtype), device="cuda")
                context.set_tensor_address(name, tensor.data_ptr())
                results[name] = tensor
            if not context.execute_async_v3(stream.cuda_stream):
                raise RuntimeError("TensorRT's execute_async_v3 failed")
            stream.synchronize()
            del keep
            return {n: t.cpu().numpy() for n, t in results.items()}

        return run


def _torch_dtype(dtype: np.dtype) -> Any:
    import torch

    return torch.from_numpy(np.zeros(0, dtype=dtype)).dtype
