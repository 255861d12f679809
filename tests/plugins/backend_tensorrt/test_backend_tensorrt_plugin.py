"""The plugin's registration, its lazy imports, and the load errors that need no device:
what a machine without a GPU, without tensorrt or with a KIND_CPU instance group is told."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import subprocess
import sys
import types
from pathlib import Path

import pytest
from backend_tensorrt_helpers import NOT_AN_ENGINE, parse_config

from naiad.errors import InferenceServerError, Status
from naiad.gpus import gpu_count
from naiad.plugins import PluginManager
from naiad.types import InstanceInfo, ModelContext
from naiad_backend_tensorrt import TensorRTBackend, plugin
from naiad_backend_tensorrt.backend import engine_filename, placement_problems
from naiad_backend_tensorrt.cuda import Cuda
from naiad_backend_tensorrt.engine import import_tensorrt, missing_packages

NO_GPU = gpu_count() == 0
needs_no_gpu = pytest.mark.skipif(not NO_GPU, reason="checks the errors of a machine without "
                                                     "a GPU; this one has one")
GPU_CONFIG = """
name: "detector"
platform: "tensorrt_plan"
max_batch_size: 8
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 4 ] } ]
instance_group [ { name: "gpus", kind: KIND_GPU } ]
"""


def test_entry_point_is_registered():
    found = importlib.metadata.entry_points(group="naiad.backends", name="tensorrt")
    assert [ep.value for ep in found] == ["naiad_backend_tensorrt.plugin"]
    assert next(iter(found)).load() is plugin


def test_plugin_imports_and_loads_without_tensorrt_or_cuda():
    # A fresh interpreter: this process may have imported cuda.bindings in other tests.
    code = (
        "import sys\n"
        "import naiad_backend_tensorrt.plugin\n"
        "from naiad.plugins import PluginManager\n"
        "backend = PluginManager().backend('tensorrt', {})\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('tensorrt', 'cuda'))\n"
        "print(type(backend).__name__, backend.default_model_filename, heavy)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, check=True)
    assert result.stdout.split() == ["TensorRTBackend", "model.plan", "[]"]


def test_the_hook_claims_only_tensorrt():
    backend = plugin.naiad_backend("tensorrt", {"k": "v"})
    assert isinstance(backend, TensorRTBackend)
    assert backend.name == "tensorrt"
    assert backend.backend_config == {"k": "v"}
    assert plugin.naiad_backend("onnxruntime", {}) is None
    assert isinstance(PluginManager().backend("tensorrt", {}), TensorRTBackend)


# --- missing packages -------------------------------------------------------------------

def test_tensorrt_that_cannot_be_imported_names_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # what `import` sees when absent
    with pytest.raises(InferenceServerError) as caught:
        import_tensorrt("detector")
    error = caught.value
    assert error.status is Status.UNAVAILABLE
    assert error.message.startswith("model 'detector': the TensorRT backend needs the "
                                    "'tensorrt' Python package, which cannot be imported")
    assert "pip install tensorrt'" in error.message
    assert "pip install tensorrt-cu12'" in error.message


def test_tensorrt_older_than_10_is_refused(monkeypatch):
    old = types.ModuleType("tensorrt")
    old.__version__ = "8.6.1"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tensorrt", old)
    with pytest.raises(InferenceServerError) as caught:
        import_tensorrt("detector")
    assert caught.value.message == ("model 'detector': TensorRT 8.6.1 is installed, but the "
                                    "TensorRT backend needs TensorRT 10 or newer")


def test_the_cuda_binding_that_cannot_be_imported_names_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    with pytest.raises(InferenceServerError) as caught:
        Cuda.load("detector")
    assert caught.value.status is Status.UNAVAILABLE
    assert "'pip install cuda-bindings'" in caught.value.message


def test_missing_packages_names_each_distribution(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    assert missing_packages() == ["tensorrt", "cuda-bindings"]


def test_missing_packages_sees_what_is_installed():
    expected = [package for module, package in (("tensorrt", "tensorrt"),
                                                ("cuda.bindings", "cuda-bindings"))
                if not _installed(module)]
    assert missing_packages() == expected


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


# --- the CUDA wrapper, for real, on a machine without a driver ------------------------------

@needs_no_gpu
def test_cuda_calls_fail_with_cudas_own_error_name():
    if not _installed("cuda.bindings"):
        pytest.skip("cuda-bindings is not installed (pip install cuda-bindings)")
    cuda = Cuda.load("detector")
    for call, attempt in (("cudaGetDeviceCount()", cuda.device_count),
                          ("cudaMalloc(64 bytes)", lambda: cuda.malloc(64)),
                          ("cudaSetDevice(0)", lambda: cuda.set_device(0))):
        with pytest.raises(InferenceServerError) as caught:
            attempt()
        assert caught.value.status is Status.INTERNAL
        # e.g. "cudaErrorInsufficientDriver (CUDA driver version is insufficient ...)"
        assert caught.value.message.startswith(f"CUDA call {call} failed: cudaError"), \
            caught.value.message
    assert Cuda.handle(cuda.rt.cudaStream_t(0)) == 0


# --- placement: kind, GPU, packages -----------------------------------------------------

def _context(tmp_path: Path, config_text: str) -> ModelContext:
    config = parse_config(config_text)
    version_dir = tmp_path / config.name / "1"
    version_dir.mkdir(parents=True)
    (version_dir / "model.plan").write_bytes(NOT_AN_ENGINE)
    return ModelContext(name=config.name, version=1, config=config,
                        model_dir=version_dir.parent, version_dir=version_dir,
                        repository=tmp_path, backend_config={})


def test_a_cpu_instance_is_refused_before_anything_loads(tmp_path):
    context = _context(tmp_path, GPU_CONFIG.replace("KIND_GPU", "KIND_CPU"))
    info = InstanceInfo(name="gpus_0", kind="KIND_CPU", device_id=0, index=0)
    with pytest.raises(InferenceServerError) as caught:
        TensorRTBackend().create_instance(context, info)
    assert caught.value.status is Status.UNAVAILABLE
    assert caught.value.message == (
        "model 'detector': instance 'gpus_0' has kind KIND_CPU, but a TensorRT engine runs only "
        "on an NVIDIA GPU; use kind: KIND_GPU")


@needs_no_gpu
def test_a_gpu_instance_without_a_gpu_names_every_problem(tmp_path):
    context = _context(tmp_path, GPU_CONFIG)
    info = InstanceInfo(name="gpus_0", kind="KIND_GPU", device_id=0, index=0)
    with pytest.raises(InferenceServerError) as caught:
        TensorRTBackend().create_instance(context, info)
    message = caught.value.message
    assert message.startswith("model 'detector' cannot load: TensorRT engines run only on an "
                              "NVIDIA GPU and this machine has none")
    missing = missing_packages()
    if missing:
        assert f"(pip install {' '.join(missing)})" in message


def test_placement_problems_names_each_group_not_on_a_gpu():
    config = parse_config(GPU_CONFIG.replace(
        'instance_group [ { name: "gpus", kind: KIND_GPU } ]',
        'instance_group [ { name: "a", kind: KIND_CPU }, { name: "b", kind: KIND_MODEL }, '
        '{ name: "c", kind: KIND_AUTO }, { name: "d", kind: KIND_GPU } ]'))
    problems = placement_problems(config, "detector")
    assert problems[:2] == [
        "instance group 'a' has kind KIND_CPU, but a TensorRT engine runs only on an NVIDIA "
        "GPU (use kind: KIND_GPU)",
        "instance group 'b' has kind KIND_MODEL, but a TensorRT engine runs only on an NVIDIA "
        "GPU (use kind: KIND_GPU)"]
    assert len(problems) == 2 + NO_GPU + bool(missing_packages())


@needs_no_gpu
def test_auto_complete_without_a_gpu_says_why_before_reading_the_engine(tmp_path):
    context = _context(tmp_path, GPU_CONFIG)
    with pytest.raises(InferenceServerError) as caught:
        TensorRTBackend().auto_complete_config(context.config, context.model_dir)
    assert caught.value.status is Status.UNAVAILABLE
    assert "this machine has none" in caught.value.message


# --- which engine file ------------------------------------------------------------------

def test_engine_filename_prefers_the_compute_capability_entry():
    config = parse_config('name: "m"\ncc_model_filenames { key: "8.6" value: "ampere.plan" }')
    assert engine_filename(config, "8.6") == "ampere.plan"
    assert engine_filename(config, "9.0") == "model.plan"
    config.default_model_filename = "custom.plan"
    assert engine_filename(config, "9.0") == "custom.plan"
