"""The Prometheus endpoint (``GET /metrics`` on the metrics port), in Triton's names.

It renders the same counters the statistics extension reads (naiad.stats), so the two views
cannot disagree.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from naiad.server import InferenceServer

NS_PER_US = 1000

# (metric name, help text, type, value of a ModelStats)
_METRICS = [
    ("nv_inference_request_success", "Number of successful inference requests, all batch "
     "sizes", "counter", lambda s: s.success.count),
    ("nv_inference_request_failure", "Number of failed inference requests, all batch sizes",
     "counter", lambda s: s.fail.count),
    ("nv_inference_count", "Number of inferences performed (does not include cached "
     "requests)", "counter", lambda s: s.inference_count),
    ("nv_inference_exec_count", "Number of model executions performed (does not include "
     "cached requests)", "counter", lambda s: s.execution_count),
    ("nv_inference_request_duration_us", "Cumulative inference request duration in "
     "microseconds (includes cached requests)", "counter",
     lambda s: (s.success.ns + s.fail.ns) // NS_PER_US),
    ("nv_inference_queue_duration_us", "Cumulative inference queuing duration in "
     "microseconds (includes cached requests)", "counter", lambda s: s.queue.ns // NS_PER_US),
    ("nv_inference_compute_input_duration_us", "Cumulative compute input duration in "
     "microseconds (does not include cached requests)", "counter",
     lambda s: s.compute_input.ns // NS_PER_US),
    ("nv_inference_compute_infer_duration_us", "Cumulative compute inference duration in "
     "microseconds (does not include cached requests)", "counter",
     lambda s: s.compute_infer.ns // NS_PER_US),
    ("nv_inference_compute_output_duration_us", "Cumulative inference compute output "
     "duration in microseconds (does not include cached requests)", "counter",
     lambda s: s.compute_output.ns // NS_PER_US),
]


def render_metrics(server: InferenceServer) -> str:
    """The Prometheus text exposition of every loaded model version's counters."""
    versions = [v for record in sorted(server.models.models.values(), key=lambda r: r.name)
                for _, v in sorted(record.versions.items())]
    lines = []
    for name, help_text, kind, value in _METRICS:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        for v in versions:
            lines.append(f'{name}{{model="{v.name}",version="{v.version}"}} {value(v.stats)}')
    return "\n".join(lines) + "\n"


def metrics_app(server: InferenceServer) -> Starlette:
    async def metrics(request: Request) -> PlainTextResponse:
        return PlainTextResponse(render_metrics(server),
                                 media_type="text/plain; version=0.0.4; charset=utf-8")

    return Starlette(routes=[Route("/metrics", metrics)])
