#!/usr/bin/env python3
"""Dynamic batching: the same MLP served without batching, with Triton's batcher, and with
naiad's adaptive batcher, at each concurrency, in one run.

One ``naiad serve`` process (pinned to ``--server-cpus``) serves three copies of a Triton
Python model computing a 3-layer ReLU MLP with numpy (FP32 [-1,256] -> [-1,10], weights
seeded at load, ``execute`` concatenates its requests and splits the result back, as a
batching-aware Triton Python model does):

- ``mlp``: ``max_batch_size 16``, no ``dynamic_batching`` (the baseline: ratio 1.00);
- ``mlp_batch``: ``dynamic_batching { max_queue_delay_microseconds: --delay-us }``;
- ``mlp_adaptive``: the same plus ``naiad.adaptive_batching: "true"``.

Each point is a closed-loop ``wrk`` run (V2 JSON body, keep-alive, pinned to
``--client-cpus``) after a correctness check of the answer against numpy. Prints req/s,
p50/p99 ms and the ratio to ``mlp`` at the same concurrency, plus the mean batch size the
server's statistics saw. Bounded in time; the server is stopped by its process group.

  .venv/bin/python benchmarks/batching.py --duration 10 --concurrency 1,8,64
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import tempfile
import textwrap
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from protocol_overhead import (  # noqa: E402
    Running,
    Target,
    csv,
    default_naiad,
    free_port,
    run_wrk,
    wait_ready,
)

MLP_IN, HIDDEN, MLP_OUT = 256, 1024, 10

MLP_PY = f'''
import numpy as np
import triton_python_backend_utils as pb_utils


def weights():
    rng = np.random.default_rng(7)
    shapes = [({MLP_IN}, {HIDDEN}), ({HIDDEN}, {HIDDEN}), ({HIDDEN}, {MLP_OUT})]
    return [(rng.standard_normal(s, dtype=np.float32) / np.sqrt(s[0]),
             np.zeros(s[1], np.float32)) for s in shapes]


def forward(x, layers):
    for i, (w, b) in enumerate(layers):
        x = x @ w + b
        if i < len(layers) - 1:
            x = np.maximum(x, 0)
    return x


class TritonPythonModel:
    def initialize(self, args):
        self.layers = weights()

    def execute(self, requests):
        inputs = [pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() for r in requests]
        out = forward(np.concatenate(inputs) if len(inputs) > 1 else inputs[0], self.layers)
        responses, start = [], 0
        for x in inputs:
            part = out[start:start + len(x)]
            start += len(x)
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("OUTPUT0", part)]))
        return responses
'''

VARIANTS = {
    "mlp": "",
    "mlp_batch": "dynamic_batching {{ max_queue_delay_microseconds: {delay} }}",
    "mlp_adaptive": "dynamic_batching {{ max_queue_delay_microseconds: {delay} }}\n"
                    'parameters {{ key: "naiad.adaptive_batching" '
                    'value: {{ string_value: "true" }} }}',
}


def write_repository(root: Path, delay_us: int) -> Path:
    repo = root / "model_repository"
    if repo.exists():
        shutil.rmtree(repo)
    for name, batching in VARIANTS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.py").write_text(textwrap.dedent(MLP_PY).lstrip())
        (repo / name / "config.pbtxt").write_text(f"""name: "{name}"
