#!/usr/bin/env python3
"""naiad's per-request protocol overhead, next to the floors no Python server can beat.

Starts, one at a time and each as a real process pinned to ``--server-cpus``:

- ``floor-http``: a bare Starlette app under uvicorn (uvloop + httptools) returning a fixed,
  correct V2 JSON response (``floors/http_floor.py``): the HTTP floor;
- ``floor-http-hypercorn``: the same app under hypercorn (only with hypercorn in
  ``--http-server``; shown for reference, not a ratio denominator);
- ``floor-grpc``: a bare grpc.aio server returning a fixed, correct ModelInferResponse
  (``floors/grpc_floor.py``): the gRPC floor;
- ``naiad-uvicorn`` / ``naiad-hypercorn``: ``naiad serve --http-server ...`` on a fresh model
  repository holding ``identity`` (Triton Python model, FP32 [-1,16], max_batch_size 16)
  and ``add_sub`` (examples/model_repository). gRPC is measured on the first of them only
  (both serve the same grpc.aio frontend).

For each target and model it first checks correctness (tritonclient.http in JSON and binary
mode, tritonclient.grpc, plus the exact bytes the load generators send, compared with numpy),
then runs a warm-up, then one closed-loop load point per concurrency: ``wrk`` (HTTP, a Lua
script POSTing the fixed V2 body) or ``h2load`` (gRPC, a pre-serialized ModelInferRequest
frame with raw_input_contents, C connections x 1 stream), pinned to ``--client-cpus``.

Prints one table: req/s, p50/p99 ms (client side), errors, server CPU per request, and the
ratio to the floor of the same protocol and concurrency. Every run is bounded in time;
servers are stopped by their own process group. Not part of the test suite.

  .venv/bin/python benchmarks/protocol_overhead.py --duration 10 --concurrency 1,8,64
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import http.client
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import payloads  # noqa: E402

ONE_THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                  "PYTHONUNBUFFERED": "1"}
CLK_TCK = os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------ set-up helpers
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_repository(root: Path) -> Path:
    """A fresh model repository: ``identity`` (written here) + ``add_sub`` (copied)."""
    repo = root / "model_repository"
    if repo.exists():
        shutil.rmtree(repo)
    (repo / "identity" / "1").mkdir(parents=True)
    (repo / "identity" / "config.pbtxt").write_text(payloads.identity_config())
    (repo / "identity" / "1" / "model.py").write_text(payloads.IDENTITY_MODEL_PY)
    shutil.copytree(REPO_ROOT / "examples" / "model_repository" / "add_sub", repo / "add_sub",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return repo


def write_payloads(root: Path) -> Path:
    out = root / "payloads"
    out.mkdir(parents=True, exist_ok=True)
    for m in payloads.MODELS:
        (out / f"{m}.json").write_bytes(payloads.json_request(m))
        body, hlen = payloads.binary_request(m)
        (out / f"{m}.bin").write_bytes(body)
        (out / f"{m}.bin.hlen").write_text(str(hlen))
        (out / f"{m}.grpc").write_bytes(
            payloads.grpc_frame(payloads.grpc_request(m).SerializeToString()))
    return out


def default_naiad() -> str:
    exe = Path(sys.executable).parent / "naiad"
    return str(exe) if exe.exists() else (shutil.which("naiad") or "naiad")


# ------------------------------------------------------------------ targets
@dataclass
class Target:
    name: str
    kind: str                      # "floor" (ratio denominator), "ref" or "naiad"
    protocols: list[str]
    http_server: str = ""
    ports: dict[str, int] = field(default_factory=dict)

    def command(self, args: argparse.Namespace, repo: Path) -> list[str]:
        py = sys.executable
        p = self.ports
        if self.name == "floor-http":
            return [py, "-m", "uvicorn", "--app-dir", str(HERE / "floors"), "--loop", "uvloop",
                    "--http", "httptools", "--no-access-log", "--log-level", "warning",
                    "--host", "127.0.0.1", "--port", str(p["http"]), "http_floor:app"]
        if self.name == "floor-http-hypercorn":
            return [py, "-m", "hypercorn", "-k", "uvloop", "--workers", "1", "--bind",
                    f"127.0.0.1:{p['http']}", "http_floor:app"]
        if self.name == "floor-grpc":
            return [py, str(HERE / "floors" / "grpc_floor.py"), "--port", str(p["grpc"]),
                    "--loop", args.grpc_floor_loop]
        cmd = [args.naiad, "serve", "--model-repository", str(repo),
               "--http-port", str(p["http"]), "--grpc-port", str(p["grpc"]),
               "--metrics-port", str(p["metrics"]), "--http-address", "127.0.0.1",
               "--grpc-address", "127.0.0.1", "--metrics-address", "127.0.0.1",
               "--http-server", self.http_server]
        return cmd + args.naiad_arg


def build_targets(args: argparse.Namespace) -> list[Target]:
    servers = args.http_server
    targets: list[Target] = []
    if "http" in args.protocols:
        targets.append(Target("floor-http", "floor", ["http"], "uvicorn"))
        if "hypercorn" in servers:
            targets.append(Target("floor-http-hypercorn", "ref", ["http"], "hypercorn"))
    if "grpc" in args.protocols:
        targets.append(Target("floor-grpc", "floor", ["grpc"]))
    for i, srv in enumerate(servers):
        protos = [p for p in args.protocols if p == "http" or i == 0]
        if protos:
            targets.append(Target(f"naiad-{srv}", "naiad", protos, srv))
    if args.targets:
        targets = [t for t in targets if t.name in args.targets]
    return targets


class Running:
    """A server process in its own session (process group); stopped by that group only."""

    def __init__(self, target: Target, cmd: list[str], args: argparse.Namespace, log: Path):
        self.target = target
        argv = (["taskset", "-c", args.server_cpus] if args.server_cpus else []) + cmd
        self.log_path = log
        self.log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        env = dict(os.environ, **ONE_THREAD_ENV)
        if target.kind != "naiad":
            env["PYTHONPATH"] = str(HERE / "floors")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     cwd=tempfile.gettempdir(), start_new_session=True)

    @property
    def pgid(self) -> int:
        return self.proc.pid

    def cpu_seconds(self) -> float:
        """utime + stime of every live process in the server's process group."""
        total = 0
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[2]) == self.pgid:          # field 5: pgrp
                total += int(fields[11]) + int(fields[12])   # fields 14, 15: utime, stime
        return total / CLK_TCK

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pgid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.pgid, signal.SIGKILL)
                self.proc.wait(10)
        # stub processes of the group may outlive the leader by a moment
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pgid, signal.SIGKILL)
        self.log.close()

    def log_tail(self, n: int = 15) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        return ""


