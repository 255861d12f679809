"""A model of a server for naiad analyze's unit tests: a repository API that records loads
and a ``measure`` whose figures follow from the configuration loaded (more instances and
dynamic batching serve more, up to a ceiling), so searches can be checked without load."""

from __future__ import annotations

import copy
from typing import Any

from naiad_perf.api import LoadSpec, Measurement

MLP_CONFIG: dict[str, Any] = {
    "name": "mlp",
    "backend": "onnxruntime",
    "platform": "onnxruntime_onnx",
    "max_batch_size": 8,
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": ["16"]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": ["4"]}],
    "instance_group": [{"name": "mlp", "kind": "KIND_CPU", "count": 1, "gpus": []}],
    "parameters": {},
}


class FakeServer:
    """Stands in for :class:`naiad_perf.analyze.target.Server`."""

    def __init__(self, config: dict[str, Any], gpus: int | None = 0,
                 refuse: set[int] | None = None) -> None:
        self.url = "127.0.0.1:1"
        self.pid = None
        self.loaded = copy.deepcopy(config)
        self.original = copy.deepcopy(config)
        self.loads: list[dict[str, Any]] = []
        self.gpus = gpus
        self.refuse = refuse or set()  # instance counts whose load fails

    def config(self, model: str) -> dict[str, Any]:
        return copy.deepcopy(self.loaded)

    def load(self, model: str, config: dict[str, Any]) -> None:
        from naiad_perf.analyze.target import LoadFailed

        count = config["instance_group"][0].get("count", 1)
        if count in self.refuse:
            raise LoadFailed(f"instance count {count} refused")
        self.loads.append(copy.deepcopy(config))
        self.loaded = copy.deepcopy(config)

    def gpu_count(self) -> int | None:
        return self.gpus


def capacity(config: dict[str, Any]) -> float:
    """Inferences per second the modelled server gives ``config``: each instance serves
    100/s, dynamic batching doubles it, never above 500/s."""
    count = config["instance_group"][0]["count"]
    batching = 2.0 if "dynamic_batching" in config else 1.0
    return min(100.0 * count * batching, 500.0)


class FakeMeasure:
    """``measure`` for a :class:`FakeServer`: latency = concurrency / throughput (Little's
    law); optionally raises KeyboardInterrupt at call number ``interrupt_at`` (1-based)."""

    def __init__(self, server: FakeServer, interrupt_at: int | None = None) -> None:
        self.server = server
        self.calls = 0
        self.interrupt_at = interrupt_at

    def __call__(self, spec: LoadSpec, *, concurrency: list[int], progress: Any = None,
                 **_: Any) -> list[Measurement]:
        self.calls += 1
        if self.calls == self.interrupt_at:
            raise KeyboardInterrupt
        rate = capacity(self.server.loaded)
        results = []
        for level in concurrency:
            throughput = min(rate, level * 1000.0)
            latency_us = level / throughput * 1e6
            latency = {"avg": latency_us, "p50": latency_us, "p90": latency_us * 1.1,
                       "p95": latency_us * 1.2, "p99": latency_us * 1.5}
            results.append(Measurement(
                concurrency=level, request_rate=None, request_count=100,
                throughput=throughput, latency_us=latency, send_recv_us=10.0,
                response_wait_us=latency_us, server={"queue_us": 1.0, "compute_infer_us": 5.0},
                client_cpu_percent=1.0, stable=True, errors=0))
        return results
