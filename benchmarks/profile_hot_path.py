#!/usr/bin/env python3
"""Profile naiad's hot path under load with py-spy: where the server's CPU goes per request.

Starts ``naiad serve`` (pinned to ``--server-cpus``) on the same repository as
protocol_overhead.py, checks correctness, then per protocol runs closed-loop load (wrk or
h2load at ``--concurrency``, pinned to ``--client-cpus``) and, in the middle of it, samples
the server process group with ``py-spy record --format raw`` (``--native`` by default, so
uvloop/httptools/grpc C frames show up, and ``--subprocesses`` so the Python-backend stub
processes are included). Prints, per protocol and per process, the top functions by self
time and by inclusive time, as a share of the non-idle samples and as microseconds per
request (share x server CPU per request measured over the same window, with py-spy on).
Raw files (``*.raw``, loadable in speedscope.app or flamegraph.pl) stay in the work folder.

  .venv/bin/pip install py-spy
  .venv/bin/python benchmarks/profile_hot_path.py --model identity --concurrency 8
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import protocol_overhead as po  # noqa: E402

FRAME = re.compile(r"^(?P<func>.*?) \((?P<where>[^()]*)\)$")
# Where a thread sleeps rather than burns CPU: py-spy's own idle detection does not work
# with --native, so a sample whose deepest named frame is one of these counts as idle.
WAITS = {"epoll_wait", "epoll_pwait", "uv__io_poll", "poll", "select", "pselect", "ppoll",
         "PyThread_acquire_lock_timed", "pthread_cond_timedwait", "pthread_cond_wait",
         "pthread_cond_clockwait", "take_gil", "sem_wait", "sem_timedwait", "sem_clockwait",
         "nanosleep", "clock_nanosleep", "accept", "accept4", "futex", "syscall",
         "select.epoll.poll", "epoll.poll", "EpollSelector.select", "lock.acquire",
         "Condition.wait", "Event.wait", "_queue_SimpleQueue_get_impl", "wait"}


def short(frame: str) -> str:
    """'func (path/to/file.py:123)' -> 'file.py:func' with the path cut at site-packages/naiad."""
    m = FRAME.match(frame.strip())
    if not m:
        return frame.strip()
    func, where = m.group("func"), m.group("where")
    path = where.rsplit(":", 1)[0]
    for marker in ("site-packages/", "/core/", "/plugins/", "lib/python3.11/", "/benchmarks/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{path}:{func}"


def idle(frames: list[str]) -> bool:
    for frame in reversed(frames):
        m = FRAME.match(frame.strip())
        func = m.group("func") if m else frame.strip()
        if func.startswith("0x"):
            continue
        return func in WAITS
    return True


def analyse(raw: Path) -> dict[str, dict[str, Any]]:
    """Per process (root frame with --subprocesses): busy sample count, self and inclusive
    Counters (idle samples dropped, counted in "idle")."""
    procs: dict[str, dict[str, Any]] = defaultdict(lambda: {"samples": 0, "idle": 0,
                                                            "self": Counter(),
                                                            "incl": Counter()})
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")
        proc = "server"
        if frames and frames[0].startswith("process "):
            proc = frames[0][:80]
            frames = frames[1:]
        if frames and frames[0].startswith("thread "):
            frames = frames[1:]
        p = procs[proc]
        if idle(frames):
            p["idle"] += n
            continue
        p["samples"] += n
        names = [short(f) for f in frames]
        if names:
            p["self"][names[-1]] += n
        for name in set(names):
            p["incl"][name] += n
    return procs


def report(proto: str, procs: dict[str, dict[str, Any]], cpu_us: float, rps: float,
           top: int) -> str:
    total = sum(p["samples"] for p in procs.values()) or 1
    idle_n = sum(p["idle"] for p in procs.values())
    out = [f"### {proto}: {rps:.0f} req/s under py-spy, server CPU {cpu_us:.0f} us/request "
           f"(all processes), {total} busy samples ({idle_n} idle samples dropped)"]
    for proc, p in sorted(procs.items(), key=lambda kv: -kv[1]["samples"]):
        share = p["samples"] / total
        out.append(f"\n#### {proc}: {share:.0%} of samples (~{share * cpu_us:.0f} us/request)\n")
        ours = Counter({k: v for k, v in p["incl"].items()
                        if k.startswith(("naiad/", "naiad_backend_python/"))})
        for title, counter in (("self", p["self"]), ("inclusive", p["incl"]),
                               ("inclusive, naiad's own functions", ours)):
            out.append(f"| top {title} | % of all samples | us/request |")
            out.append("|---|---|---|")
            for name, n in counter.most_common(top):
                out.append(f"| `{name}` | {n / total:.1%} | {n / total * cpu_us:.1f} |")
            out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="identity", choices=list(po.payloads.MODELS))
    ap.add_argument("--protocols", type=po.csv(), default=["http", "grpc"])
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--duration", type=float, default=10, help="seconds sampled per protocol")
    ap.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    ap.add_argument("--no-native", action="store_true", help="Python frames only")
    ap.add_argument("--nonblocking", action="store_true",
                    help="do not pause the server to sample (less overhead; needs --no-native)")
    ap.add_argument("--http-server", default="uvicorn", choices=["uvicorn", "hypercorn"])
    ap.add_argument("--http-encoding", choices=["json", "binary"], default="json")
    ap.add_argument("--naiad", default=po.default_naiad())
    ap.add_argument("--naiad-arg", action="append", default=[])
    ap.add_argument("--py-spy", default=str(Path(sys.executable).parent / "py-spy"))
    ap.add_argument("--server-cpus", default="0")
    ap.add_argument("--client-cpus", default="1")
    ap.add_argument("--ready-timeout", type=float, default=120)
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--work", default="")
    ap.add_argument("--out", default="", help="also write the report (markdown) here")
    args = ap.parse_args(argv)
    if not Path(args.py_spy).exists():
        args.py_spy = shutil.which("py-spy") or ap.error("py-spy not found: pip install py-spy")
    args.models = [args.model]
    if args.nonblocking and not args.no_native:
        ap.error("--nonblocking needs --no-native (py-spy cannot unwind native frames then)")

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the server on SIGTERM too
    work = Path(args.work or tempfile.mkdtemp(prefix="naiad-profile-"))
    work.mkdir(parents=True, exist_ok=True)
    repo = po.write_repository(work)
    payload_dir = po.write_payloads(work)
    target = po.Target(f"naiad-{args.http_server}", "naiad", args.protocols, args.http_server)
    target.ports = {"http": po.free_port(), "grpc": po.free_port(), "metrics": po.free_port()}
    run = po.Running(target, target.command(args, repo), args, work / "naiad.log")
    sections = []
    try:
        why = po.wait_ready(run, args.models, args.ready_timeout)
        if why:
            print(f"naiad not ready: {why}", file=sys.stderr)
            return 1
        for proto in args.protocols:
            if proto == "http":
                ok, notes = po.check_http(target.ports["http"], args.model, payload_dir)
                reply = 0
            else:
                ok, notes, reply = po.check_grpc(target.ports["grpc"], args.model, payload_dir)
            print(f"{proto} gate: {'ok' if ok else 'FAILED'}: {notes}", flush=True)
            if not ok:
                continue
            load_s = args.duration + 6
            result: dict[str, Any] = {}

            def load(proto: str = proto, reply: int = reply, result: dict = result,
                     load_s: float = load_s) -> None:
                if proto == "http":
                    result.update(po.run_wrk(target.ports["http"], args.model,
                                             args.concurrency, load_s, payload_dir, args))
                else:
                    result.update(po.run_h2load(target.ports["grpc"], args.model,
                                                args.concurrency, load_s, payload_dir, args,
                                                reply, work))

            th = threading.Thread(target=load)
            th.start()
            time.sleep(3)  # warm
            raw = work / f"{proto}-{args.model}-c{args.concurrency}.raw"
            cmd = [args.py_spy, "record", "--pid", str(run.proc.pid), "--duration",
                   str(int(args.duration)), "--rate", str(args.rate), "--format", "raw",
                   "--subprocesses", "-o", str(raw)]
            if not args.no_native:
                cmd.append("--native")
            if args.nonblocking:
                cmd.append("--nonblocking")
            cpu0, t0 = run.cpu_seconds(), time.monotonic()
            p = subprocess.run(cmd, capture_output=True, text=True,
                               timeout=args.duration + 60)
            cpu, elapsed = run.cpu_seconds() - cpu0, time.monotonic() - t0
            th.join(load_s + 60)
            if p.returncode != 0 or not raw.exists():
                print(f"py-spy failed: {p.stderr[-500:]}", file=sys.stderr)
                continue
            rps = result.get("rps", float("nan"))
            cpu_us = cpu / (rps * elapsed) * 1e6 if rps == rps and rps else float("nan")
            print(f"{proto}: {rps:.0f} req/s over the whole load run, errors "
                  f"{result.get('errors')}; profile in {raw}", flush=True)
            sections.append(report(proto, analyse(raw), cpu_us, rps, args.top))
    finally:
        run.stop()
    mode = ("Python frames only" if args.no_native else "native + Python frames") + \
        (", non-blocking sampling" if args.nonblocking else ", server paused per sample")
    text = (f"# naiad hot-path profile: {args.model}, c={args.concurrency}, "
            f"--http-server {args.http_server}, HTTP body {args.http_encoding}; py-spy "
            f"{mode} at {args.rate} Hz\n\n"
            + "\n\n".join(sections) + "\n")
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