backend: "python"
max_batch_size: 16
input [ {{ name: "INPUT0", data_type: TYPE_FP32, dims: [ {MLP_IN} ] }} ]
output [ {{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ {MLP_OUT} ] }} ]
instance_group [ {{ count: 1, kind: KIND_CPU }} ]
{batching.format(delay=delay_us)}
""")
    return repo


def the_input() -> np.ndarray:
    return np.random.default_rng(1).standard_normal((1, MLP_IN), dtype=np.float32)


def write_payloads(root: Path) -> Path:
    out = root / "payloads"
    out.mkdir(parents=True, exist_ok=True)
    x = the_input()
    body = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, MLP_IN],
                                   "data": x.ravel().tolist()}]}).encode()
    for name in VARIANTS:
        (out / f"{name}.json").write_bytes(body)
    return out


def post(port: int, model: str, body: bytes) -> dict[str, Any]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/{model}/infer",
                                     data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def get(port: int, path: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as response:
        return json.loads(response.read())


def check(port: int, model: str, payload_dir: Path) -> str | None:
    """None when the server's answer equals numpy's, else what went wrong."""
    namespace: dict[str, Any] = {}
    exec(MLP_PY.replace("import triton_python_backend_utils as pb_utils", ""), namespace)
    expected = namespace["forward"](the_input(), namespace["weights"]())
    got = post(port, model, (payload_dir / f"{model}.json").read_bytes())
    data = np.array(got["outputs"][0]["data"], np.float32).reshape(expected.shape)
    if not np.allclose(data, expected, rtol=1e-4, atol=1e-4):
        return f"{model}: answer differs from numpy"
    return None


def mean_batch(port: int, model: str) -> tuple[int, int]:
    stats = get(port, f"/v2/models/{model}/stats")["model_stats"][0]
    return int(stats["inference_count"]), int(stats["execution_count"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=10, help="seconds per load point (10)")
    ap.add_argument("--warmup", type=float, default=2, help="seconds of load before each model")
    ap.add_argument("--concurrency", type=csv(int), default=[1, 8, 64])
    ap.add_argument("--delay-us", type=int, default=3000,
                    help="max_queue_delay_microseconds of the batching models (3000, as the "
                         "shared bench's triton-batch)")
    ap.add_argument("--naiad", default=default_naiad())
    ap.add_argument("--naiad-arg", action="append", default=[])
    ap.add_argument("--server-cpus", default="0")
    ap.add_argument("--client-cpus", default="1")
    ap.add_argument("--ready-timeout", type=float, default=120)
    args = ap.parse_args(argv)
    args.http_encoding = "json"
    if not shutil.which("wrk"):
        ap.error("wrk not found (apt-get install -y wrk)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    work = Path(tempfile.mkdtemp(prefix="naiad-batching-"))
    repo = write_repository(work, args.delay_us)
    payload_dir = write_payloads(work)
    target = Target("naiad-uvicorn", "naiad", ["http"], "uvicorn")
    target.ports = {"http": free_port(), "grpc": free_port(), "metrics": free_port()}
    server = Running(target, target.command(args, repo), args, work / "server.log")
    rows: list[dict[str, Any]] = []
    try:
        problem = wait_ready(server, list(VARIANTS), args.ready_timeout)
        if problem:
            print(f"server not ready: {problem}", file=sys.stderr)
            return 1
        port = target.ports["http"]
        for model in VARIANTS:
            problem = check(port, model, payload_dir)
            if problem:
                print(problem, file=sys.stderr)
                return 1
        for conc in args.concurrency:
            for model in VARIANTS:
                run_wrk(port, model, 8, args.warmup, payload_dir, args)
                before = mean_batch(port, model)
                point = run_wrk(port, model, conc, args.duration, payload_dir, args)
                after = mean_batch(port, model)
                inferences, executions = (a - b for a, b in zip(after, before, strict=True))
                point.update(model=model, concurrency=conc,
                             batch=inferences / executions if executions else float("nan"))
                rows.append(point)
                print(f"c={conc:<3} {model:<13} " + (
                    point["error"] if "error" in point else
                    f"{point['rps']:8.0f} req/s  p50 {point['p50_ms']:6.2f} ms  "
                    f"p99 {point['p99_ms']:6.2f} ms  mean batch {point['batch']:5.2f}"),
                    flush=True)
    finally:
        server.stop()

    print(f"\nmax_queue_delay_microseconds {args.delay_us}, {args.duration:.0f} s per point, "
          f"server on CPU {args.server_cpus}, wrk on CPU {args.client_cpus}\n")
    print("| c | model | req/s | p50 ms | p99 ms | mean batch | vs mlp |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        if "error" in row:
            print(f"| {row['concurrency']} | {row['model']} | {row['error']} | | | | |")
            continue
        base = next((r for r in rows if r["concurrency"] == row["concurrency"]
                     and r["model"] == "mlp" and "rps" in r), None)
        ratio = f"{row['rps'] / base['rps']:.2f}" if base else "-"
        print(f"| {row['concurrency']} | {row['model']} | {row['rps']:.0f} | "
              f"{row['p50_ms']:.2f} | {row['p99_ms']:.2f} | {row['batch']:.2f} | {ratio} |")
    print(f"\nwork folder {work} (server.log); finished {time.strftime('%H:%M:%S')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
