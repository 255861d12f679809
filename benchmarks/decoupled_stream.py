#!/usr/bin/env python3
"""Streamed responses per second of a decoupled Python model over gRPC streaming, naiad
against the real Triton 2.51, in one run.

The model (``benchmarks/models/stream100``) answers a request asking for N responses (input
COUNT, ``--responses``, 100 by default) with N responses of one INT32 each, sent from
``execute`` through the request's response sender, the last one with the final flag. Each
target serves it alone: naiad with isolated Python models (the default), naiad with
in-process ones (``--backend-config python,execution-mode=in_process``), and
``tritonserver`` (``../shared/triton/serve.sh``, when set up).

Load: at each concurrency C, C bidirectional ``ModelStreamInfer`` streams, each one request
in flight at a time (send, read its N responses, send the next), spread over up to
``--client-procs`` client processes on ``--client-cpus``. The clients use the raw gRPC method
with pre-serialized requests and undecoded responses (one byte checked per message: an
``infer_response``, not an ``error_message``), so that they cost as little as a Python client
can; their CPU use is printed next to each point (near 100 % of their cores means the client
was the limit, not the server). Before the load, each target must answer one request with
exactly N responses OUT = 0..N-1 (the gate).

Every point is bounded: clients stop reading at the deadline and cancel their streams;
every server runs on loopback, pinned to ``--server-cpus``, in its own process group, and is
stopped through it. About ``rounds * targets * (len(concurrency) * (duration + 3) + 10)``
seconds.

  .venv/bin/python benchmarks/decoupled_stream.py --duration 10 --rounds 2
  .venv/bin/python benchmarks/decoupled_stream.py --duration 2 --concurrency 1,4 --rounds 1
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import queue
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MODEL_DIR = HERE / "models" / "stream100"
MODEL = "stream100"
TRITON_SERVE = ROOT.parent / "shared" / "triton" / "serve.sh"
STREAM_METHOD = "/inference.GRPCInferenceService/ModelStreamInfer"
# ModelStreamInferResponse: field 1 error_message, field 2 infer_response (both
# length-delimited), so a message's first byte says which one it is
INFER_RESPONSE_TAG = (2 << 3) | 2
CLK_TCK = os.sysconf("SC_CLK_TCK")
SECONDS = 1.0
START_TIMEOUT = 120 * SECONDS
GATE_TIMEOUT = 30 * SECONDS

TARGETS = {
    "naiad-isolated": ("naiad", ()),
    "naiad-in_process": ("naiad", ("--backend-config", "python,execution-mode=in_process")),
    "triton": ("triton", ()),
}


def request_bytes(responses: int, request_id: str = "") -> bytes:
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest(model_name=MODEL, id=request_id)
    tensor = request.inputs.add()
    tensor.name, tensor.datatype = "COUNT", "INT32"
    tensor.shape.append(1)
    request.raw_input_contents.append(np.array([responses], dtype=np.int32).tobytes())
    return request.SerializeToString()


# --- the client process ---------------------------------------------------------------------


def client_main(args: argparse.Namespace) -> None:
    """One client process: ``args.streams`` streams, each in closed loop from ``start_at``
    (wall clock, shared by every process of the point) to ``start_at + duration``; prints one
    JSON line of counts, latencies and its own CPU seconds."""
    import grpc

    payload = request_bytes(args.responses)
    channel = grpc.insecure_channel(f"127.0.0.1:{args.port}")
    method = channel.stream_stream(STREAM_METHOD)  # bytes in, bytes out: no protobuf work
    deadline = args.start_at + args.duration
    results: list[dict[str, Any]] = []
    lock = threading.Lock()

    def stream() -> None:
        requests: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()

        def outgoing() -> Any:
            while (item := requests.get()) is not None:
                yield item

        call = method(outgoing(), timeout=args.duration + 60)
        responses = errors = 0
        first_ms: list[float] = []
        whole_ms: list[float] = []
        try:
            while time.time() < args.start_at:
                time.sleep(0.001)
            while time.time() < deadline:
                sent = time.perf_counter()
                requests.put(payload)
                for index in range(args.responses):
                    message = next(call)
                    if time.time() >= deadline:
                        raise TimeoutError
                    if not message or message[0] != INFER_RESPONSE_TAG:
                        errors += 1
                    responses += 1
                    if index == 0:
                        first_ms.append((time.perf_counter() - sent) * 1e3)
                whole_ms.append((time.perf_counter() - sent) * 1e3)
        except TimeoutError:
            pass
        except grpc.RpcError as exc:
            errors += 1
            print(f"stream failed: {exc.code()} {exc.details()}", file=sys.stderr)
        finally:
            requests.put(None)
            call.cancel()
        with lock:
            results.append({"responses": responses, "errors": errors,
                            "first_ms": first_ms, "whole_ms": whole_ms})

    threads = [threading.Thread(target=stream) for _ in range(args.streams)]
    for thread in threads:
        thread.start()
    while time.time() < args.start_at:
        time.sleep(0.001)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu_start = usage.ru_utime + usage.ru_stime
    for thread in threads:
        thread.join(args.duration + 90)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    channel.close()
    print(json.dumps({
        "responses": sum(r["responses"] for r in results),
        "requests": sum(len(r["whole_ms"]) for r in results),
        "errors": sum(r["errors"] for r in results),
        "first_ms": [x for r in results for x in r["first_ms"]],
        "whole_ms": [x for r in results for x in r["whole_ms"]],
        "cpu_s": usage.ru_utime + usage.ru_stime - cpu_start,
    }))


# --- servers ----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """A server in its own process group, pinned with taskset; ready when
    /v2/health/ready answers 200."""

    def __init__(self, label: str, kind: str, extra: tuple[str, ...], repository: Path,
                 cpus: str, log_dir: Path) -> None:
        self.label = label
        self.http_port, self.grpc_port, metrics_port = free_port(), free_port(), free_port()
        ports = ["--model-repository", str(repository), "--http-port", str(self.http_port),
                 "--grpc-port", str(self.grpc_port), "--metrics-port", str(metrics_port)]
        if kind == "triton":
            cmd = [str(TRITON_SERVE), *ports]
        else:  # "naiad", or the path of another naiad's executable (--before)
            naiad = [sys.executable, "-m", "naiad"] if kind == "naiad" else [kind]
            cmd = [*naiad, "serve", "--http-address", "127.0.0.1",
                   "--grpc-address", "127.0.0.1", "--metrics-address", "127.0.0.1", *ports,
                   *extra]
        if cpus:
            cmd = ["taskset", "-c", cpus, *cmd]
        self.log_path = log_dir / f"{label}.log"
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"exited with {self.process.returncode}: {self.log_tail()}")
            with contextlib.suppress(OSError):
                conn = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=2)
                conn.request("GET", "/v2/health/ready")
                if conn.getresponse().status == 200:
                    return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"not ready after {START_TIMEOUT:.0f} s: {self.log_tail()}")

    def log_tail(self, lines: int = 12) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def cpu_seconds(self) -> float:
        """utime + stime of every live process of the group (the server and its Python
        workers or stubs)."""
        total = 0
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[2]) == self.process.pid:  # pgrp
                total += int(fields[11]) + int(fields[12])  # utime, stime
        return total / CLK_TCK

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        with contextlib.suppress(ProcessLookupError):  # workers may outlive the leader
            os.killpg(self.process.pid, signal.SIGKILL)


def gate(port: int, responses: int) -> None:
    """One request over ModelStreamInfer, decoded with the protocol's own messages: exactly
    ``responses`` answers, OUT = 0, 1, ..., no error message."""
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = service_pb2.ModelInferRequest.FromString(request_bytes(responses, "gate"))
        answers = list(stub.ModelStreamInfer(iter([request]), timeout=GATE_TIMEOUT))
    errors = [a.error_message for a in answers if a.error_message]
    if errors:
        raise RuntimeError(f"error in the stream: {errors[0]}")
    bare = [a.infer_response for a in answers if len(a.infer_response.raw_output_contents) != 1]
    if bare:
        raise RuntimeError(f"{len(bare)} of {len(answers)} answers do not carry OUT as one raw "
                           f"output, e.g. {str(bare[0])[:300]!r}")
    values = [int(np.frombuffer(a.infer_response.raw_output_contents[0], np.int32)[0])
              for a in answers]
    if values != list(range(responses)):
        raise RuntimeError(f"expected OUT = 0..{responses - 1}, got {len(values)} answers "
                           f"{values[:5]}...")
    if any(a.infer_response.id != "gate" for a in answers):
        raise RuntimeError("a response does not carry the request's id")


def steal_ticks(cpus: str) -> tuple[int, int]:
    """(steal, total) jiffies of the given CPUs: the hypervisor's share, a noise gauge."""
    wanted = {f"cpu{c.strip()}" for c in cpus.split(",") if c.strip()} if cpus else {"cpu"}
    steal = total = 0
    with contextlib.suppress(OSError), open("/proc/stat") as f:
        for line in f:
            parts = line.split()
            if parts and parts[0] in wanted:
                values = [int(v) for v in parts[1:9]]
                total += sum(values)
                steal += values[7] if len(values) > 7 else 0
    return steal, total


