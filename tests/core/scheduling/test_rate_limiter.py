"""The rate limiter (``--rate-limit=execution_count``), in the pattern of Triton's
qa/L0_rate_limiter: start-up errors for counts that can never be met and for a resource that is
both global and per device (Triton's messages); two instances sharing one resource never run
together; with the resource scarce, an instance of priority 1 runs twice as often as one of
priority 2 (test_cross_model_prioritization_limited_resource asks for a ratio above 1.8); with
plenty, both run freely. Unit tests drive RateLimiter with real worker threads; the end-to-end
tests serve Python models with ``naiad serve``.
"""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import wait
from pathlib import Path
from textwrap import dedent

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from naiad.errors import InferenceServerError
from naiad.scheduling.rate_limiter import (
    RateLimitedWorker,
    RateLimiter,
    ResourceFlag,
    parse_resource_flag,
)
from naiad.scheduling.worker import InstanceWorker
from naiad.testing import naiad_server
from naiad.types import InferenceResponse, InstanceInfo

# --- unit: the limiter with real instance threads -------------------------------------------


def config(groups: str, name: str = "m") -> ModelConfig:
    return text_format.Parse(f'name: "{name}" backend: "python" {groups}', ModelConfig())


def instances(cfg: ModelConfig) -> list[InstanceInfo]:
    out = []
    for group in cfg.instance_group:
        for _ in range(max(group.count, 1)):
            out.append(InstanceInfo(f"{group.name}_{len(out)}", "KIND_CPU", 0, len(out)))
    return out


def named(cfg: ModelConfig) -> ModelConfig:
    for i, group in enumerate(cfg.instance_group):
        group.name = group.name or f"{cfg.name}_{i}"
    return cfg


class Recorder:
    """An instance that sleeps and records when it ran."""

    def __init__(self, log: list[tuple[str, float, float]], name: str, delay: float) -> None:
        self.log, self.name, self.delay = log, name, delay
        self.asynchronous = False

    def execute(self, requests: list[object]) -> list[InferenceResponse]:
        start = time.monotonic()
        time.sleep(self.delay)
        self.log.append((self.name, start, time.monotonic()))
        return [InferenceResponse() for _ in requests]

    def close(self) -> None:
        pass


def limited_workers(limiter: RateLimiter, cfg: ModelConfig, log: list[tuple[str, float, float]],
                    delay: float) -> list[RateLimitedWorker]:
    import asyncio

    infos = instances(cfg)
    keys = limiter.register(cfg.name, 1, cfg, infos)
    workers = []
    for info, key in zip(infos, keys, strict=True):
        worker = InstanceWorker(info, cfg.name)
        asyncio.run(worker.load(lambda info=info: Recorder(log, f"{cfg.name}/{info.name}",
                                                          delay)))
        workers.append(RateLimitedWorker(worker, limiter, key))
    return workers


def test_parse_resource_flag() -> None:
    assert parse_resource_flag("r1:4") == ResourceFlag("r1", 4, None)
    assert parse_resource_flag("r1:10:2") == ResourceFlag("r1", 10, 2)
    for bad in ("r1", ":4", "r1:x", "r1:4:y", "r1:-1"):
        with pytest.raises(ValueError, match="rate-limit-resource"):
            parse_resource_flag(bad)


def test_start_up_errors_have_tritons_messages() -> None:
    four = named(config('instance_group [{ count: 1 rate_limiter { resources [{ name: "resource1"'
                        ' count: 4 }] } }]'))
    with pytest.raises(InferenceServerError, match='Resource count for "resource1" is limited to 1 '
                       "which will prevent scheduling of one or more model instances, the "
                       "minimum required count is 4"):
        RateLimiter([ResourceFlag("resource1", 1, None)]).register("m", 1, four,
                                                                    instances(four))
    # a count for device 10 only leaves device 0 (where CPU instances count) with none
    with pytest.raises(InferenceServerError, match="is limited to 0 "):
        RateLimiter([ResourceFlag("resource1", 10, 10)]).register("m", 1, four, instances(four))
    limiter = RateLimiter()
    g = named(config('instance_group [{ rate_limiter { resources [{ name: "resource2" global: true'
                     ' count: 2 }] } }]', "v2"))
    d = named(config('instance_group [{ rate_limiter { resources [{ name: "resource2" count: 2 }]'
                     " } }]", "v3"))
    limiter.register("v2", 1, g, instances(g))
    with pytest.raises(InferenceServerError, match=re.escape(
            'Resource "resource2" is present as both global and device-specific resource in '
            "the model configuration.")):
        limiter.register("v3", 1, d, instances(d))
    # the refused model left nothing behind: the other one still loads
    limiter.register("v2b", 1, g, instances(g))


