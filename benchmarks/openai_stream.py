#!/usr/bin/env python3
"""Streamed tokens per second and time to first token through the OpenAI API
(``/v1/chat/completions``, ``stream: true``) against the same decoupled model over gRPC
``ModelStreamInfer``, in one naiad process, in one run; and the OpenAI frontend's own cost
per token.

The model (``benchmarks/models/openai_tokens``) sends ``--tokens`` responses of one word per
request, as fast as it can: the serving path is what is measured. At each concurrency C
(``--concurrency``, 1, 8 and 64 by default), C client threads each keep one request in flight
for ``--duration`` seconds, first over gRPC, then over the OpenAI API. Reported per point:
tokens/s (responses read before the deadline / duration), time to first token p50/p99 (a
request's send to its first content chunk or response), and the server process's CPU per
token (its own threads, from /proc; the model's worker process is the same both ways and is
not counted). The frontend's cost per token is the difference of the two CPU figures.

``--paths`` adds ``generate_stream`` (KServe HTTP's SSE stream of the same model) and
``--frontend-processes N`` starts naiad with N frontend processes: what crosses the bridge
(HTTP, generate_stream) then has its CPU split into the engine's and the frontend
processes' (``frontends CPU µs/token``). That is what would happen to the OpenAI API
served through the bridge: the same SSE chunks, one frame per chunk (docs/design.md,
"Processes").

Bounded: every client stops at its deadline; the server runs on loopback in its own process
group and is stopped through it.

  .venv/bin/python benchmarks/openai_stream.py --duration 10
  .venv/bin/python benchmarks/openai_stream.py --duration 1 --concurrency 1   # a check
  .venv/bin/python benchmarks/openai_stream.py --paths openai,generate_stream \
      --frontend-processes 2      # the SSE stream through the bridge, against the engine's
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
MODEL_DIR = HERE / "models" / "openai_tokens"
MODEL = "openai_tokens"
SECONDS = 1.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """User + system CPU of process ``pid``'s own threads (not its children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def frontend_pids(pid: int) -> list[int]:
    """The frontend processes (``naiad.frontends.bridge.frontend_main``) of engine ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat[1]) == pid and b"naiad.frontends.bridge.frontend_main" in cmdline:
            found.append(int(entry.name))
    return found


def write_tokenizer(folder: Path) -> Path:
    """A word-level tokenizer with a chat template (chat needs one), built here."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    folder.mkdir(parents=True)
    tokenizer = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(["go tok user assistant"], trainers.WordLevelTrainer(
        special_tokens=["<unk>"]))
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": (
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "assistant:")}))
    return folder