def cpu_ticks(cpus: str) -> tuple[int, int]:
    """(steal, total) jiffies of the server CPUs from /proc/stat: how much of the time the
    hypervisor gave the VM's CPU to someone else (a noise gauge for shared machines)."""
    wanted = {f"cpu{c.strip()}" for c in cpus.split(",") if c.strip()} if cpus else {"cpu"}
    steal = total = 0
    with contextlib.suppress(OSError), open("/proc/stat") as f:
        for line in f:
            parts = line.split()
            if parts and parts[0] in wanted:
                values = [int(v) for v in parts[1:]]
                total += sum(values[:8])
                steal += values[7] if len(values) > 7 else 0
    return steal, total


def http_get(port: int, path: str, timeout: float = 2.0) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def wait_ready(run: Running, models: list[str], timeout: float) -> str | None:
    """None when ready, else why not."""
    t = run.target
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if run.proc.poll() is not None:
            return f"exited with {run.proc.returncode}:\n{run.log_tail()}"
        try:
            if "http" in t.ports and t.name != "floor-grpc":
                ok = http_get(t.ports["http"], "/v2/health/ready") == 200 and all(
                    http_get(t.ports["http"], f"/v2/models/{m}/ready") == 200 for m in models)
            else:
                import tritonclient.grpc as grpcclient
                c = grpcclient.InferenceServerClient(f"127.0.0.1:{t.ports['grpc']}")
                try:
                    ok = c.is_server_ready(client_timeout=2) and all(
                        c.is_model_ready(m, client_timeout=2) for m in models)
                finally:
                    c.close()
            if ok:
                return None
        except Exception as exc:  # not up yet
            last = repr(exc)
        time.sleep(0.25)
    return f"not ready after {timeout:.0f} s ({last}):\n{run.log_tail()}"


