"""GPU metrics (``nv_gpu_*``, ``nv_energy_consumption``) read through NVML.

On a machine without an NVIDIA GPU (CI's), the metrics endpoint has no GPU lines and the
log says why; the GPU tests skip with the reason. Nothing here fakes a device."""

from __future__ import annotations

import urllib.request

import pytest
from zoo import ADD_SUB_CONFIG, ADD_SUB_PY, write_model

from naiad.metrics.gpu_lines import GPU_FAMILIES, GPUMetrics
from naiad.testing import naiad_server


def nvml_gpus() -> int:
    """How many GPUs NVML sees here (0 without nvidia-ml-py, a driver or a GPU)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return int(pynvml.nvmlDeviceGetCount())
    except Exception:
        return 0


needs_gpu = pytest.mark.skipif(nvml_gpus() == 0,
                               reason="no NVIDIA GPU visible to NVML on this machine")
no_gpu = pytest.mark.skipif(nvml_gpus() > 0, reason="this machine has an NVIDIA GPU")


def scrape(server) -> str:
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as reply:
        return reply.read().decode()


@pytest.fixture
def repo(tmp_path):
    write_model(tmp_path, "add_sub", ADD_SUB_CONFIG, ADD_SUB_PY)
    return tmp_path


@no_gpu
def test_without_a_gpu_there_are_no_gpu_lines_and_the_log_says_why(repo):
    assert GPUMetrics.probe() is None
    with naiad_server("--model-repository", str(repo)) as server:
        text = scrape(server)
        log = server.log()
    assert "nv_inference_count" in text
    assert "nv_gpu_" not in text and "nv_energy_consumption" not in text
    assert "no GPU metrics: " in log


@no_gpu
def test_allow_gpu_metrics_false_does_not_look_for_gpus(repo):
    with naiad_server("--model-repository", str(repo), "--allow-gpu-metrics=false") as server:
        scrape(server)
        log = server.log()
    assert "GPU metrics" not in log


@needs_gpu
def test_every_gpu_reports_triton_metric_families(repo):
    gpus = nvml_gpus()
    with naiad_server("--model-repository", str(repo)) as server:
        text = scrape(server)
    samples: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        if line.startswith(("nv_gpu_", "nv_energy_consumption")):
            name_labels, value = line.rsplit(" ", 1)
            name, labels = name_labels.split("{", 1)
            samples.setdefault(name, {})[labels] = float(value)
    for name, _, _ in GPU_FAMILIES:
        assert f"# TYPE {name} " in text, name
    # Utilization and memory are supported by every NVML device; power may not be.
    for name in ("nv_gpu_utilization", "nv_gpu_memory_total_bytes", "nv_gpu_memory_used_bytes"):
        assert len(samples.get(name, {})) == gpus, (name, samples)
    for labels, utilization in samples["nv_gpu_utilization"].items():
        assert labels.startswith('gpu_uuid="GPU-') and 0.0 <= utilization <= 1.0
    for labels, used in samples["nv_gpu_memory_used_bytes"].items():
        assert 0 <= used <= samples["nv_gpu_memory_total_bytes"][labels]
    for energy in samples.get("nv_energy_consumption", {}).values():
        assert energy >= 0  # counted since the server started
