"""The Prometheus endpoint (``GET /metrics`` on the metrics port), in Triton's names.

It renders the same counters the statistics extension reads (naiad.metrics.stats), so the two views
cannot disagree. Label names are sorted, as Triton prints them. The response cache's lines
are in cache_lines, the histograms, summaries and batch reasons in latency_lines;
docs/metrics.md lists every family.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from naiad.metrics import cache_lines, latency_lines, prometheus_text
from naiad.metrics.custom_metrics import CustomMetrics, MetricKind
from naiad.metrics.gpu_lines import GPUMetrics
from naiad.metrics.stats import FAILURE_REASONS, ModelStats
from naiad.models.records import ModelVersion
from naiad.server import InferenceServer

NS_PER_US = 1000
FIRST_RESPONSE = "nv_inference_first_response_histogram_ms"

_COUNTERS = [
    ("nv_inference_request_success",
     "Number of successful inference requests, all batch sizes",
     lambda s: s.success.count),
    ("nv_inference_count",
     "Number of inferences performed (does not include cached requests)",
     lambda s: s.inference_count),
    ("nv_inference_exec_count",
     "Number of model executions performed (does not include cached requests)",
     lambda s: s.execution_count),
    ("nv_inference_request_duration_us",
     "Cumulative inference request duration in microseconds (includes cached requests)",
     lambda s: (s.success.ns + s.fail.ns) // NS_PER_US),
    ("nv_inference_queue_duration_us",
     "Cumulative inference queuing duration in microseconds (includes cached requests)",
     lambda s: s.queue.ns // NS_PER_US),
    ("nv_inference_compute_input_duration_us",
     "Cumulative compute input duration in microseconds (does not include cached requests)",
     lambda s: s.compute_input.ns // NS_PER_US),
    ("nv_inference_compute_infer_duration_us",
     "Cumulative compute inference duration in microseconds (does not include cached "
     "requests)", lambda s: s.compute_infer.ns // NS_PER_US),
    ("nv_inference_compute_output_duration_us",
     "Cumulative inference compute output duration in microseconds (does not include cached "
     "requests)", lambda s: s.compute_output.ns // NS_PER_US),
]


def _family(lines: list[str], name: str, help_text: str, kind: str) -> None:
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} {kind}")


def _memory() -> tuple[int, int]:
    """(total, used) bytes of RAM from /proc/meminfo; (0, 0) where there is none."""
    info = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                info[key] = int(value.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return 0, 0
    total = info.get("MemTotal", 0)
    return total, total - info.get("MemAvailable", info.get("MemFree", 0))


class CpuUtilization:
    """Busy share of all cores between two scrapes, from /proc/stat (as Triton reports)."""

    def __init__(self) -> None:
        self._last = self._read()

    @staticmethod
    def _read() -> tuple[int, int]:
        try:
            with open("/proc/stat") as f:
                values = [int(v) for v in f.readline().split()[1:]]
        except (OSError, ValueError):
            return 0, 0
        idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
        return sum(values), idle

    def sample(self) -> float:
        total, idle = self._read()
        last_total, last_idle = self._last
        self._last = (total, idle)
        if total <= last_total:
            return 0.0
        return max(0.0, min(1.0, 1 - (idle - last_idle) / (total - last_total)))


def _restarts(version: ModelVersion) -> int:
    instances = [worker.instance for worker in version.context.workers]  # an unload clears
    return sum(instance.health().restarts for instance in instances if instance is not None)


def _first_responses(lines: list[str], versions: list[ModelVersion]) -> None:
    """nv_inference_first_response_histogram_ms of the versions that record it (decoupled
    models, with ``--metrics-config histogram_latencies=true``)."""
    timed = [(v, v.first_response) for v in versions if v.first_response is not None]
    if not timed:
        return
    prometheus_text.family_header(lines, FIRST_RESPONSE, "Duration from request to first "
                                  "response in milliseconds", "histogram")
    for version, histogram in timed:
        prometheus_text.histogram(lines, FIRST_RESPONSE, [("model", version.name),
                                                          ("version", str(version.version))],
                                  histogram.snapshot())


def _custom(lines: list[str], metrics: CustomMetrics) -> None:
    """The families models defined (Python models' ``pb_utils.MetricFamily``)."""
    for family in metrics.snapshot():
        prometheus_text.family_header(lines, family.name, family.description,
                                      family.kind.value)
        if family.kind is MetricKind.HISTOGRAM:
            for labels, histogram in family.samples:
                prometheus_text.histogram(lines, family.name, labels,
                                          histogram)  # type: ignore[arg-type]
        else:
            for labels, value in family.samples:
                prometheus_text.sample(lines, family.name, labels,
                                       value)  # type: ignore[arg-type]


def render_metrics(server: InferenceServer, cpu: CpuUtilization | None,
                   gpu: GPUMetrics | None = None) -> str:
    """The Prometheus text exposition of every loaded model version, of the GPUs NVML sees
    (``gpu``), of the response cache and, unless ``cpu`` is None
    (``--allow-cpu-metrics=false``), of the host. ``--metrics-config`` decides which latency
    families there are."""
    config = server.options.load.metrics
    versions = [v for record in sorted(server.models.models.values(), key=lambda r: r.name)
                for _, v in sorted(record.versions.items())]
    stats: list[ModelStats] = [v.stats for v in versions]
    lines: list[str] = []
    for name, help_text, value in _COUNTERS[:1]:
        _family(lines, name, help_text, "counter")
        lines.extend(f'{name}{{model="{s.name}",version="{s.version}"}} {value(s)}'
                     for s in stats)
    _family(lines, "nv_inference_request_failure",
            "Number of failed inference requests, all batch sizes", "counter")
    for s in stats:
        for reason in FAILURE_REASONS:
            count = s.failures.get(reason, 0)
            lines.append(f'nv_inference_request_failure{{model="{s.name}",reason="{reason}",'
                         f'version="{s.version}"}} {count}')
    # counter_latencies=false removes the duration counters and the cache counters, as in
    # Triton (which also stops the counts, a bug naiad does not copy: docs/metrics.md)
    counters = [c for c in _COUNTERS[1:]
                if config.counter_latencies or not c[0].endswith("_duration_us")]
    for name, help_text, value in counters:
        _family(lines, name, help_text, "counter")
        lines.extend(f'{name}{{model="{s.name}",version="{s.version}"}} {value(s)}'
                     for s in stats)
    if config.counter_latencies:
        cache_lines.render_per_model(
            lines, [v.stats for v in versions if v.config.response_cache.enable])
    _family(lines, "nv_inference_pending_request_count",
            "Instantaneous number of pending requests awaiting execution per-model.", "gauge")
    lines.extend(f'nv_inference_pending_request_count{{model="{v.name}",version="{v.version}"}}'
                 f' {v.scheduler.pending()}' for v in versions)
    _family(lines, "naiad_instance_restarts_total",
            "Number of times a model instance was started again after it failed (its worker "
            "process ended)", "counter")
    lines.extend(f'naiad_instance_restarts_total{{model="{v.name}",version="{v.version}"}}'
                 f' {_restarts(v)}' for v in versions)
    distributions = [(v, snapshot) for v in versions
                     if (snapshot := v.stats.distributions_snapshot()) is not None]
    latency_lines.render_histograms(lines, distributions)
    latency_lines.render_batch_cuts(lines, versions)
    _first_responses(lines, versions)
    _custom(lines, server.models.custom_metrics)
    if gpu is not None:
        gpu.render(lines, _family)
    if cpu is not None:
        _host(lines, cpu)
    cache_lines.render_server_wide(lines, server.cache.cache if server.cache else None)
    latency_lines.render_summaries(lines, distributions)
    return "\n".join(lines) + "\n"


def _host(lines: list[str], cpu: CpuUtilization) -> None:
    total, used = _memory()
    _family(lines, "nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", "gauge")
    lines.append(f"nv_cpu_memory_total_bytes {total}")
    _family(lines, "nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", "gauge")
    lines.append(f"nv_cpu_memory_used_bytes {used}")
    _family(lines, "nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", "gauge")
    lines.append(f"nv_cpu_utilization {cpu.sample():.4f}")


def metrics_app(server: InferenceServer, cpu_metrics: bool = True,
                gpu_metrics: bool = True) -> Starlette:
    cpu = CpuUtilization() if cpu_metrics else None
    gpu = GPUMetrics.probe() if gpu_metrics else None

    async def metrics(request: Request) -> Response:
        return Response(render_metrics(server, cpu, gpu), media_type="text/plain; charset=utf-8")

    return Starlette(routes=[Route("/metrics", metrics)])