# ------------------------------------------------------------------ correctness gate
def check_http(port: int, model: str, payload_dir: Path) -> tuple[bool, str]:
    import tritonclient.http as httpclient

    notes = []
    ok_all = True
    # 1. the exact body wrk sends (JSON)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", f"/v2/models/{model}/infer",
                     body=(payload_dir / f"{model}.json").read_bytes(),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        body = r.read()
        good = r.status == 200 and payloads.matches(
            {o["name"]: np.asarray(o["data"], dtype=np.float32).reshape(o["shape"])
             for o in json.loads(body)["outputs"]}, model)
    except Exception as exc:
        good, body = False, repr(exc).encode()
    finally:
        conn.close()
    notes.append(f"wrk-json={'ok' if good else 'WRONG ' + body[:200].decode(errors='replace')}")
    ok_all &= good
    # 2. the exact binary-extension body (when loaded with --http-encoding binary)
    hlen = int((payload_dir / f"{model}.bin.hlen").read_text())
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", f"/v2/models/{model}/infer",
                     body=(payload_dir / f"{model}.bin").read_bytes(),
                     headers={"Content-Type": "application/octet-stream",
                              "Inference-Header-Content-Length": str(hlen)})
        r = conn.getresponse()
        body = r.read()
        rh = r.getheader("Inference-Header-Content-Length")
        res = httpclient.InferenceServerClient.parse_response_body(
            body, header_length=int(rh) if rh else None)
        good = r.status == 200 and payloads.matches(
            {n: res.as_numpy(n) for n in payloads.expected(model)}, model)
    except Exception as exc:
        good, body = False, repr(exc).encode()
    finally:
        conn.close()
    notes.append(f"wrk-binary={'ok' if good else 'WRONG'}")
    binary_ok = good
    # 3. tritonclient.http, JSON and binary tensors
    client = httpclient.InferenceServerClient(f"127.0.0.1:{port}", network_timeout=10)
    try:
        for binary in (False, True):
            try:
                ins = []
                for n, a in payloads.inputs(model).items():
                    i = httpclient.InferInput(n, list(a.shape), "FP32")
                    i.set_data_from_numpy(a, binary_data=binary)
                    ins.append(i)
                outs = [httpclient.InferRequestedOutput(n, binary_data=binary)
                        for n in payloads.expected(model)]
                res = client.infer(model, ins, outputs=outs)
                good = payloads.matches({n: res.as_numpy(n) for n in payloads.expected(model)},
                                        model)
            except Exception as exc:
                good = False
                notes.append(repr(exc)[:200])
            notes.append(f"tritonclient.http-{'binary' if binary else 'json'}="
                         f"{'ok' if good else 'WRONG'}")
            ok_all &= good
        # 4. compressed both ways (Content-Encoding / Accept-Encoding: gzip), a feature
        # either HTTP server must keep intact
        try:
            ins = []
            for n, a in payloads.inputs(model).items():
                i = httpclient.InferInput(n, list(a.shape), "FP32")
                i.set_data_from_numpy(a)
                ins.append(i)
            res = client.infer(model, ins, request_compression_algorithm="gzip",
                               response_compression_algorithm="gzip")
            good = payloads.matches({n: res.as_numpy(n) for n in payloads.expected(model)},
                                    model)
        except Exception as exc:
            good = False
            notes.append(repr(exc)[:200])
        notes.append(f"tritonclient.http-gzip={'ok' if good else 'WRONG'}")
        ok_all &= good
    finally:
        client.close()
    return ok_all, "; ".join(notes) + ("" if binary_ok else " (binary body not loadable)")