def test_two_instances_sharing_a_resource_never_run_together() -> None:
    cfg = named(config('instance_group [{ count: 2 rate_limiter { resources [{ name: "r" count: 1'
                       " }] } }]"))
    log: list[tuple[str, float, float]] = []
    workers = limited_workers(RateLimiter(), cfg, log, 0.02)
    futures = [workers[i % 2].submit([object()]) for i in range(12)]
    wait(futures, timeout=30)
    assert all(f.done() and not f.result().failed for f in futures)
    assert len(log) == 12 and {name for name, _, _ in log} == {"m/m_0_0", "m/m_0_1"}
    spans = sorted((s, e) for _, s, e in log)
    assert all(b[0] >= a[1] for a, b in itertools.pairwise(spans)), "two instances overlapped"
    for w in workers:
        w.stop()


def test_a_rate_limited_instance_that_runs_elsewhere_is_never_sent_past_the_limiter() -> None:
    """An instance in a worker process takes batches without a future
    (``InstanceWorker.run_elsewhere``); behind the limiter it must not: its batches may
    have to wait for resources."""
    cfg = named(config('instance_group [{ count: 1 rate_limiter { resources [{ name: "r" count: 1'
                       " }] } }]"))
    log: list[tuple[str, float, float]] = []
    (worker,) = limited_workers(RateLimiter(), cfg, log, 0.0)
    worker.instance.asynchronous = True
    sent: list[object] = []
    worker.instance.execute_async = lambda requests, done: sent.append(requests)
    try:
        assert worker.run_elsewhere([object()], sent.append) is False
        assert sent == [] and worker.busy == 0
    finally:
        worker.stop()


def test_plenty_of_the_resource_lets_them_overlap() -> None:
    cfg = named(config('instance_group [{ count: 2 rate_limiter { resources [{ name: "r" count: 1'
                       " }] } }]"))
    log: list[tuple[str, float, float]] = []
    workers = limited_workers(RateLimiter([ResourceFlag("r", 2, None)]), cfg, log, 0.05)
    futures = [workers[i % 2].submit([object()]) for i in range(2)]
    wait(futures, timeout=30)
    (_, s0, e0), (_, s1, e1) = log
    assert s1 < e0 and s0 < e1, "with two of the resource both instances run at once"
    for w in workers:
        w.stop()


def test_priority_weighs_which_instance_waits() -> None:
    """Instances of priority 1 and 2 sharing one resource, both always waiting: the first
    runs about twice as often (Triton: priority 2 gets 1/2 the chances)."""
    limiter = RateLimiter()
    res = 'rate_limiter { resources [{ name: "r" count: 1 }] priority: %d }'
    a = named(config(f"instance_group [{{ {res % 1} }}]", "a"))
    b = named(config(f"instance_group [{{ {res % 2} }}]", "b"))
    log: list[tuple[str, float, float]] = []
    [wa] = limited_workers(limiter, a, log, 0.002)
    [wb] = limited_workers(limiter, b, log, 0.002)
    futures = [w.submit([object()]) for _ in range(60) for w in (wa, wb)]
    deadline = time.monotonic() + 30
    while len(log) < 60 and time.monotonic() < deadline:
        time.sleep(0.01)
    first = [name for name, _, _ in sorted(log, key=lambda r: r[1])[:60]]
    ratio = first.count("a/a_0_0") / max(first.count("b/b_0_0"), 1)
    assert 1.8 < ratio < 2.3, f"ratio {ratio} of the first 60 executions, expected 2"
    wait(futures, timeout=30)
    wa.stop()
    wb.stop()


def test_a_cancelled_waiting_batch_never_runs() -> None:
    cfg = named(config('instance_group [{ count: 1 rate_limiter { resources [{ name: "r" count: 1'
                       " }] } }]"))
    log: list[tuple[str, float, float]] = []
    [w] = limited_workers(RateLimiter(), cfg, log, 0.1)
    first = w.submit([object()])
    second = w.submit([object()])
    assert w.busy == 2
    assert second.cancel()
    wait([first], timeout=10)
    time.sleep(0.2)
    assert len(log) == 1 and w.busy == 0
    third = w.submit([object()])  # the resource came back
    wait([third], timeout=10)
    assert len(log) == 2
    w.stop()


