#!/usr/bin/env python3
"""A response cache hit against running the model, in microseconds per request, naiad and
the real Triton 2.51 side by side, in one run.

Each target serves one repository: the examples' ``add_sub`` (a Triton Python model, run in
its own process by both servers) with ``response_cache { enable: true }`` as
``add_sub_cached``, and unchanged as ``add_sub``; both servers start with
``--cache-config local,size=64 MiB``. One client sends the same JSON request over one
keep-alive HTTP connection, ``--requests`` times per model (every request after the first
to ``add_sub_cached`` is a hit), after ``--warmup`` requests. Printed per target and model:
mean and p50/p99 latency; then the ratios that carry across machines: cached / uncached on
one server, naiad / Triton for the same model.

Bounded: ``--requests`` per point and ``--max-seconds`` per point, loopback only, servers
stopped through their process groups.

  .venv/bin/python benchmarks/response_cache.py
  .venv/bin/python benchmarks/response_cache.py --requests 500 --skip-triton
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "core"))

from naiad.testing import ServerProcess  # noqa: E402

EXAMPLES = ROOT / "examples" / "model_repository"
TRITON_SERVE = ROOT.parent / "shared" / "triton" / "serve.sh"
CACHE_BYTES = 64 * 1024 * 1024
MODELS = ("add_sub", "add_sub_cached")
BODY = json.dumps({"inputs": [
    {"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]},
    {"name": "INPUT1", "datatype": "FP32", "shape": [4], "data": [4, 3, 2, 1]},
]}).encode()


def repository(root: Path) -> Path:
    shutil.copytree(EXAMPLES / "add_sub", root / "add_sub")
    shutil.copytree(EXAMPLES / "add_sub", root / "add_sub_cached")
    config = root / "add_sub_cached" / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "add_sub"', 'name: "add_sub_cached"')
                      + "\nresponse_cache { enable: true }\n")
    return root


def latencies(port: int, model: str, count: int, warmup: int, max_seconds: float
              ) -> list[float]:
    """Microseconds of each of ``count`` sequential requests (fewer past ``max_seconds``)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    path = f"/v2/models/{model}/infer"
    headers = {"Content-Type": "application/json"}

    def one() -> None:
        conn.request("POST", path, BODY, headers)
        response = conn.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"{model}: HTTP {response.status}: {body[:200]!r}")

    for _ in range(warmup):
        one()
    out: list[float] = []
    deadline = time.monotonic() + max_seconds
    while len(out) < count and time.monotonic() < deadline:
        start = time.perf_counter_ns()
        one()
        out.append((time.perf_counter_ns() - start) / 1000)
    conn.close()
    return out


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"mean": statistics.fmean(ordered), "p50": ordered[len(ordered) // 2],
            "p99": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]}


def targets(repo: Path, skip_triton: bool) -> dict[str, list[str]]:
    cache = ["--cache-config", f"local,size={CACHE_BYTES}"]
    found = {"naiad": [sys.executable, "-m", "naiad", "serve", "--http-address", "127.0.0.1",
                       "--grpc-address", "127.0.0.1", "--metrics-address", "127.0.0.1",
                       "--http-port", "{http_port}", "--grpc-port", "{grpc_port}",
                       "--metrics-port", "{metrics_port}", "--model-repository", str(repo),
                       *cache]}
    if not skip_triton and TRITON_SERVE.exists():
        found["triton"] = [str(TRITON_SERVE), "--model-repository", str(repo),
                           "--http-port", "{http_port}", "--grpc-port", "{grpc_port}",
                           "--metrics-port", "{metrics_port}", *cache]
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--max-seconds", type=float, default=30.0)
    parser.add_argument("--skip-triton", action="store_true")
    args = parser.parse_args()
    results: dict[tuple[str, str], dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="naiad-bench-cache-") as tmp:
        repo = repository(Path(tmp))
        for name, cmd in targets(repo, args.skip_triton).items():
            with ServerProcess(cmd, ready_timeout=120) as server:
                for model in MODELS:
                    results[name, model] = summary(latencies(
                        server.http_port, model, args.requests, args.warmup, args.max_seconds))
    print(f"{'target':<8} {'model':<16} {'mean us':>9} {'p50 us':>9} {'p99 us':>9}")
    for (name, model), figures in results.items():
        print(f"{name:<8} {model:<16} {figures['mean']:>9.0f} {figures['p50']:>9.0f} "
              f"{figures['p99']:>9.0f}")
    print()
    for name in sorted({n for n, _ in results}):
        hit, run = results[name, "add_sub_cached"]["p50"], results[name, "add_sub"]["p50"]
        print(f"{name}: cache hit / model run (p50) = {hit / run:.2f}  "
              f"({run - hit:.0f} us saved per request)")
    if ("triton", "add_sub") in results:
        for model in MODELS:
            ratio = results["naiad", model]["p50"] / results["triton", model]["p50"]
            print(f"naiad / triton, {model} (p50 latency; lower is better) = {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