def check_grpc(port: int, model: str, payload_dir: Path) -> tuple[bool, str, int]:
    """(ok, notes, size of the response frame h2load receives)."""
    import grpc
    import tritonclient.grpc as grpcclient

    notes = []
    ok_all = True
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    try:
        ins = []
        for n, a in payloads.inputs(model).items():
            i = grpcclient.InferInput(n, list(a.shape), "FP32")
            i.set_data_from_numpy(a)
            ins.append(i)
        res = client.infer(model, ins, outputs=[grpcclient.InferRequestedOutput(n)
                                                for n in payloads.expected(model)],
                           client_timeout=10)
        good = payloads.matches({n: res.as_numpy(n) for n in payloads.expected(model)}, model)
    except Exception as exc:
        good = False
        notes.append(repr(exc)[:200])
    finally:
        client.close()
    notes.append(f"tritonclient.grpc={'ok' if good else 'WRONG'}")
    ok_all &= good
    # the exact message h2load sends, through a raw channel
    frame = (payload_dir / f"{model}.grpc").read_bytes()
    size = 0
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        call = ch.unary_unary(payloads.GRPC_INFER_PATH, request_serializer=None,
                              response_deserializer=None)
        try:
            data = call(frame[5:], timeout=10)
            good = payloads.matches(payloads.decode_grpc_response(data), model)
            size = len(data) + 5
        except Exception as exc:
            good = False
            notes.append(repr(exc)[:200])
    notes.append(f"h2load-frame={'ok' if good else 'WRONG'} (reply frame {size} B)")
    ok_all &= good
    return ok_all, "; ".join(notes), size


# ------------------------------------------------------------------ load generators
def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def run_wrk(port: int, model: str, conc: int, dur: float, payload_dir: Path,
            args: argparse.Namespace) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}/v2/models/{model}/infer"
    argv = ["wrk", "-t1", f"-c{conc}", f"-d{int(dur)}s", "--timeout", "10s",
            "-s", str(HERE / "wrk_v2infer.lua"), url]
    if args.client_cpus:
        argv = ["taskset", "-c", args.client_cpus, *argv]
    env = dict(os.environ)
    if args.http_encoding == "binary":
        env["NAIAD_BENCH_BODY"] = str(payload_dir / f"{model}.bin")
        env["NAIAD_BENCH_HEADER_LEN"] = (payload_dir / f"{model}.bin.hlen").read_text()
    else:
        env["NAIAD_BENCH_BODY"] = str(payload_dir / f"{model}.json")
        env.pop("NAIAD_BENCH_HEADER_LEN", None)
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=dur + 60)
    m = re.search(r"^BENCHJSON (\{.*\})$", p.stdout, re.M)
    if not m:
        return {"error": f"wrk rc={p.returncode}: {(p.stdout + p.stderr)[-300:]}"}
    j = json.loads(m.group(1))
    errors = sum(j[k] for k in ("err_connect", "err_read", "err_write", "err_status",
                                "err_timeout"))
    return {"rps": j["requests"] / (j["duration_us"] / 1e6), "requests": j["requests"],
            "p50_ms": j["p50_us"] / 1e3, "p99_ms": j["p99_us"] / 1e3, "errors": errors}