def start_server(repository: Path, frontend_processes: int = 0
                 ) -> tuple[subprocess.Popen, dict[str, int]]:
    ports = {name: free_port() for name in ("http", "grpc", "metrics", "openai")}
    process = subprocess.Popen(
        [sys.executable, "-m", "naiad", "serve", "--model-repository", str(repository),
         "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1",
         "--metrics-address", "127.0.0.1", "--http-port", str(ports["http"]),
         "--grpc-port", str(ports["grpc"]), "--metrics-port", str(ports["metrics"]),
         "--allow-openai", "--openai-port", str(ports["openai"]),
         "--tokenizer", str(write_tokenizer(repository.parent / "tokenizer")),
         "--frontend-processes", str(frontend_processes)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    import requests

    deadline = time.monotonic() + 120 * SECONDS
    while time.monotonic() < deadline:
        try:
            if requests.get(f"http://127.0.0.1:{ports['http']}/v2/health/ready",
                            timeout=2).status_code == 200:
                return process, ports
        except requests.RequestException:
            pass
        if process.poll() is not None:
            raise RuntimeError("naiad exited during start-up")
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)
    raise RuntimeError("naiad was not ready within 120 s")


def openai_client(port: int, tokens: int, deadline: float, out: queue.Queue) -> None:
    import requests

    session = requests.Session()
    body = {"model": MODEL, "messages": [{"role": "user", "content": "go"}], "stream": True,
            "max_tokens": tokens}
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    count, firsts = 0, []
    while time.monotonic() < deadline:
        sent = time.perf_counter()
        first = None
        with session.post(url, json=body, stream=True, timeout=60) as response:
            for line in response.iter_lines():
                if not line.startswith(b"data: {"):
                    continue
                chunk = json.loads(line[6:])
                if chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                    first = first or time.perf_counter() - sent
                    if time.monotonic() < deadline:
                        count += 1
        if first is not None:
            firsts.append(first)
    out.put((count, firsts))


def generate_stream_client(port: int, tokens: int, deadline: float, out: queue.Queue
                           ) -> None:
    """KServe HTTP's ``generate_stream``: one SSE event per response of the model."""
    import requests

    session = requests.Session()
    body = {"text_input": "go", "stream": True, "max_tokens": tokens}
    url = f"http://127.0.0.1:{port}/v2/models/{MODEL}/generate_stream"
    count, firsts = 0, []
    while time.monotonic() < deadline:
        sent = time.perf_counter()
        first = None
        with session.post(url, json=body, stream=True, timeout=60) as response:
            response.raise_for_status()
            for line in response.iter_lines():
                if not line.startswith(b"data: {"):
                    continue
                if b'"error"' in line:
                    raise RuntimeError(line.decode())
                first = first or time.perf_counter() - sent
                if time.monotonic() < deadline:
                    count += 1
        if first is not None:
            firsts.append(first)
    out.put((count, firsts))


def grpc_client(port: int, tokens: int, deadline: float, out: queue.Queue) -> None:
    import tritonclient.grpc as grpcclient

    responses: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    text = grpcclient.InferInput("text_input", [1, 1], "BYTES")
    text.set_data_from_numpy(np.array([[b"go"]], dtype=object))
    stream = grpcclient.InferInput("stream", [1, 1], "BOOL")
    stream.set_data_from_numpy(np.array([[True]]))
    limit = grpcclient.InferInput("max_tokens", [1, 1], "INT32")
    limit.set_data_from_numpy(np.array([[tokens]], dtype=np.int32))
    count, firsts = 0, []
    try:
        while time.monotonic() < deadline:
            sent = time.perf_counter()
            client.async_stream_infer(MODEL, [text, stream, limit],
                                      enable_empty_final_response=True)
            first = None
            while True:
                result, error = responses.get(timeout=60)
                if error is not None:
                    raise RuntimeError(str(error))
                if result.get_response().parameters["triton_final_response"].bool_param:
                    break
                first = first or time.perf_counter() - sent
                if time.monotonic() < deadline:
                    count += 1
            if first is not None:
                firsts.append(first)
    finally:
        client.stop_stream()
        client.close()
    out.put((count, firsts))


def point(kind: str, ports: dict[str, int], pid: int, concurrency: int, tokens: int,
          duration: float) -> dict[str, float]:
    target = {"openai": openai_client, "grpc": grpc_client,
              "generate_stream": generate_stream_client}[kind]
    port = ports[{"openai": "openai", "grpc": "grpc", "generate_stream": "http"}[kind]]
    out: queue.Queue = queue.Queue()
    frontends = frontend_pids(pid)
    before = cpu_seconds(pid)
    before_frontends = sum(cpu_seconds(frontend) for frontend in frontends)
    deadline = time.monotonic() + duration
    threads = [threading.Thread(target=target, args=(port, tokens, deadline, out))
               for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=duration + 120)
    cpu = cpu_seconds(pid) - before
    frontends_cpu = sum(cpu_seconds(frontend) for frontend in frontends) - before_frontends
    results = [out.get() for _ in range(out.qsize())]
    count = sum(c for c, _ in results)
    firsts = [f for _, fs in results for f in fs] or [float("nan")]
    return {"tokens_per_s": count / duration,
            "ttft_p50_ms": float(np.percentile(firsts, 50)) * 1e3,
            "ttft_p99_ms": float(np.percentile(firsts, 99)) * 1e3,
            "server_cpu_us_per_token": cpu / max(count, 1) * 1e6,
            "frontends_cpu_us_per_token": frontends_cpu / max(count, 1) * 1e6}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per point")
    parser.add_argument("--concurrency", default="1,8,64", help="streams at once, per point")
    parser.add_argument("--tokens", type=int, default=64, help="responses per request")
    parser.add_argument("--paths", default="grpc,openai",
                        help="of grpc, openai, generate_stream (KServe HTTP's SSE)")
    parser.add_argument("--frontend-processes", type=int, default=0,
                        help="naiad serve --frontend-processes (HTTP and gRPC through the "
                             "bridge; the OpenAI API stays in the engine)")
    args = parser.parse_args()
    paths = args.paths.split(",")
    workdir = Path(tempfile.mkdtemp(prefix="naiad-openai-bench-"))
    repository = workdir / "models"
    shutil.copytree(MODEL_DIR, repository / MODEL)
    process, ports = start_server(repository, args.frontend_processes)
    rows = []
    try:
        for concurrency in (int(c) for c in args.concurrency.split(",")):
            for kind in paths:
                result = point(kind, ports, process.pid, concurrency, args.tokens,
                               args.duration)
                rows.append({"path": kind, "streams": concurrency, **result})
                print(json.dumps(rows[-1]), flush=True)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\nfrontend processes: {args.frontend_processes}")
    print("| streams | path | tokens/s | TTFT p50 ms | TTFT p99 ms | server CPU µs/token "
          "| frontends CPU µs/token |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['streams']} | {row['path']} | {row['tokens_per_s']:.0f} | "
              f"{row['ttft_p50_ms']:.2f} | {row['ttft_p99_ms']:.2f} | "
              f"{row['server_cpu_us_per_token']:.1f} | "
              f"{row['frontends_cpu_us_per_token']:.1f} |")
    by = {(r["streams"], r["path"]): r for r in rows}
    if not {"grpc", "openai"} <= set(paths):
        return 0
    for streams in sorted({r["streams"] for r in rows}):
        cost = (by[(streams, "openai")]["server_cpu_us_per_token"]
                - by[(streams, "grpc")]["server_cpu_us_per_token"])
        print(f"OpenAI frontend's own cost at {streams} streams: {cost:.1f} µs of server CPU "
              f"per token over gRPC's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
