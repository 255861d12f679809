"""CPU per request per process: naiad (server, frontend processes, Python workers) next to
the real Triton 2.51 (tritonserver and its Python stubs), in one run.

Each target serves the ``identity`` Triton Python model (``payloads.py``, FP32 [1, 16])
pinned to ``--server-cpus``; wrk (HTTP), h2load (gRPC ``ModelInfer``) or the real
perf_analyzer (``grpc-stream``: ``--streaming``, from ``../shared/perf_analyzer``) load it from
``--client-cpus`` for ``--duration`` seconds per point. The CPU time of every process of
the target (the server and all its descendants, read from ``/proc/PID/stat``) is taken
before and after each point and divided by the requests completed, per role:

- ``server``: the process started (naiad's engine, or tritonserver);
- ``frontends``: naiad's frontend processes (``--frontend-processes``);
- ``workers``: naiad's Python worker processes, or Triton's Python backend stubs.

Rounds are interleaved (target order reversed on even rounds); the table shows the median
over rounds. Needs wrk, h2load, taskset; Triton from ``../shared/triton/setup.sh``
(``--triton DIR``; a target that cannot start is reported, not timed).

    .venv/bin/python benchmarks/process_cpu.py --concurrency 1,8 --rounds 3 --duration 8
    .venv/bin/python benchmarks/process_cpu.py --targets naiad,naiad-inprocess --protocols http
    .venv/bin/python benchmarks/process_cpu.py --naiad-arg=--frontend-processes=2 --server-cpus 0,1
    .venv/bin/python benchmarks/process_cpu.py --protocols grpc-stream --concurrency 8 \
        --targets naiad,fp1,triton --variant fp1=--frontend-processes=1
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import payloads
import protocol_overhead as po

CLK_TCK = os.sysconf("SC_CLK_TCK")
TRITON_DEFAULT = Path(tempfile.gettempdir()) / "naiad-triton-reference"
# How long a target may take to load its model, and to stop (SIGTERM, then SIGKILL).
READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0


def process_tree(root: int) -> dict[int, str]:
    """``root`` and every descendant: pid -> its command line (the role is read from it)."""
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry))
        names[int(entry)] = cmdline.decode(errors="replace")
    tree, todo = {}, [root]
    while todo:
        pid = todo.pop()
        tree[pid] = names.get(pid, "")
        todo.extend(children.get(pid, ()))
    return tree


def role(pid: int, root: int, cmdline: str) -> str:
    if pid == root:
        return "server"
    if "frontend_main" in cmdline:
        return "frontends"
    if "stub" in cmdline or "naiad_stub_main" in cmdline:
        return "workers"
    return "other"


def cpu_seconds(pid: int) -> float:
    """User + system CPU of one process (all its threads), in seconds; 0 once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def sample(root: int) -> dict[int, tuple[str, float]]:
    return {pid: (role(pid, root, cmd), cpu_seconds(pid))
            for pid, cmd in process_tree(root).items()}


def interpreters(root: int) -> dict[str, list[str]]:
    """The Python each role's processes run, per role: the ``libpython`` they map, else
    their executable when it is a Python. Triton's stubs load the system's shared
    ``libpython3.X`` (Debian's is built with PGO and LTO), while naiad runs on whatever
    interpreter its environment has: a pyenv build without ``--enable-optimizations`` takes
    about 1.5 times as long over pure-Python code, and serves 17-21 % fewer requests at
    c=1 (``results/issue26-session9-2026-11-29.md``)."""
    found: dict[str, set[str]] = {}
    for pid, cmdline in process_tree(root).items():
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
            exe = os.path.realpath(f"/proc/{pid}/exe")
        except OSError:
            continue
        libraries = {line.split()[-1] for line in maps.splitlines()
                     if "/libpython" in line}
        if not libraries and Path(exe).name.startswith("python"):
            libraries = {exe}
        if libraries:
            found.setdefault(role(pid, root, cmdline), set()).update(libraries)
    return {name: sorted(paths) for name, paths in sorted(found.items())}


def per_role(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
             ) -> dict[str, float]:
    spent: dict[str, float] = {}
    for pid, (name, seconds) in after.items():
        spent[name] = spent.get(name, 0.0) + seconds - before.get(pid, (name, 0.0))[1]
    return spent