def run_h2load(port: int, model: str, conc: int, dur: float, payload_dir: Path,
               args: argparse.Namespace, reply_frame: int, work: Path) -> dict[str, Any]:
    logpath = work / "h2load-last.tsv"
    logpath.unlink(missing_ok=True)
    argv = ["h2load", "-t1", f"-c{conc}", "-m1", "-D", str(int(dur)),
            "-d", str(payload_dir / f"{model}.grpc"),
            "-H", "content-type: application/grpc", "-H", "te: trailers",
            f"--log-file={logpath}", f"http://127.0.0.1:{port}{payloads.GRPC_INFER_PATH}"]
    if args.client_cpus:
        argv = ["taskset", "-c", args.client_cpus, *argv]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=dur + 60)
    out = p.stdout
    m_fin = re.search(r"finished in ([\d.]+)s, ([\d.]+) req/s", out)
    m_req = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
                      r"(\d+) failed, (\d+) errored, (\d+) timeout", out)
    m_data = re.search(r"traffic: .*?\((\d+)\) total, .*?\((\d+)\) headers .*?\((\d+)\) data",
                       out)
    if not (m_fin and m_req and m_data):
        return {"error": f"h2load rc={p.returncode}: {(out + p.stderr)[-300:]}"}
    succ, failed, errored, tmo = (int(m_req.group(i)) for i in (4, 5, 6, 7))
    lat = []
    with open(logpath) as f:
        for line in f:
            parts = line.split("\t")
            if len(parts) >= 3 and parts[1] == "200":
                lat.append(int(parts[2]) / 1e3)
    # gRPC errors travel in trailers behind HTTP 200, which h2load does not read. A good
    # reply carries exactly one response message of known size, an error reply none: the
    # DATA bytes received say how many replies held a message. Up to C replies may be cut
    # off when the duration ends.
    msgs = int(m_data.group(3)) / reply_frame
    missing = max(0, succ - round(msgs))
    grpc_err = missing if missing > conc else 0
    return {"rps": succ / float(m_fin.group(1)), "requests": succ, "p50_ms": pct(lat, 50),
            "p99_ms": pct(lat, 99), "errors": failed + errored + tmo + grpc_err}


# ------------------------------------------------------------------ one target
def measure_target(t: Target, args: argparse.Namespace, work: Path, repo: Path,
                   payload_dir: Path, rnd: int) -> list[dict[str, Any]]:
    t.ports = {"http": free_port(), "grpc": free_port(), "metrics": free_port()}
    cmd = t.command(args, repo)
    run = Running(t, cmd, args, work / f"{t.name}-r{rnd}.log")
    rows: list[dict[str, Any]] = []
    base = {"target": t.name, "kind": t.kind, "round": rnd}
    try:
        why = wait_ready(run, args.models, args.ready_timeout)
        if why:
            print(f"  {t.name}: NOT READY: {why}", file=sys.stderr)
            return [dict(base, protocol=p, model=m, concurrency=c, error="not ready")
                    for p in t.protocols for m in args.models for c in args.concurrency]
        for proto in t.protocols:
            for model in args.models:
                if proto == "http":
                    ok, notes = check_http(t.ports["http"], model, payload_dir)
                    if args.http_encoding == "binary" and "binary body not loadable" in notes:
                        ok = False
                    reply = 0
                else:
                    ok, notes, reply = check_grpc(t.ports["grpc"], model, payload_dir)
                print(f"  {t.name} {proto} {model}: gate {'ok' if ok else 'FAILED'}: {notes}",
                      flush=True)
                if not ok:
                    rows += [dict(base, protocol=proto, model=model, concurrency=c,
                                  error="wrong answer: " + notes) for c in args.concurrency]
                    continue

                def load(conc: int, dur: float, proto: str = proto, model: str = model,
                         reply: int = reply) -> dict[str, Any]:
                    if proto == "http":
                        return run_wrk(t.ports["http"], model, conc, dur, payload_dir, args)
                    return run_h2load(t.ports["grpc"], model, conc, dur, payload_dir, args,
                                      reply, work)

                if args.warmup > 0:
                    load(8, args.warmup)
                for conc in args.concurrency:
                    cpu0, (steal0, total0) = run.cpu_seconds(), cpu_ticks(args.server_cpus)
                    r = load(conc, args.duration)
                    cpu = run.cpu_seconds() - cpu0
                    steal1, total1 = cpu_ticks(args.server_cpus)
                    if total1 > total0:
                        r["steal_pct"] = 100.0 * (steal1 - steal0) / (total1 - total0)
                    if r.get("requests"):
                        r["cpu_us_per_req"] = cpu / r["requests"] * 1e6
                    row = dict(base, protocol=proto, model=model, concurrency=conc, **r)
                    rows.append(row)
                    print("   ", fmt_point(row), flush=True)
                if proto == "http":
                    ok2, notes2 = check_http(t.ports["http"], model, payload_dir)
                else:
                    ok2, notes2, _ = check_grpc(t.ports["grpc"], model, payload_dir)
                if not ok2:
                    print(f"  {t.name} {proto} {model}: POST-LOAD GATE FAILED: {notes2}",
                          flush=True)
                    for row in rows[-len(args.concurrency):]:
                        row["post_gate"] = notes2
    finally:
        run.stop()
    return rows


