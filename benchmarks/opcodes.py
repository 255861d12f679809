#!/usr/bin/env python3
"""Python opcodes per request on the engine's event loop, by function and by phase.

Why: ``instructions.py`` counts what the engine costs; this says where in a request's life
the Python work happens. At concurrency 1 on one core the work the engine does after the
answer is written overlaps the client's turn-round, and everything else is on the request's
critical path, so the split between the phases bounds what moving work later can gain
(issue 26, ``benchmarks/results/issue26-session10-2026-11-29.md``).

How: the engine runs under this file as its launcher, with a ``sys.settrace`` opcode counter
on the loop's thread that SIGUSR1 switches on and SIGUSR2 off (dumping what it counted).
It serves ``payloads.py``'s ``identity`` model (the Triton Python model, FP32 [1, 16]) in its
worker process; after a warm-up, h2load sends ``--requests`` requests one at a time per
protocol. Tracing slows the engine, which does not change what runs at concurrency 1
(each request is alone). Each opcode counts toward the function it runs in and toward the
phase the request is in, which the first call of these functions starts:

- ``request``: a request's bytes arrive (the HTTP or gRPC protocol's ``data_received``)
  until the batch goes to the worker (the worker transport's ``_send_some``);
- ``waiting``: from there until the worker's answer is read (its ``_readable``);
- ``result``: from there until the answer is written (HTTP: ``protocol.py``'s ``_answer``,
  which makes the response's bytes and writes them; gRPC: ``sending.py``'s ``flush``, which
  writes what the round queued, after the round's callbacks);
- ``answered``: the write and whatever runs after it, until the next request.

    .venv/bin/python benchmarks/opcodes.py --protocols http,grpc --requests 512

``--workers``: the Python workers' main threads are counted too, by function (a worker has
no phases: it runs one request at a time). A ``sitecustomize.py`` on the workers'
``PYTHONPATH``, which they inherit from the engine, installs the same counter in every
worker, switched by the same signals.

Needs h2load. The counts are exact for a given code path (two runs of the same code differed
by at most one opcode per request), so two checkouts compare by running this in each.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import instructions
import protocol_overhead as po

PHASES = ("request", "waiting", "result", "answered")
# The functions (file, name) whose call starts each phase (see the module's docstring).
PHASE_STARTS = {("limits.py", "data_received"): "request",
                ("connection.py", "data_received"): "request",
                ("transport.py", "_send_some"): "waiting",
                ("transport.py", "_readable"): "result",
                ("protocol.py", "_answer"): "answered",
                ("sending.py", "flush"): "answered"}
WARMUP_REQUESTS = 200
READY_TIMEOUT_S = 120.0
# How long the traced engine gets to write its counts after SIGUSR2.
DUMP_WAIT_S = 30.0
SERVE_TRACED = "serve-traced"


def serve_traced(naiad_argv: list[str]) -> None:
    """Run ``naiad serve`` with the opcode counter (this file's launcher mode). The counts
    go to ``$NAIAD_OPCODES_OUT`` as JSON when SIGUSR2 arrives."""
    by_function: collections.Counter[str] = collections.Counter()
    by_phase: collections.Counter[str] = collections.Counter()
    state = {"phase": "answered"}

    def count(frame: Any, event: str, arg: Any) -> Any:
        if event == "opcode":
            code = frame.f_code
            by_function[f"{code.co_filename}:{code.co_firstlineno}:{code.co_name}"] += 1
            by_phase[state["phase"]] += 1
        return count

    def enter(frame: Any, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        code = frame.f_code
        phase = PHASE_STARTS.get((os.path.basename(code.co_filename), code.co_name))
        if phase is not None:
            state["phase"] = phase
        return count

    def start(*_: Any) -> None:
        by_function.clear()
        by_phase.clear()
        sys.settrace(enter)  # signal handlers run on the main thread: the event loop's

    def stop(*_: Any) -> None:
        sys.settrace(None)
        out = Path(os.environ["NAIAD_OPCODES_OUT"])
        partial = out.with_suffix(".partial")
        partial.write_text(json.dumps({"functions": dict(by_function),
                                       "phases": dict(by_phase)}))
        partial.replace(out)  # whole, or not there: the driver waits for it

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    sys.argv = ["naiad", *naiad_argv]
    runpy.run_module("naiad", run_name="__main__")


# The worker's counter: what serve_traced installs in the engine, by function only. Only
# a process started as a Python worker (``python -c BOOTSTRAP STUB_DIR ...``) installs it.
WORKER_SITE = """
import os, sys
if sys.argv[:1] == ["-c"] and len(sys.argv) > 1 and sys.argv[1].endswith("stub"):
    import collections, json, signal
    _counts = collections.Counter()

    def _count(frame, event, arg):
        if event == "opcode":
            code = frame.f_code
            _counts[f"{code.co_filename}:{code.co_firstlineno}:{code.co_name}"] += 1
        return _count

    def _enter(frame, event, arg):
        frame.f_trace_opcodes = True
        return _count

    def _start(*_):
        _counts.clear()
        sys.settrace(_enter)

    def _stop(*_):
        sys.settrace(None)
        out = os.environ["NAIAD_OPCODES_WORKER_OUT"] + f".{os.getpid()}"
        with open(out + ".partial", "w") as f:
            json.dump(dict(_counts), f)
        os.replace(out + ".partial", out)

    signal.signal(signal.SIGUSR1, _start)
    signal.signal(signal.SIGUSR2, _stop)
"""


def worker_pids(engine: int) -> list[int]:
    """The Python workers the engine started (its children running the stub)."""
    return [pid for pid in instructions.children(engine)
            if "naiad_stub_main" in instructions.command_line(pid)]


def measure(protocol: str, requests: int, work: Path, repo: Path, payload_dir: Path,
            naiad_args: list[str], workers: bool = False) -> dict[str, Any]:
    """The counts over ``requests`` requests of ``protocol``, from a fresh engine (and its
    workers' counts, by function, under ``"workers"``, with ``workers``)."""
    target = instructions.Target("naiad")
    target.ports = {k: po.free_port() for k in ("http", "grpc", "metrics")}
    out = work / f"opcodes-{protocol}.json"
    env = dict(target.env(), NAIAD_OPCODES_OUT=str(out))
    worker_out = work / f"opcodes-{protocol}-worker"
    if workers:
        site = work / "worker-site"
        site.mkdir(exist_ok=True)
        (site / "sitecustomize.py").write_text(WORKER_SITE)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(site), *filter(None, [env.get("PYTHONPATH")])])
        env["NAIAD_OPCODES_WORKER_OUT"] = str(worker_out)
    cmd = [sys.executable, __file__, SERVE_TRACED, "serve", "--model-repository", str(repo),
           "--http-port", str(target.ports["http"]), "--grpc-port", str(target.ports["grpc"]),
           "--metrics-port", str(target.ports["metrics"]), "--http-address", "127.0.0.1",
           "--grpc-address", "127.0.0.1", "--metrics-address", "127.0.0.1", *naiad_args]
    with (work / f"naiad-{protocol}.log").open("wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not instructions.ready(target.ports["http"]):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"naiad did not get ready; its log: "
                                   f"{work / f'naiad-{protocol}.log'}")
            time.sleep(0.3)
        instructions.load(target, protocol, WARMUP_REQUESTS, payload_dir)
        pids = worker_pids(proc.pid) if workers else []
        for pid in (proc.pid, *pids):
            os.kill(pid, signal.SIGUSR1)
        time.sleep(0.5)
        instructions.load(target, protocol, requests, payload_dir)
        for pid in (proc.pid, *pids):
            os.kill(pid, signal.SIGUSR2)
        outs = [out, *(Path(f"{worker_out}.{pid}") for pid in pids)]
        deadline = time.monotonic() + DUMP_WAIT_S
        while not all(path.exists() for path in outs):
            if time.monotonic() > deadline:
                raise RuntimeError("the traced engine or a worker wrote no counts")
            time.sleep(0.2)
        counts = json.loads(out.read_text())
        if workers:
            summed: collections.Counter[str] = collections.Counter()
            for path in outs[1:]:
                summed.update(json.loads(path.read_text()))
            counts["workers"] = dict(summed)
        return counts
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def short_name(key: str) -> str:
    path, line, name = key.rsplit(":", 2)
    return f"{Path(path).name}:{line}:{name}"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [SERVE_TRACED]:
        serve_traced(argv[1:])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--protocols", default="http,grpc",
                    type=lambda s: [p for p in s.split(",") if p])
    ap.add_argument("--requests", type=int, default=512,
                    help="counted requests per protocol (a multiple of 256: the statistics "
                         "fold every 256 requests, so any such count holds a whole number "
                         "of folds)")
    ap.add_argument("--top", type=int, default=30, help="functions listed per protocol")
    ap.add_argument("--naiad-arg", action="append", default=[],
                    help="an extra flag for naiad serve")
    ap.add_argument("--workers", action="store_true",
                    help="count the Python workers' main threads too, by function")
    ap.add_argument("--json-out")
    args = ap.parse_args(argv)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="naiad-opcodes-") as tmp:
        work = Path(tmp)
        repo = po.write_repository(work)
        payload_dir = po.write_payloads(work)
        for protocol in args.protocols:
            counts = measure(protocol, args.requests, work, repo, payload_dir, args.naiad_arg,
                             args.workers)
            results[protocol] = counts
            n = args.requests
            phases = counts["phases"]
            total = sum(phases.values())
            print(f"\n{protocol}: {total / n:,.0f} opcodes per request on the event loop")
            print("| phase | opcodes per request | share |\n|---|---|---|")
            for phase in PHASES:
                value = phases.get(phase, 0)
                print(f"| {phase} | {value / n:,.0f} | {value / total:.1%} |")
            print("\n| function | opcodes per request |\n|---|---|")
            ranked = sorted(counts["functions"].items(), key=lambda kv: -kv[1])
            for key, value in ranked[:args.top]:
                print(f"| {short_name(key)} | {value / n:,.1f} |")
            if "workers" in counts:
                total = sum(counts["workers"].values())
                print(f"\n{protocol}: {total / n:,.0f} opcodes per request in the workers' "
                      f"main threads")
                print("\n| function | opcodes per request |\n|---|---|")
                ranked = sorted(counts["workers"].items(), key=lambda kv: -kv[1])
                for key, value in ranked[:args.top]:
                    print(f"| {short_name(key)} | {value / n:,.1f} |")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
