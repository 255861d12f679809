#!/usr/bin/env python3
"""Instructions per request in naiad's engine, counted by callgrind.

Why: on this project's shared 2-core machine req/s and CPU time move 15-35 % between two
runs of the same code, so a change worth 5 % cannot be seen in them however many rounds are
taken. callgrind (valgrind) counts the instructions the engine process executes, which does
not depend on the machine's load: the same code gives the same count to a fraction of a
percent. It does not count the kernel (system calls, wake-ups) or cache misses, so it
complements ``process_cpu.py``, it does not replace it: use it to see whether a change to
the request path's code makes it cheaper, and process_cpu.py for what that is worth.

How: each target serves ``payloads.py``'s ``identity`` model (the Triton Python model,
FP32 [1, 16]) with its default settings: the model runs in its worker process, counted too
(``--no-workers``: the worker runs natively and only the engine is counted), and so are
frontend processes (``--naiad-arg=--frontend-processes=N``), together, as ``frontends``.
Once the server is ready and warmed up, counting is switched on (``callgrind_control``),
the processes are counted idle for ``--idle`` seconds (timers and housekeeping, subtracted
pro rata), then h2load sends ``--requests`` requests one at a time per protocol
(concurrency 1: every request is its own message to the worker, so the count does not
depend on timing), and the counts are read from callgrind's dumps, per process.

    .venv/bin/python benchmarks/instructions.py --protocols http,grpc --requests 300
    .venv/bin/python benchmarks/instructions.py --before before=/tmp/before

``--before NAME=DIR``: a naiad checkout (``git worktree add --detach DIR REV``) measured as
target NAME: its ``core``, ``plugins/*`` and ``tools/*`` go first on ``PYTHONPATH``, with
this checkout's virtual environment. Needs valgrind and h2load.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import payloads
import protocol_overhead as po

# valgrind runs the engine's start-up about ten times slower than natively
READY_TIMEOUT_S = 600.0
# one h2load run, counted requests at about 20 ms each under callgrind
H2LOAD_TIMEOUT_S = 3600.0
WARMUP_REQUESTS = 40
# What a frontend process runs (``--frontend-processes``): counted as "frontends", not as a
# worker.
FRONTEND_PROGRAM = "naiad.frontends.bridge.frontend_main"
# The idle window is normally 0-3 % of a process's count over the requests: far more means
# something ran in it once (a collection, a late start-up step) and the pro-rata
# subtraction is wrong, so the figure is flagged for a rerun.
IDLE_SHARE_SUSPECT = 0.05


@dataclass
class Target:
    name: str
    checkout: Path | None = None  # None: this checkout, as installed
    ports: dict[str, int] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if self.checkout is not None:
            paths = [self.checkout / "core"]
            for group in ("plugins", "tools"):
                paths += sorted(p for p in (self.checkout / group).iterdir() if p.is_dir())
            env["PYTHONPATH"] = os.pathsep.join(map(str, paths))
        return env


def h2load(argv: list[str], requests: int) -> tuple[int, str]:
    """Run h2load for exactly ``requests`` requests; (requests that succeeded, output)."""
    p = subprocess.run(["h2load", "-t1", "-c1", "-m1", "-n", str(requests), *argv],
                       capture_output=True, text=True, timeout=H2LOAD_TIMEOUT_S)
    m = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded", p.stdout)
    return (int(m.group(1)) if m else 0), p.stdout + p.stderr


def load(target: Target, protocol: str, requests: int, payload_dir: Path) -> int:
    if protocol == "http":
        argv = ["--h1", "-d", str(payload_dir / "identity.json"),
                "-H", "content-type: application/json",
                f"http://127.0.0.1:{target.ports['http']}/v2/models/identity/infer"]
    else:
        argv = ["-d", str(payload_dir / "identity.grpc"),
                "-H", "content-type: application/grpc", "-H", "te: trailers",
                f"http://127.0.0.1:{target.ports['grpc']}{payloads.GRPC_INFER_PATH}"]
    done, out = h2load(argv, requests)
    if done != requests:
        raise RuntimeError(f"{target.name} {protocol}: {done} of {requests} requests "
                           f"succeeded:\n{out[-600:]}")
    return done


def cpu_ticks(pid: int) -> int:
    """User and system CPU time a process used so far, in clock ticks."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def ready(port: int) -> bool:
    try:
        return po.http_get(port, "/v2/models/identity/ready", 5.0) == 200
    except OSError:
        return False