def cpu_count(cpus: str) -> int:
    count = 0
    for part in cpus.split(","):
        low, _, high = part.partition("-")
        count += int(high) - int(low) + 1 if high else 1
    return count


def point(server: Server, concurrency: int, args: argparse.Namespace) -> dict[str, Any]:
    """One closed-loop load point: ``concurrency`` streams over up to ``client_procs``
    processes for ``duration`` seconds."""
    procs = min(concurrency, args.client_procs)
    shares = [concurrency // procs + (1 if i < concurrency % procs else 0) for i in range(procs)]
    start_at = time.time() + 1.5  # every process has connected and started its threads
    pin = ["taskset", "-c", args.client_cpus] if args.client_cpus else []
    children = [subprocess.Popen(
        [*pin, sys.executable, __file__, "--client", "--port", str(server.grpc_port),
         "--streams", str(share), "--responses", str(args.responses),
         "--duration", str(args.duration), "--start-at", repr(start_at)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for share in shares]
    while time.time() < start_at:
        time.sleep(0.005)
    server_cpu, steal = server.cpu_seconds(), steal_ticks(args.server_cpus)
    time.sleep(args.duration)
    server_cpu, steal = server.cpu_seconds() - server_cpu, tuple(
        b - a for a, b in zip(steal, steal_ticks(args.server_cpus), strict=True))
    outputs = []
    for child in children:
        try:
            out, err = child.communicate(timeout=args.duration + 120)
        except subprocess.TimeoutExpired:
            child.kill()
            out, err = child.communicate()
        if child.returncode != 0 or not out.strip():
            raise RuntimeError(f"client process failed ({child.returncode}): {err[-1500:]}")
        if err.strip():
            print(f"    client stderr: {err.strip()[-300:]}", file=sys.stderr)
        outputs.append(json.loads(out.strip().splitlines()[-1]))
    responses = sum(o["responses"] for o in outputs)
    first = [x for o in outputs for x in o["first_ms"]]
    whole = [x for o in outputs for x in o["whole_ms"]]
    client_cores = cpu_count(args.client_cpus) if args.client_cpus else os.cpu_count() or 1
    return {
        "target": server.label, "concurrency": concurrency,
        "responses_per_s": responses / args.duration,
        "requests_per_s": len(whole) / args.duration,
        "p50_first_ms": float(np.median(first)) if first else float("nan"),
        "p50_request_ms": float(np.median(whole)) if whole else float("nan"),
        "p99_request_ms": float(np.percentile(whole, 99)) if whole else float("nan"),
        "errors": sum(o["errors"] for o in outputs),
        "server_cpu_us_per_response": server_cpu / responses * 1e6 if responses else 0.0,
        "client_cpu_pct": 100 * sum(o["cpu_s"] for o in outputs) / args.duration
        / client_cores,
        "client_procs": procs,
        "steal_pct": 100 * steal[0] / steal[1] if steal[1] else 0.0,
    }


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    work = Path(tempfile.mkdtemp(prefix="naiad-decoupled-stream-"))
    repository = work / "models"
    shutil.copytree(MODEL_DIR, repository / MODEL)
    targets = [t for t in args.targets.split(",") if t]
    if "triton" in targets and not TRITON_SERVE.exists():
        print(f"(Triton not measured: {TRITON_SERVE} is missing; run ../shared/triton/"
              f"setup.sh)")
        targets.remove("triton")
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    rows: list[dict[str, Any]] = []
    failed: dict[str, str] = {}
    for round_index in range(args.rounds):
        for label in targets:
            if label in failed:
                continue
            kind, extra = TARGETS[label]
            print(f"round {round_index + 1}: {label}", file=sys.stderr)
            try:
                server = Server(label, kind, extra, repository, args.server_cpus, work)
            except RuntimeError as exc:
                failed[label] = f"did not start: {exc}"
                continue
            try:
                gate(server.grpc_port, args.responses)
                for concurrency in concurrencies:
                    row = point(server, concurrency, args)
                    print(f"  c={concurrency}: {row['responses_per_s']:.0f} responses/s, "
                          f"client CPU {row['client_cpu_pct']:.0f} %", file=sys.stderr)
                    rows.append(row)
                gate(server.grpc_port, args.responses)  # still right after the load
            except Exception as exc:  # a target that fails is reported, not fatal
                failed[label] = f"{type(exc).__name__}: {exc}"
            finally:
                server.stop()
    report(rows, failed, args)
    shutil.rmtree(work, ignore_errors=True)
    return rows


def median_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (target, concurrency): the median of the rounds (errors: the sum)."""
    merged: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for row in rows:
        merged.setdefault((row["target"], row["concurrency"]), []).append(row)
    out = []
    for (target, concurrency), group in merged.items():
        row = {"target": target, "concurrency": concurrency, "rounds": len(group)}
        for key in group[0]:
            if key in ("target", "concurrency"):
                continue
            values = [g[key] for g in group]
            row[key] = sum(values) if key == "errors" else float(np.median(values))
        row["min_max"] = (min(g["responses_per_s"] for g in group),
                          max(g["responses_per_s"] for g in group))
        out.append(row)
    return out


def report(rows: list[dict[str, Any]], failed: dict[str, str],
           args: argparse.Namespace) -> None:
    merged = median_rows(rows)
    triton = {r["concurrency"]: r["responses_per_s"] for r in merged if r["target"] == "triton"}
    print(f"\n## Streamed responses per second, {args.responses} INT32 responses per request, "
          f"gRPC ModelStreamInfer ({os.cpu_count()} cores; server on CPU "
          f"{args.server_cpus or 'any'}, clients on CPU {args.client_cpus or 'any'}; "
          f"{args.duration:g} s points, median of {args.rounds} round(s))\n")
    print("| target | streams | responses/s | min-max | requests/s | p50 first ms | "
          "p50 request ms | p99 request ms | errors | server CPU µs/response | "
          "client procs | client CPU % | steal % | vs Triton |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in sorted(merged, key=lambda r: (r["concurrency"], list(TARGETS).index(r["target"]))):
        ratio = (f"{r['responses_per_s'] / triton[r['concurrency']]:.2f}"
                 if triton.get(r["concurrency"]) else "-")
        print(f"| {r['target']} | {r['concurrency']} | {r['responses_per_s']:.0f} | "
              f"{r['min_max'][0]:.0f}-{r['min_max'][1]:.0f} | {r['requests_per_s']:.1f} | "
              f"{r['p50_first_ms']:.2f} | {r['p50_request_ms']:.2f} | "
              f"{r['p99_request_ms']:.2f} | {r['errors']} | "
              f"{r['server_cpu_us_per_response']:.1f} | {r['client_procs']:.0f} | "
              f"{r['client_cpu_pct']:.0f} | {r['steal_pct']:.0f} | {ratio} |")
    for label, reason in failed.items():
        print(f"\n{label} FAILED (not timed): {reason}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"rows": rows, "failed": failed}, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per point")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds")
    parser.add_argument("--concurrency", default="1,4,16",
                        help="concurrent streams, each with one request in flight")
    parser.add_argument("--responses", type=int, default=100, help="responses per request")
    parser.add_argument("--targets", default=",".join(TARGETS),
                        help=f"comma-separated, of {', '.join(TARGETS)}")
    parser.add_argument("--client-procs", type=int, default=4,
                        help="client processes at most (streams are spread over them)")
    parser.add_argument("--server-cpus", default="0", help="taskset list; empty: no pinning")
    parser.add_argument("--client-cpus", default="1", help="taskset list; empty: no pinning")
    parser.add_argument("--json-out", default="", help="write the raw rows here")
    parser.add_argument("--before", action="append", default=[], metavar="NAME=EXE",
                        help="also measure another naiad (e.g. an earlier commit's "
                             "executable) as target NAME; add NAME to --targets")
    # the client process's own arguments
    parser.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--streams", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--start-at", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        client_main(args)
        return
    for extra in args.before:
        name, _, exe = extra.partition("=")
        TARGETS[name] = (exe, ())
    unknown = set(args.targets.split(",")) - set(TARGETS) - {""}
    if unknown:
        parser.error(f"unknown targets {sorted(unknown)}; known: {', '.join(TARGETS)}")
    run(args)


if __name__ == "__main__":
    main()