def fmt_point(r: dict[str, Any]) -> str:
    if "error" in r:
        return f"{r['target']} {r['protocol']} {r['model']} c={r['concurrency']}: {r['error']}"
    return (f"{r['target']:<22} {r['protocol']:<4} {r['model']:<8} c={r['concurrency']:<3} "
            f"{r['rps']:8.0f} req/s  p50 {r['p50_ms']:6.2f} ms  p99 {r['p99_ms']:6.2f} ms  "
            f"errors {r['errors']}  cpu {r.get('cpu_us_per_req', float('nan')):.0f} us/req  "
            f"steal {r.get('steal_pct', float('nan')):.0f}%")


# ------------------------------------------------------------------ report
def summarize(rows: list[dict[str, Any]], args: argparse.Namespace) -> list[dict[str, Any]]:
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["target"], r["kind"], r["protocol"], r["model"], r["concurrency"]),
                          []).append(r)
    out = []
    for (target, kind, proto, model, conc), rs in groups.items():
        good = [r for r in rs if "error" not in r]
        s: dict[str, Any] = {"target": target, "kind": kind, "protocol": proto, "model": model,
                             "concurrency": conc}
        if not good:
            s["error"] = rs[0].get("error", "?")
        else:
            s["rps"] = statistics.median(r["rps"] for r in good)
            s["rps_min"] = min(r["rps"] for r in good)
            s["rps_max"] = max(r["rps"] for r in good)
            s["p50_ms"] = statistics.median(r["p50_ms"] for r in good)
            s["p99_ms"] = statistics.median(r["p99_ms"] for r in good)
            s["errors"] = sum(r["errors"] for r in good)
            cpus = [r["cpu_us_per_req"] for r in good if "cpu_us_per_req" in r]
            s["cpu_us_per_req"] = statistics.median(cpus) if cpus else float("nan")
            steals = [r["steal_pct"] for r in good if "steal_pct" in r]
            s["steal_pct"] = max(steals) if steals else float("nan")
            if any("post_gate" in r for r in good):
                s["post_gate"] = "FAILED"
        out.append(s)
    floors = {(s["protocol"], s["model"], s["concurrency"]): s
              for s in out if s["kind"] == "floor" and "rps" in s}
    for s in out:
        f = floors.get((s["protocol"], s["model"], s["concurrency"]))
        s["vs_floor"] = s["rps"] / f["rps"] if f and "rps" in s else None
        # the same ratio from CPU time per request: what req/s would be if both were bound
        # by the server core alone (robust to steal and to an unsaturated core)
        s["vs_floor_cpu"] = (f["cpu_us_per_req"] / s["cpu_us_per_req"]
                             if f and "rps" in s and s["cpu_us_per_req"] > 0 else None)
    order = {t: i for i, t in enumerate(["floor-http", "floor-http-hypercorn", "floor-grpc",
                                         "naiad-uvicorn", "naiad-hypercorn"])}
    out.sort(key=lambda s: (s["protocol"] != "http", payloads.MODELS.index(s["model"]),
                            order.get(s["target"], 99), s["concurrency"]))
    return out


