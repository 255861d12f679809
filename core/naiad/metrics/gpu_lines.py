"""GPU metrics through NVML, with Triton's names: ``nv_gpu_utilization``,
``nv_gpu_memory_total_bytes``, ``nv_gpu_memory_used_bytes``, ``nv_gpu_power_usage``,
``nv_gpu_power_limit`` and ``nv_energy_consumption``, one series per GPU labelled
``gpu_uuid``.

NVML is read with ``nvidia-ml-py`` (``pip install 'naiad[gpu]'``). Whether there is anything
to read is found out once, when the metrics endpoint starts: without the package, without an
NVIDIA driver, or without a GPU, the endpoint has no GPU lines and the log says why. A
reading a GPU does not support (power on some boards) is left out for that GPU alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("naiad.metrics")

MILLI = 1000  # NVML reports milliwatts and millijoules

# (metric, HELP text, Prometheus type)
GPU_FAMILIES = (
    ("nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)", "gauge"),
    ("nv_gpu_memory_total_bytes", "GPU total memory, in bytes", "gauge"),
    ("nv_gpu_memory_used_bytes", "GPU used memory, in bytes", "gauge"),
    ("nv_gpu_power_usage", "GPU power usage in watts", "gauge"),
    ("nv_gpu_power_limit", "GPU power management limit in watts", "gauge"),
    ("nv_energy_consumption", "GPU energy consumption in joules since the server started",
     "counter"),
)


class GPUMetrics:
    """The NVML devices of this machine and how to read each metric from one."""

    def __init__(self, nvml: Any, devices: list[tuple[str, Any]]) -> None:
        self.nvml = nvml
        self.devices = devices  # (uuid, handle)
        # Energy is reported since the server started, as Triton does.
        self.energy_at_start = {uuid: self._energy_mj(handle) for uuid, handle in devices}
        readers: dict[str, Callable[[str, Any], float | None]] = {
            "nv_gpu_utilization": lambda _, h: nvml.nvmlDeviceGetUtilizationRates(h).gpu / 100,
            "nv_gpu_memory_total_bytes": lambda _, h: nvml.nvmlDeviceGetMemoryInfo(h).total,
            "nv_gpu_memory_used_bytes": lambda _, h: nvml.nvmlDeviceGetMemoryInfo(h).used,
            "nv_gpu_power_usage": lambda _, h: nvml.nvmlDeviceGetPowerUsage(h) / MILLI,
            "nv_gpu_power_limit": lambda _, h: nvml.nvmlDeviceGetEnforcedPowerLimit(h) / MILLI,
            "nv_energy_consumption": self._energy_since_start,
        }
        self.readers = readers

    @classmethod
    def probe(cls) -> GPUMetrics | None:
        """The GPUs NVML can see, or None (and a log line saying why) when there are none."""
        try:
            import pynvml
        except ImportError:
            log.info("no GPU metrics: nvidia-ml-py is not installed (pip install 'naiad[gpu]')")
            return None
        try:
            pynvml.nvmlInit()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i)
                       for i in range(pynvml.nvmlDeviceGetCount())]
            devices = [(_text(pynvml.nvmlDeviceGetUUID(h)), h) for h in handles]
        except pynvml.NVMLError as exc:
            log.info("no GPU metrics: NVML: %s", exc)
            return None
        if not devices:
            log.info("no GPU metrics: NVML sees no GPU")
            return None
        log.info("GPU metrics for %s", ", ".join(uuid for uuid, _ in devices))
        return cls(pynvml, devices)

    def render(self, lines: list[str], family: Callable[[list[str], str, str, str], None]
               ) -> None:
        """Append every family's HELP/TYPE lines (``family``) and one sample per GPU."""
        for name, help_text, kind in GPU_FAMILIES:
            family(lines, name, help_text, kind)
            read = self.readers[name]
            for uuid, handle in self.devices:
                try:
                    value = read(uuid, handle)
                except self.nvml.NVMLError:  # not supported by this GPU, or gone
                    continue
                if value is not None:
                    lines.append(f'{name}{{gpu_uuid="{uuid}"}} {_number(value)}')

    def _energy_mj(self, handle: Any) -> int | None:
        try:
            return int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
        except self.nvml.NVMLError:
            return None

    def _energy_since_start(self, uuid: str, handle: Any) -> float | None:
        start = self.energy_at_start.get(uuid)
        now = self._energy_mj(handle)
        if start is None or now is None:
            return None
        return (now - start) / MILLI


def _number(value: float) -> str:
    # Byte counts stay exact integers; the rest print as Python floats do.
    return str(value) if isinstance(value, int) else repr(float(value))


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