class Target:
    def __init__(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        self.name, self.argv, self.env = name, argv, env
        self.process: subprocess.Popen[bytes] | None = None
        self.ports: dict[str, int] = {}

    def start(self, cpus: str, log: Path) -> str | None:
        self.ports = {k: po.free_port() for k in ("http", "grpc", "metrics")}
        argv = [a.format(http=self.ports["http"], grpc=self.ports["grpc"],
                         metrics=self.ports["metrics"]) for a in self.argv]
        if cpus:
            argv = ["taskset", "-c", cpus, *argv]
        with log.open("wb") as out:
            self.process = subprocess.Popen(argv, env={**os.environ, **self.env}, stdout=out,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return f"exited {self.process.returncode} (see {log})"
            try:
                if po.http_get(self.ports["http"], "/v2/models/identity/ready") == 200:
                    return None
            except OSError:
                pass
            time.sleep(0.2)
        return f"not ready after {READY_TIMEOUT_S:.0f} s (see {log})"

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def targets(args: argparse.Namespace, repo: Path) -> list[Target]:
    naiad = [args.naiad, "serve", "--model-repository", str(repo), "--http-port", "{http}",
             "--grpc-port", "{grpc}", "--metrics-port", "{metrics}", "--http-address",
             "127.0.0.1", "--grpc-address", "127.0.0.1", "--metrics-address", "127.0.0.1",
             *args.naiad_arg]
    triton_dir = Path(args.triton) / "wheel" / "pytriton" / "tritonserver"
    triton = [str(triton_dir / "bin" / "tritonserver"), "--model-repository", str(repo),
              "--backend-directory", str(triton_dir / "backends"), "--http-port", "{http}",
              "--grpc-port", "{grpc}", "--metrics-port", "{metrics}", "--http-address",
              "127.0.0.1", "--grpc-address", "127.0.0.1", "--metrics-address", "127.0.0.1"]
    one_thread = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    known = {
        "naiad": Target("naiad", naiad, one_thread),
        "naiad-inprocess": Target("naiad-inprocess", list(naiad), one_thread),
        "triton": Target("triton", triton, one_thread),
    }
    for extra in args.before:
        name, _, command = extra.partition("=")
        exe, *flags = command.split()
        known[name] = Target(name, [exe, *naiad[1:], *flags], one_thread)
    for extra in args.variant:
        name, _, flags = extra.partition("=")
        known[name] = Target(name, [*naiad, *flags.split()], one_thread)
    unknown = [name for name in args.targets if name not in known]
    if unknown:
        raise SystemExit(f"unknown targets {unknown}: name them with --before or --variant "
                         f"(known: {sorted(known)})")
    return [known[name] for name in args.targets]


def write_repository(root: Path, inprocess: bool) -> Path:
    repo = po.write_repository(root / ("inprocess" if inprocess else "isolated"))
    if inprocess:
        config = repo / "identity" / "config.pbtxt"
        config.write_text(config.read_text() + 'parameters { key: "EXECUTION_MODE" '
                          'value { string_value: "in_process" } }\n')
    return repo


def perf_analyzer() -> tuple[Path, dict[str, str]]:
    """The real perf_analyzer (``../shared/perf_analyzer/setup.sh`` puts it in ``PA_VENV``,
    by default ``<tempdir>/naiad-perf-analyzer-venv``) and the environment it runs in (the
    ``libcudart.so.12`` it links comes from the same environment)."""
    venv = Path(os.environ.get("PA_VENV", Path(tempfile.gettempdir())
                               / "naiad-perf-analyzer-venv"))
    binary = venv / "bin" / "perf_analyzer"
    if not binary.exists():
        raise SystemExit(f"no perf_analyzer at {binary}: run ../shared/perf_analyzer/setup.sh")
    libraries = [str(path) for path in
                 venv.glob("lib/python3*/site-packages/nvidia/cuda_runtime/lib")]
    found = os.environ.get("LD_LIBRARY_PATH")
    return binary, {**os.environ,
                    "LD_LIBRARY_PATH": ":".join(libraries + ([found] if found else []))}


def answered(target: Target) -> int:
    """The identity model's successful requests so far (the server's metrics)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{target.ports['metrics']}/metrics",
                                timeout=5) as answer:
        text = answer.read().decode()
    for line in text.splitlines():
        if line.startswith('nv_inference_request_success{model="identity"'):
            return int(float(line.rsplit(" ", 1)[1]))
    return 0


def run_streams(target: Target, conc: int, args: argparse.Namespace) -> dict[str, Any]:
    """``conc`` gRPC ``ModelStreamInfer`` streams, each one request in flight, from the real
    perf_analyzer (``--streaming``): three measurement windows of a third of ``--duration``.
    Its requests are counted by the server (the model's ``nv_inference_request_success``)
    over the whole run, as its CPU is."""
    binary, env = perf_analyzer()
    window_ms = max(int(args.duration * 1000 / 3), 500)
    argv = [str(binary), "-m", "identity", "-u", f"127.0.0.1:{target.ports['grpc']}",
            "-i", "grpc", "--streaming", "--concurrency-range", str(conc),
            "--measurement-interval", str(window_ms), "--max-trials", "3",
            "--stability-percentage", "100", "--shape", "INPUT0:16"]
    if args.client_cpus:
        argv = ["taskset", "-c", args.client_cpus, *argv]
    before, started = answered(target), time.monotonic()
    run = subprocess.run(argv, env=env, capture_output=True, text=True,
                         timeout=args.duration * 4 + 60)
    elapsed, requests = time.monotonic() - started, answered(target) - before
    if run.returncode != 0:
        return {"error": f"perf_analyzer rc={run.returncode}: {(run.stdout + run.stderr)[-300:]}"}
    return {"rps": requests / elapsed, "requests": requests, "errors": 0}


def measure(target: Target, protocol: str, conc: int, args: argparse.Namespace,
            payload_dir: Path, work: Path, reply_frame: int) -> dict[str, Any]:
    assert target.process is not None
    root = target.process.pid
    before = sample(root)
    if protocol == "http":
        result = po.run_wrk(target.ports["http"], "identity", conc, args.duration, payload_dir,
                            args)
    elif protocol == "grpc-stream":
        result = run_streams(target, conc, args)
    else:
        result = po.run_h2load(target.ports["grpc"], "identity", conc, args.duration,
                               payload_dir, args, reply_frame, work)
    spent = per_role(before, sample(root))
    if "error" in result or not result["requests"]:
        return {"error": result.get("error", "no request completed")}
    per_request = {name: seconds / result["requests"] * 1e6 for name, seconds in spent.items()}
    return {**result, "cpu_us": per_request}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", default="naiad,naiad-inprocess,triton",
                        type=lambda s: s.split(","))
    parser.add_argument("--protocols", default="http,grpc", type=lambda s: s.split(","),
                        help="http (wrk), grpc (h2load: unary ModelInfer), grpc-stream "
                             "(perf_analyzer --streaming: ModelStreamInfer)")
    parser.add_argument("--concurrency", default="1,8",
                        type=lambda s: [int(c) for c in s.split(",")])
    parser.add_argument("--duration", type=float, default=8.0, help="seconds per point")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--server-cpus", default="0")
    parser.add_argument("--client-cpus", default="1")
    parser.add_argument("--naiad", default=po.default_naiad())
    parser.add_argument("--naiad-arg", action="append", default=[])
    parser.add_argument("--before", action="append", default=[], metavar="NAME=EXE",
                        help="another naiad executable to measure as target NAME (flags "
                             "after it, space-separated, go to its serve command)")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=FLAGS",
                        help="naiad with these extra flags, measured as target NAME")
    parser.add_argument("--triton", default=str(TRITON_DEFAULT),
                        help="folder ../shared/triton/setup.sh unpacked Triton into")
    parser.add_argument("--json-out")
    args = parser.parse_args(argv)
    args.http_encoding = "json"
    work = Path(tempfile.mkdtemp(prefix="naiad-process-cpu-"))
    payload_dir = po.write_payloads(work)
    repos = {False: write_repository(work, False), True: write_repository(work, True)}
    reply_frame = len(payloads.grpc_frame(payloads.grpc_response("identity")
                                          .SerializeToString()))
    rows: list[dict[str, Any]] = []
    pythons: dict[str, dict[str, list[str]]] = {}
    chosen = targets(args, repos[False])
    for rnd in range(args.rounds):
        order = chosen if rnd % 2 == 0 else list(reversed(chosen))
        for target in order:
            if target.name == "naiad-inprocess":
                target.argv[target.argv.index("--model-repository") + 1] = str(repos[True])
            failure = target.start(args.server_cpus, work / f"{target.name}-{rnd}.log")
            try:
                if failure:
                    print(f"{target.name}: {failure}", file=sys.stderr)
                    continue
                assert target.process is not None
                if rnd == 0:
                    pythons[target.name] = interpreters(target.process.pid)
                for protocol in args.protocols:
                    for conc in args.concurrency:
                        row = measure(target, protocol, conc, args, payload_dir, work,
                                      reply_frame)
                        row.update(target=target.name, protocol=protocol, c=conc, round=rnd)
                        rows.append(row)
                        print(json.dumps(row), file=sys.stderr)
            finally:
                target.stop()
    cpu_idle = po.idle_states()
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"rows": rows, "interpreters": pythons,
                                                   "cpu_idle": cpu_idle}, indent=1))
    print(table(rows))
    print(f"\nCPU idle: {cpu_idle}.")
    print("\nThe Python each target's processes run (libpython, or the executable):")
    for name, found in pythons.items():
        print(f"- {name}: " + "; ".join(f"{who} {', '.join(paths)}"
                                         for who, paths in found.items()))
    return 0


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| target | protocol | c | req/s (median, min-max) | server µs/req | "
             "frontends µs/req | workers µs/req | total µs/req |",
             "|---|---|---|---|---|---|---|---|"]
    keys = sorted({(r["target"], r["protocol"], r["c"]) for r in rows if "error" not in r},
                  key=lambda k: (k[1], k[2], k[0]))
    for key in keys:
        points = [r for r in rows if (r["target"], r["protocol"], r["c"]) == key
                  and "error" not in r]
        rps = [p["rps"] for p in points]
        cells = []
        for name in ("server", "frontends", "workers"):
            values = [p["cpu_us"].get(name, 0.0) for p in points]
            cells.append(f"{statistics.median(values):.0f}" if any(values) else "-")
        total = statistics.median(sum(p["cpu_us"].values()) for p in points)
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {statistics.median(rps):.0f} "
                     f"({min(rps):.0f}-{max(rps):.0f}) | {' | '.join(cells)} | {total:.0f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