def markdown_table(summary: list[dict[str, Any]], rounds: int) -> str:
    rng = rounds > 1
    head = ["target", "protocol", "model", "concurrency", "req/s"] + \
        (["min-max"] if rng else []) + ["p50 ms", "p99 ms", "errors", "server CPU us/req",
                                        "steal %", "vs floor", "vs floor (CPU)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in summary:
        if "error" in s:
            cells = [s["target"], s["protocol"], s["model"], str(s["concurrency"]),
                     "**" + s["error"][:60] + "**"] + [""] * (len(head) - 5)
        else:
            cells = [s["target"], s["protocol"], s["model"], str(s["concurrency"]),
                     f"{s['rps']:.0f}"]
            if rng:
                cells.append(f"{s['rps_min']:.0f}-{s['rps_max']:.0f}")
            cells += [f"{s['p50_ms']:.2f}", f"{s['p99_ms']:.2f}",
                      str(s["errors"]) + (" (post-gate FAILED)" if "post_gate" in s else ""),
                      f"{s['cpu_us_per_req']:.0f}",
                      "-" if s["steal_pct"] != s["steal_pct"] else f"{s['steal_pct']:.0f}",
                      f"{s['vs_floor']:.2f}" if s["vs_floor"] is not None else "-",
                      f"{s['vs_floor_cpu']:.2f}" if s.get("vs_floor_cpu") else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def versions(args: argparse.Namespace) -> str:
    def tool(argv: list[str]) -> str:
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=10)
            return (p.stdout + p.stderr).strip().splitlines()[0]
        except Exception:
            return "?"
    from importlib.metadata import version
    pk = []
    for name in ("naiad", "naiad-backend-python", "uvicorn", "hypercorn", "starlette",
                 "grpcio", "uvloop", "httptools", "orjson", "numpy"):
        with contextlib.suppress(Exception):
            pk.append(f"{name} {version(name)}")
    commit = tool(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"])
    with contextlib.suppress(Exception):
        if subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--", "core",
                           "plugins"], capture_output=True, text=True, timeout=10).stdout:
            commit += " + uncommitted changes"
    return (f"naiad checkout {commit}; Python {platform.python_version()}; " + ", ".join(pk) +
            f"; {tool(['wrk', '--version'])}; {tool(['h2load', '--version'])}")


def idle_states() -> str:
    """How this machine's CPUs idle, in words: the cpuidle driver and governor, and, for a
    KVM guest's ``haltpoll`` driver, how long an idle vCPU polls before it halts.

    Why: a figure at low concurrency depends on it more than on most code changes. With
    ``haltpoll.guest_halt_poll_ns=0`` every idle gap halts the vCPU, and each request then
    pays a wake-up through the hypervisor; the 2-core VM of issue 26 is set so, and the
    kernel's default (200 µs of polling) gave naiad and Triton there 1.2-1.9x the
    throughput at c=1 (``benchmarks/results/issue26-session12-2026-11-29.md``)."""
    cpuidle = Path("/sys/devices/system/cpu/cpuidle")
    try:
        driver = (cpuidle / "current_driver").read_text().strip()
    except OSError:
        return "CPU idle states unknown (no /sys/devices/system/cpu/cpuidle)"
    governor = "?"
    for name in ("current_governor", "current_governor_ro"):
        with contextlib.suppress(OSError):
            governor = (cpuidle / name).read_text().strip()
            break
    words = f"cpuidle driver {driver}, governor {governor}"
    with contextlib.suppress(OSError, ValueError):
        poll_ns = int(Path("/sys/module/haltpoll/parameters/guest_halt_poll_ns").read_text())
        words += (f"; guest halt polling {poll_ns} ns"
                  + (" (every idle halts the vCPU)" if poll_ns == 0 else ""))
    return words


