#!/usr/bin/env python3
"""What naiad's latency metrics cost per request: one model served with the histograms on
(the default), off (``--metrics-config naiad_histograms=false``) and with Triton's summaries
added (``summary_latencies=true``), throughput and latency side by side, in one run.

The model is an identity over FP32[16] run in process (``EXECUTION_MODE: in_process``), so
the server's own per-request work, where the recording happens, is most of what a request
costs. The three servers run at once; the client measures them in turns (``--rounds``
rounds of ``--requests`` sequential requests on one keep-alive HTTP connection each, after
``--warmup``), so a machine that slows down during the run slows every target alike. Printed
per target: requests per second and p50/p99 latency (the median of the rounds), then the
ratios against the histograms-off server. The expected figure is a ratio within noise of
1.00: a histogram observation is a binary search and a few integer additions under a lock
the request takes anyway.

Bounded: ``--requests`` per round, ``--max-seconds`` per round, loopback only, servers
stopped through their process groups.

  .venv/bin/python benchmarks/metrics_overhead.py
  .venv/bin/python benchmarks/metrics_overhead.py --rounds 3 --requests 1000
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "core"))

from naiad.testing import ServerProcess  # noqa: E402

MODEL = "identity_fp32"
WIDTH = 16
CONFIG = f"""
name: "{MODEL}"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0", data_type: TYPE_FP32, dims: [ {WIDTH} ] }} ]
output [ {{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ {WIDTH} ] }} ]
instance_group [ {{ count: 1, kind: KIND_CPU }} ]
parameters {{ key: "EXECUTION_MODE" value: {{ string_value: "in_process" }} }}
"""
MODEL_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests]
"""
BODY = json.dumps({"inputs": [
    {"name": "INPUT0", "datatype": "FP32", "shape": [WIDTH], "data": list(range(WIDTH))}]}
).encode()
# target -> its --metrics-config values
TARGETS = {
    "histograms off": ["naiad_histograms=false"],
    "histograms on": [],
    "histograms + summaries": ["summary_latencies=true"],
}
BASELINE = "histograms off"


def repository(root: Path) -> Path:
    version = root / MODEL / "1"
    version.mkdir(parents=True)
    (root / MODEL / "config.pbtxt").write_text(CONFIG.lstrip())
    (version / "model.py").write_text(MODEL_PY.lstrip())
    return root


def command(repo: Path, settings: list[str]) -> list[str]:
    metrics = [part for value in settings for part in ("--metrics-config", value)]
    return [sys.executable, "-m", "naiad", "serve", "--http-address", "127.0.0.1",
            "--grpc-address", "127.0.0.1", "--metrics-address", "127.0.0.1",
            "--http-port", "{http_port}", "--grpc-port", "{grpc_port}",
            "--metrics-port", "{metrics_port}", "--model-repository", str(repo), *metrics]


def latencies(conn: http.client.HTTPConnection, count: int, max_seconds: float
              ) -> list[float]:
    """Microseconds of up to ``count`` sequential requests (fewer past ``max_seconds``)."""
    path = f"/v2/models/{MODEL}/infer"
    headers = {"Content-Type": "application/json"}
    out: list[float] = []
    deadline = time.monotonic() + max_seconds
    while len(out) < count and time.monotonic() < deadline:
        start = time.perf_counter_ns()
        conn.request("POST", path, BODY, headers)
        response = conn.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {body[:200]!r}")
        out.append((time.perf_counter_ns() - start) / 1000)
    return out


def figures(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"rps": len(ordered) / (sum(ordered) / 1e6), "p50": ordered[len(ordered) // 2],
            "p99": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]}


def arguments(description: str) -> argparse.Namespace:
    """The command line of this script and of those that compare servers the same way."""
    parser = argparse.ArgumentParser(description=description.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=2000, help="per round and target")
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--max-seconds", type=float, default=30.0, help="per round")
    return parser.parse_args()


def compare(commands: dict[str, list[str]], baseline: str, args: argparse.Namespace) -> None:
    """Start every server of ``commands`` (target -> command), measure them in turns and
    print each one's figures and its ratios against ``baseline``."""
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in commands}
    with ExitStack() as stack:
        connections = {}
        for name, cmd in commands.items():
            server = stack.enter_context(ServerProcess(cmd, ready_timeout=120))
            conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
            stack.callback(conn.close)
            latencies(conn, args.warmup, args.max_seconds)
            connections[name] = conn
        for _ in range(args.rounds):
            for name, conn in connections.items():
                rounds[name].append(figures(latencies(conn, args.requests, args.max_seconds)))
    result = {name: {key: statistics.median(r[key] for r in runs) for key in runs[0]}
              for name, runs in rounds.items()}
    print(f"{'target':<24} {'req/s':>9} {'p50 us':>8} {'p99 us':>8}")
    for name, row in result.items():
        print(f"{name:<24} {row['rps']:>9.0f} {row['p50']:>8.0f} {row['p99']:>8.0f}")
    print()
    base = result[baseline]
    for name, row in result.items():
        if name != baseline:
            print(f"{name} / {baseline}: throughput {row['rps'] / base['rps']:.3f}, "
                  f"p50 latency {row['p50'] / base['p50']:.3f} (median of {args.rounds} "
                  f"rounds of {args.requests})")


def main() -> int:
    args = arguments(__doc__)
    with tempfile.TemporaryDirectory(prefix="naiad-bench-metrics-") as tmp:
        repo = repository(Path(tmp))
        compare({name: command(repo, settings) for name, settings in TARGETS.items()},
                BASELINE, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
