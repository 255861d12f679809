"""The programmatic face of ``naiad perf``: describe a load, measure it, get numbers back.

``naiad analyze`` (and any script) builds a :class:`LoadSpec` and calls :func:`measure`; the
command line is a thin layer over the same call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass
class LoadSpec:
    """What to send, where, and how to decide that a measurement window is stable."""

    url: str                         # "127.0.0.1:8000" (http) / "127.0.0.1:8001" (grpc)
    model: str
    protocol: str = "http"           # "http" | "grpc"
    version: str = ""
    batch_size: int = 1
    shapes: dict[str, list[int]] = field(default_factory=dict)   # --shape NAME:dims
    input_data: str = "random"       # "zero" | "random" | path to perf_analyzer JSON
    string_length: int = 128
    shared_memory: str = "none"      # "none" | "system"
    output_shared_memory_size: int = 102400
    async_mode: bool = False
    streaming: bool = False
    sequence_length: int = 20
    sequence_id_range: tuple[int, int] | None = None
    measurement_interval_ms: int = 5000
    measurement_mode: str = "time_windows"   # | "count_windows"
    measurement_request_count: int = 50
    stability_percentage: float = 10.0
    max_trials: int = 10
    percentile: int | None = None    # stabilise on this percentile instead of the average
    workers: int = 0                 # load-generating processes; 0: chosen automatically


@dataclass
class Measurement:
    """One concurrency level (or request rate): the last stable windows, merged."""

    concurrency: int | None          # one of the two is set
    request_rate: float | None
    request_count: int
    throughput: float                # inferences per second (requests x batch size)
    latency_us: dict[str, float]     # keys "avg", "p50", "p90", "p95", "p99" (client side)
    send_recv_us: float              # client send + receive, average
    response_wait_us: float          # average
    server: dict[str, float]         # from the statistics extension, per request averages:
    # "queue_us", "compute_input_us", "compute_infer_us", "compute_output_us", "overhead_us",
    # and "request_count"
    client_cpu_percent: float        # the load generator's own CPU use
    stable: bool                     # the stability criterion was met within max_trials
    errors: int
    # Added by naiad perf beyond the contract (defaults keep older constructors working):
    latency_std_us: float = 0.0      # standard deviation of the client latency
    response_count: int = 0          # responses received (decoupled models: several each)
    delayed: int = 0                 # request-rate mode: requests sent late by over 1 ms
    duration_s: float = 0.0          # wall time of the windows merged into this measurement
    error_messages: list[str] = field(default_factory=list)   # the first few, as received


def measure(spec: LoadSpec, *, concurrency: Sequence[int] = (),
            request_rates: Sequence[float] = (), distribution: str = "constant",
            progress: Callable[[str], None] | None = None,
            on_result: Callable[[Measurement], None] | None = None) -> list[Measurement]:
    """One Measurement per concurrency level (or request rate), in order.

    ``progress`` gets a line per measurement window; ``on_result`` (an addition to the
    contract) each Measurement as soon as its level is done. Raises naiad_perf.PerfError
    for what the user must fix (model not ready, bad shape or data, server errors).
    Worker processes are spawned: a script calling this needs ``if __name__ == "__main__":``.
    """
    from naiad_perf.runner import run_levels

    return run_levels(spec, concurrency=concurrency, request_rates=request_rates,
                      distribution=distribution, progress=progress, on_result=on_result)