def callgrind_control(pid: int, *options: str) -> None:
    subprocess.run(["callgrind_control", *options, str(pid)], check=True,
                   capture_output=True, timeout=120)


def dumped_totals(out_base: Path, pids: list[int], seen: set[Path]) -> dict[int, int]:
    """The instruction count of each process's latest dump (files not in ``seen``)."""
    totals: dict[int, int] = {}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(totals) < len(pids):
        for pid in pids:
            if pid in totals:
                continue
            dumps = out_base.parent.glob(f"{out_base.name}.{pid}.*")
            for path in sorted(dumps, key=lambda p: int(p.suffix[1:])):  # .1, .2, ... .10
                if path in seen:
                    continue
                m = re.search(r"^totals: (\d+)", path.read_text(errors="replace"), re.M)
                if m:
                    seen.add(path)
                    totals[pid] = int(m.group(1))
                    break
        time.sleep(0.2)
    if len(totals) < len(pids):
        raise RuntimeError(f"no callgrind dump of {sorted(set(pids) - set(totals))} appeared "
                           f"next to {out_base}")
    return totals


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def children(pid: int) -> list[int]:
    """The processes ``pid`` started (its Python workers)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():  # any thread may have started one
        try:
            found += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def measure(target: Target, args: argparse.Namespace, work: Path, repo: Path,
            payload_dir: Path, disturbed: set[tuple[str, str]]) -> dict[str, float]:
    """The instructions per request of ``target``'s engine (and worker), by column; a
    figure whose idle window looks disturbed goes into ``disturbed`` as (target, column)."""
    target.ports = {k: po.free_port() for k in ("http", "grpc", "metrics")}
    out_base = work / f"callgrind.{target.name}"
    cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
           f"--trace-children={'yes' if args.workers else 'no'}",
           f"--callgrind-out-file={out_base}.%p", sys.executable, "-m", "naiad", "serve",
           "--model-repository", str(repo), "--http-port", str(target.ports["http"]),
           "--grpc-port", str(target.ports["grpc"]),
           "--metrics-port", str(target.ports["metrics"]), "--http-address", "127.0.0.1",
           "--grpc-address", "127.0.0.1", "--metrics-address", "127.0.0.1", *args.naiad_arg]
    log = (work / f"{target.name}.log").open("wb")
    proc = subprocess.Popen(cmd, env=target.env(), stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not ready(target.ports["http"]):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{target.name} did not get ready; its log: "
                                   f"{work / (target.name + '.log')}")
            time.sleep(1.0)
        started_here = children(proc.pid)
        frontends = [pid for pid in started_here if FRONTEND_PROGRAM in command_line(pid)]
        workers = [pid for pid in started_here if pid not in frontends]
        before = {pid: cpu_ticks(pid) for pid in workers}
        for protocol in args.protocols:
            load(target, protocol, WARMUP_REQUESTS, payload_dir)
        # the engine, the worker that serves identity (the one the warm-up kept busy), and
        # the frontend processes (--frontend-processes), counted together
        pids, roles = [proc.pid], ["engine"]
        if args.workers:
            if not workers:
                raise RuntimeError(f"{target.name} has no worker process to count")
            pids.append(max(workers, key=lambda pid: cpu_ticks(pid) - before[pid]))
            roles.append("worker")
            pids += frontends
            roles += ["frontends"] * len(frontends)
        seen: set[Path] = set()

        def control(*options: str) -> None:
            for pid in pids:
                callgrind_control(pid, *options)

        control("--instr=on")
        control("--zero")
        started = time.monotonic()
        time.sleep(args.idle)
        control("--dump=idle")
        elapsed = time.monotonic() - started
        idle_per_s = {pid: n / elapsed for pid, n in dumped_totals(out_base, pids, seen).items()}
        result: dict[str, float] = {}
        for protocol in args.protocols:
            control("--zero")
            started = time.monotonic()
            done = load(target, protocol, args.requests, payload_dir)
            control(f"--dump={protocol}")
            totals = dumped_totals(out_base, pids, seen)
            elapsed = time.monotonic() - started
            cells = []
            for role in dict.fromkeys(roles):  # each role once, in order
                mine = [pid for pid, its in zip(pids, roles, strict=True) if its == role]
                idle = sum(idle_per_s[pid] for pid in mine) * elapsed
                total = sum(totals[pid] for pid in mine)
                result[f"{protocol} {role}"] = (total - idle) / done
                suspect = not 0 <= idle <= IDLE_SHARE_SUSPECT * total
                cells.append(f"{role} {result[f'{protocol} {role}']:,.0f} (idle "
                             f"{idle / total:.1%} of its count"
                             f"{'; DISTURBED, RERUN' if suspect else ''})")
                if suspect:
                    disturbed.add((target.name, f"{protocol} {role}"))
            print(f"  {target.name} {protocol}, instructions per request ({done} requests): "
                  + ", ".join(cells), flush=True)
        control("--instr=off")
        return result
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--protocols", default="http,grpc",
                    type=lambda s: [p for p in s.split(",") if p])
    ap.add_argument("--requests", type=int, default=512,
                    help="counted requests per protocol (at least 512: the statistics fold "
                         "every 256)")
    ap.add_argument("--idle", type=float, default=5.0,
                    help="seconds counted with no request, subtracted pro rata")
    ap.add_argument("--before", action="append", default=[], metavar="NAME=DIR",
                    help="a naiad checkout to measure as target NAME")
    ap.add_argument("--no-workers", dest="workers", action="store_false",
                    help="count the engine only (the worker runs natively)")
    ap.add_argument("--naiad-arg", action="append", default=[],
                    help="an extra flag for every naiad target")
    ap.add_argument("--json-out")
    ap.add_argument("--keep", metavar="DIR",
                    help="keep callgrind's dumps (callgrind_annotate reads them) in DIR")
    args = ap.parse_args(argv)
    for tool in ("valgrind", "callgrind_control", "h2load"):
        if shutil.which(tool) is None:
            ap.error(f"{tool} is not installed")
    targets = [Target("naiad")]  # this checkout
    for spec in args.before:
        name, _, path = spec.partition("=")
        if not (Path(path) / "core" / "naiad").is_dir():
            ap.error(f"--before {spec}: {path} is not a naiad checkout")
        targets.append(Target(name, Path(path).resolve()))
    results: dict[str, dict[str, float]] = {}
    disturbed: set[tuple[str, str]] = set()
    with tempfile.TemporaryDirectory(prefix="naiad-instructions-") as tmp:
        work = Path(args.keep or tmp)
        work.mkdir(parents=True, exist_ok=True)
        repo = po.write_repository(work)
        payload_dir = po.write_payloads(work)
        for target in targets:
            results[target.name] = measure(target, args, work, repo, payload_dir, disturbed)
    columns = list(results["naiad"])
    print("\n| instructions per request | " + " | ".join(columns) + " |")
    print("|---|" + "---|" * len(columns))
    base = results["naiad"]
    for name, row in results.items():
        cells = []
        for column in columns:
            ratio = "" if name == "naiad" else f" ({row[column] / base[column]:.3f}x naiad)"
            flag = " (disturbed: rerun)" if (name, column) in disturbed else ""
            cells.append(f"{row[column]:,.0f}{ratio}{flag}")
        print(f"| {name} | " + " | ".join(cells) + " |")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=1))
    return 3 if disturbed else 0


if __name__ == "__main__":
    sys.exit(main())