# --- end to end: naiad serve with --rate-limit ---------------------------------------------

MODEL = dedent('''
    import time
    import numpy as np
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            start = time.time()
            time.sleep(0.05)
            end = time.time()
            return [pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0")
                                .as_numpy()),
                pb_utils.Tensor("SPAN", np.array([start, end], np.float64))]) for r in requests]
''')

CONFIG = dedent('''
    name: "{name}"
    backend: "python"
    input [{{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] }}]
    output [{{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }},
            {{ name: "SPAN" data_type: TYPE_FP64 dims: [ 2 ] }}]
    instance_group [{{ kind: KIND_CPU count: 1
      rate_limiter {{ resources [{{ name: "resource1" count: {count} }}] priority: {priority} }}
    }}]
''')


def write_models(repo: Path, counts: tuple[int, int] = (1, 1)) -> None:
    for (name, priority), count in zip((("high", 1), ("low", 2)), counts, strict=True):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.py").write_text(MODEL)
        (repo / name / "config.pbtxt").write_text(
            CONFIG.format(name=name, priority=priority, count=count))


def flood(url: str, models: tuple[str, ...], total: int, inflight: int = 6
          ) -> dict[str, list[tuple[float, float]]]:
    """Keep ``inflight`` requests in flight per model until ``total`` were sent (all models
    together, as Triton's test stops when one runner reaches its count)."""
    spans: dict[str, list[tuple[float, float]]] = {m: [] for m in models}
    sent = [0]
    lock = threading.Condition()
    stop = threading.Event()

    def runner(model: str) -> None:
        client = grpcclient.InferenceServerClient(url)
        pending = [0]

        def done(result: object, error: object) -> None:
            with lock:
                pending[0] -= 1
                if error is None:
                    spans[model].append(tuple(result.as_numpy("SPAN")))  # type: ignore[attr-defined]
                lock.notify_all()

        inp = grpcclient.InferInput("INPUT0", [1], "FP32")
        inp.set_data_from_numpy(np.ones(1, np.float32))
        while not stop.is_set():
            with lock:
                lock.wait_for(lambda: pending[0] < inflight, timeout=10)
                if sent[0] >= total:
                    stop.set()
                    break
                sent[0] += 1
                pending[0] += 1
            client.async_infer(model, [inp], callback=done)
        with lock:
            lock.wait_for(lambda: pending[0] == 0, timeout=30)
        client.close()

    threads = [threading.Thread(target=runner, args=(m,)) for m in models]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return spans


def test_serve_runs_the_higher_priority_model_twice_as_often(tmp_path: Path) -> None:
    write_models(tmp_path)
    with naiad_server("--model-repository", str(tmp_path), "--rate-limit=execution_count") as s:
        spans = flood(s.grpc_url, ("high", "low"), total=60)
    high, low = len(spans["high"]), len(spans["low"])
    # both models run and their executions never overlap (one resource1 between them)
    everything = sorted(spans["high"] + spans["low"])
    assert all(b[0] >= a[1] - 1e-3 for a, b in itertools.pairwise(everything))
    # while both models have requests waiting (from the later one's first execution to the
    # earlier one's last), executions go 2:1
    starts = {m: sorted(s for s, _ in spans[m]) for m in ("high", "low")}
    t0 = max(starts["high"][0], starts["low"][0])
    t1 = min(starts["high"][-1], starts["low"][-1])
    counts = {m: sum(t0 <= s <= t1 for s in starts[m]) for m in starts}
    assert sum(counts.values()) >= 12, f"too short an overlap to judge: {counts}"
    ratio = counts["high"] / max(counts["low"], 1)
    assert ratio > 1.8, f"{high} high, {low} low; while both waited: {counts}"


@pytest.mark.long  # the message itself is checked by the unit test above
def test_serve_refuses_counts_that_can_never_be_met(tmp_path: Path) -> None:
    write_models(tmp_path, counts=(4, 2))
    proc = subprocess.run(
        [sys.executable, "-m", "naiad", "serve", "--model-repository", str(tmp_path),
         "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0",
         "--rate-limit=execution_count", "--rate-limit-resource=resource1:3"],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert ('Resource count for "resource1" is limited to 3 which will prevent scheduling of '
            "one or more model instances, the minimum required count is 4") in proc.stderr
