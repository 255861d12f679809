#!/usr/bin/env python3
"""Python models in worker processes: what the process hop costs, and what parallel
instances buy, next to the real Triton 2.51, in one run.

1. **hop**: one ``PythonBackend`` instance called directly (no server, no protocol), the
   same model in-process and isolated: µs per ``execute`` of a 16-byte request, and of a
   4 MiB FP32 tensor that goes in and comes back (identity). The isolated/in-process ratio
   is the price of the worker hop.
2. **scaling**: a CPU-bound pure-Python model (tokenising and counting in a Python loop,
   about 10 ms a request) with ``instance_group count: 1`` and ``count: 2``, served by
   ``naiad serve`` (isolated, then in-process) and by the real ``tritonserver``
   (``../shared/triton/serve.sh``, when set up), each loaded with ``--clients`` closed-loop
   HTTP clients for ``--duration`` seconds. Prints req/s and the count-2/count-1 ratio per
   server: on 2 cores, separate processes can approach 2x; threads sharing one GIL stay
   near 1x. naiad isolated runs twice: in its default ``SCHED_BATCH`` class and with
   ``--sched-batch=false``.

Every server runs on loopback, one at a time, and is stopped by its process group. Bounded:
about ``6 * (duration + 5)`` seconds plus the hop part.

  .venv/bin/python benchmarks/python_isolation.py --duration 10
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TRITON_SERVE = ROOT.parent / "shared" / "triton" / "serve.sh"

TOKENIZE_PY = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            distinct = 0
            for item in text.reshape(-1):
                counts = {}
                for token in (item.decode() * 200).split():
                    counts[token] = counts.get(token, 0) + 1
                distinct += len(counts)
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("COUNT", np.array([distinct], np.int64))]))
        return responses
'''

IDENTITY_PY = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests]
'''

TEXT = " ".join(f"word{i % 97} token{i % 31}" for i in range(400))


def tokenize_config(name: str, count: int, mode: str = "") -> str:
    parameters = (f'parameters {{ key: "EXECUTION_MODE" value: {{ string_value: "{mode}" }} }}'
                  if mode else "")
    return textwrap.dedent(f"""
        name: "{name}"
        backend: "python"
        input [ {{ name: "TEXT", data_type: TYPE_STRING, dims: [ 1 ] }} ]
        output [ {{ name: "COUNT", data_type: TYPE_INT64, dims: [ 1 ] }} ]
        instance_group [ {{ count: {count}, kind: KIND_CPU }} ]
        {parameters}
    """)


def write_model(root: Path, name: str, config: str, model_py: str) -> None:
    (root / name / "1").mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(config)
    (root / name / "1" / "model.py").write_text(model_py)


# --- 1. the hop --------------------------------------------------------------------------


def hop(rounds: int) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "plugins" / "backend_python"))
    from backend_python_helpers import context_for, instance_info, request
    from backend_python_helpers import write_model as wm

    from naiad_backend_python import PythonBackend

    root = Path(tempfile.mkdtemp(prefix="naiad-hop-"))
    config = textwrap.dedent("""
        name: "{name}"
        backend: "python"
        input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
        output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
    """)
    model_dir = wm(root, "identity", IDENTITY_PY, config)
    small = [request("identity", {"INPUT0": np.arange(4, dtype=np.float32)})]
    big = [request("identity", {"INPUT0": np.arange(1 << 20, dtype=np.float32)})]
    figures: dict[tuple[str, str], list[float]] = {}
    instances = {mode: PythonBackend({"execution-mode": mode}).create_instance(
        context_for(model_dir), instance_info("identity")) for mode in ("in_process", "isolated")}
    try:
        for _ in range(rounds):  # interleaved: both modes see the same machine
            for mode, instance in instances.items():
                for label, batch, count in (("16 B", small, 3000), ("4 MiB", big, 100)):
                    for _ in range(count // 10):
                        instance.execute(batch)
                    start = time.perf_counter()
                    for _ in range(count):
                        instance.execute(batch)
                    figures.setdefault((label, mode), []).append(
                        (time.perf_counter() - start) / count * 1e6)
    finally:
        for instance in instances.values():
            instance.close()
    print(f"\n## The worker hop: µs per execute (median of {rounds} interleaved rounds)\n")
    print("| request | in-process | isolated | isolated - in-process | ratio |")
    print("|---|---|---|---|---|")
    for label in ("16 B", "4 MiB"):
        inproc = float(np.median(figures[(label, "in_process")]))
        isolated = float(np.median(figures[(label, "isolated")]))
        print(f"| {label} | {inproc:.1f} | {isolated:.1f} | {isolated - inproc:.1f} | "
              f"{isolated / inproc:.2f} |")


# --- 2. scaling ----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(cmd: list[str], http_port: int, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{cmd[0]} exited: {log.read_text()[-2000:]}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", http_port, timeout=2)
            conn.request("GET", "/v2/health/ready")
            if conn.getresponse().status == 200:
                return process
        except OSError:
            pass
        time.sleep(0.1)
    stop(process)
    raise RuntimeError(f"{cmd[0]} not ready: {log.read_text()[-2000:]}")


def stop(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:
        pass


def load(http_port: int, model: str, clients: int, duration: float) -> float:
    """req/s of ``clients`` closed-loop keep-alive clients for ``duration`` seconds."""
    body = json.dumps({"inputs": [{"name": "TEXT", "shape": [1], "datatype": "BYTES",
                                   "data": [TEXT]}]}).encode()
    path = f"/v2/models/{model}/infer"
    counts = [0] * clients
    errors: list[str] = []
    deadline = time.monotonic() + duration

    def client(index: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", http_port, timeout=60)
        while time.monotonic() < deadline:
            conn.request("POST", path, body, {"Content-Type": "application/json"})
            response = conn.getresponse()
            data = response.read()
            if response.status != 200:
                errors.append(data.decode(errors="replace"))
                return
            counts[index] += 1

    for _ in range(2):  # every instance has run once before the clock starts
        client_conn = http.client.HTTPConnection("127.0.0.1", http_port, timeout=60)
        client_conn.request("POST", path, body, {"Content-Type": "application/json"})
        client_conn.getresponse().read()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    start_time = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - start_time
    if errors:
        raise RuntimeError(f"{model}: {errors[0]}")
    return sum(counts) / elapsed


def scaling(duration: float, clients: int, rounds: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="naiad-scaling-"))
    servers: dict[str, tuple[Path, list[str]]] = {}
    for label, mode in (("naiad isolated", ""), ("naiad in-process", "in_process")):
        repo = root / label.replace(" ", "-")
        for count in (1, 2):
            write_model(repo, f"tokenize{count}", tokenize_config(f"tokenize{count}", count,
                                                                  mode), TOKENIZE_PY)
        servers[label] = (repo, [sys.executable, "-m", "naiad", "serve"])
    # Issue 26 item 4: the server's SCHED_BATCH default against the normal class, where the
    # load generator wants the same cores (its workers leave SCHED_BATCH either way).
    servers["naiad isolated, --sched-batch=false"] = (
        servers["naiad isolated"][0], [sys.executable, "-m", "naiad", "serve",
                                       "--sched-batch=false"])
    if TRITON_SERVE.exists():
        repo = root / "triton"
        for count in (1, 2):
            write_model(repo, f"tokenize{count}", tokenize_config(f"tokenize{count}", count),
                        TOKENIZE_PY)
        servers["Triton 2.51"] = (repo, [str(TRITON_SERVE)])
    figures: dict[tuple[str, int], list[float]] = {}
    for _ in range(rounds):
        for label, (repo, cmd) in servers.items():
            http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
            full = [*cmd, "--model-repository", str(repo), "--http-port", str(http_port),
                    "--grpc-port", str(grpc_port), "--metrics-port", str(metrics_port)]
            if "naiad" in label:
                full += ["--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1",
                         "--metrics-address", "127.0.0.1"]
            process = start(full, http_port, root / f"{label}.log")
            try:
                for count in (1, 2):
                    figures.setdefault((label, count), []).append(
                        load(http_port, f"tokenize{count}", clients, duration))
            finally:
                stop(process)
    print(f"\n## A CPU-bound pure-Python model, count 2 against count 1 ({os.cpu_count()} "
          f"cores, {clients} HTTP clients, {duration:.0f} s points, median of {rounds} "
          f"rounds)\n")
    print("| server | count 1 req/s | count 2 req/s | count 2 / count 1 |")
    print("|---|---|---|---|")
    for label in servers:
        one = float(np.median(figures[(label, 1)]))
        two = float(np.median(figures[(label, 2)]))
        print(f"| {label} | {one:.1f} | {two:.1f} | {two / one:.2f} |")
    if not TRITON_SERVE.exists():
        print(f"\n(Triton not measured: {TRITON_SERVE} is missing)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per point")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--skip-hop", action="store_true")
    parser.add_argument("--skip-scaling", action="store_true")
    args = parser.parse_args()
    if not args.skip_hop:
        hop(max(args.rounds, 3))
    if not args.skip_scaling:
        scaling(args.duration, args.clients, args.rounds)


if __name__ == "__main__":
    main()