# ------------------------------------------------------------------ main
def csv(kind: type = str):
    def parse(value: str) -> list[Any]:
        return [kind(v) for v in value.split(",") if v.strip()]
    return parse


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=10, help="seconds per load point (10)")
    ap.add_argument("--warmup", type=float, default=2,
                    help="seconds of discarded load at c=8 before each sweep (2)")
    ap.add_argument("--concurrency", type=csv(int), default=[1, 8, 64],
                    help="connections per load point (1,8,64)")
    ap.add_argument("--protocols", type=csv(), default=["http", "grpc"])
    ap.add_argument("--http-server", type=csv(), default=["uvicorn", "hypercorn"],
                    help="naiad --http-server values to measure (uvicorn,hypercorn)")
    ap.add_argument("--models", type=csv(), default=["identity", "add_sub"])
    ap.add_argument("--targets", type=csv(), default=[],
                    help="only these targets (floor-http, floor-http-hypercorn, floor-grpc, "
                         "naiad-uvicorn, naiad-hypercorn)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="repeat every target; median reported (server order reversed on "
                         "even rounds)")
    ap.add_argument("--http-encoding", choices=["json", "binary"], default="json",
                    help="HTTP body wrk sends: V2 JSON tensors (default) or Triton's binary "
                         "tensor extension")
    ap.add_argument("--grpc-floor-loop", choices=["asyncio", "uvloop"], default="asyncio",
                    help="event loop of the gRPC floor (asyncio, as the shared bench's floor)")
    ap.add_argument("--naiad", default=default_naiad(), help="the naiad executable")
    ap.add_argument("--naiad-arg", action="append", default=[],
                    help="extra argument for naiad serve (repeatable)")
    ap.add_argument("--server-cpus", default="0", help="taskset CPU list of servers ('' = none)")
    ap.add_argument("--client-cpus", default="1", help="taskset CPU list of wrk/h2load")
    ap.add_argument("--ready-timeout", type=float, default=120)
    ap.add_argument("--work", default="", help="scratch folder (default: a new temp folder)")
    ap.add_argument("--json-out", default="", help="write raw rows + summary here")
    ap.add_argument("--markdown-out", default="", help="write the table (markdown) here")
    ap.add_argument("--render-json", default="",
                    help="print the table of an earlier run's --json-out file, measure nothing")
    args = ap.parse_args(argv)
    if args.render_json:
        saved = json.loads(Path(args.render_json).read_text())
        rounds = max((r.get("round", 1) for r in saved["rows"]), default=1)
        print(markdown_table(summarize(saved["rows"], args), rounds))
        return 0
    for p in args.protocols:
        if p not in ("http", "grpc"):
            ap.error(f"unknown protocol {p}")
    for s in args.http_server:
        if s not in ("uvicorn", "hypercorn"):
            ap.error(f"unknown --http-server {s}")
    for m in args.models:
        if m not in payloads.MODELS:
            ap.error(f"unknown model {m}")
    for tool in ("wrk", "h2load", "taskset"):
        if not shutil.which(tool):
            ap.error(f"{tool} not found (apt-get install -y wrk nghttp2-client util-linux)")

    # SIGTERM unwinds like Ctrl-C, so that every started server is stopped (finally blocks)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = Path(args.work or tempfile.mkdtemp(prefix="naiad-protocol-overhead-"))
    work.mkdir(parents=True, exist_ok=True)
    repo = write_repository(work)
    payload_dir = write_payloads(work)
    targets = build_targets(args)
    started = time.time()
    print(f"work folder {work}; targets: {', '.join(t.name for t in targets)}", flush=True)

    rows: list[dict[str, Any]] = []
    for rnd in range(1, args.rounds + 1):
        order = targets if rnd % 2 else list(reversed(targets))
        for t in order:
            print(f"round {rnd}: {t.name}", flush=True)
            rows += measure_target(t, args, work, repo, payload_dir, rnd)

    summary = summarize(rows, args)
    when = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    header = (f"Run on {when}, {(time.time() - started) / 60:.1f} min; {platform.machine()}, "
              f"{os.cpu_count()} CPUs, {platform.platform()}; servers on CPU(s) "
              f"'{args.server_cpus}', load on '{args.client_cpus}'; {args.rounds} round(s) of "
              f"{args.duration:g} s points, HTTP body {args.http_encoding}.\n"
              f"Versions: {versions(args)}\nCPU idle: {idle_states()}.\n")
    table = markdown_table(summary, args.rounds)
    print()
    print(header)
    print(table)
    if args.markdown_out:
        Path(args.markdown_out).write_text(header + "\n" + table + "\n")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"args": vars(args), "rows": rows,
                                                   "summary": summary}, indent=1,
                                                  default=str))
    bad = [s for s in summary if "error" in s or s.get("errors") or "post_gate" in s]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
