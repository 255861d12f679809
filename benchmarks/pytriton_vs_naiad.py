#!/usr/bin/env python3
"""PyTriton 0.7 against naiad.pytriton: one ``@batch`` add_sub callable, served by the real
PyTriton on its own tritonserver and by naiad.pytriton, loaded at concurrency 1, 8 and 64
over HTTP (wrk) and gRPC (h2load). Prints req/s, p50/p99 and the server's CPU per request at
each point, and naiad's ratio; issue 27's bar is >= 1.0x at every point.

The program is tests/pytriton/differential_server.py's ``AddSub`` (``a``, ``b`` FP32
``[-1]`` -> ``add``, ``sub``; max_batch_size 64, a dynamic batcher with 200 us of queue
delay), the same file run with ``pytriton`` and with ``naiad.pytriton`` as the package: the
real PyTriton from .venv/pytriton (scripts/test installs it) with its default transport (the
shared-memory tensor store; ``--pytriton-no-tensorstore`` for its base64 one), and
naiad.pytriton from this interpreter's environment with its defaults (a worker process per
instance).

Every request is the same batch of one (``[1, 1]`` each), checked against numpy on both
servers before the load (the exact bytes wrk and h2load send). Each server process tree
(PyTriton's program, its tritonserver and stubs; naiad.pytriton's program, naiad serve and
its workers) runs pinned to ``--server-cpus`` and the load generator to ``--client-cpus``,
one server at a time; with ``--rounds`` above 1 the order alternates and the median is
reported. Every point is bounded (``--duration``), every start by ``--ready-timeout``, every
stop by ``STOP_TIMEOUT_S`` after SIGINT (then SIGKILL to each process of the server). A
server whose ports answer from another process (a port taken between choosing and binding
it) is started again on new ports. Each server's output goes to a log in ``--work-dir``,
whose tail is printed when it fails; progress is printed point by point.

About 2 x (start, 2 x (warmup + 3 x duration), stop): with the defaults, 3 minutes.

  .venv/bin/python benchmarks/pytriton_vs_naiad.py --duration 10
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import protocol_overhead as po  # noqa: E402  (run_wrk, run_h2load)

SERVER = ROOT / "tests" / "pytriton" / "differential_server.py"
PYTRITON_PYTHON = ROOT / ".venv" / "pytriton" / "bin" / "python"
MODEL = "AddSub"
STOP_TIMEOUT_S = 60.0
EXIT_GRACE_S = 10.0
PORT_TAKEN_ATTEMPTS = 3
LOG_TAIL_LINES = 40
GRPC_INFER_PATH = "/inference.GRPCInferenceService/ModelInfer"
A = np.array([[0.75]], np.float32)   # multiples of 1/64: exact in JSON too
B = np.array([[-1.5]], np.float32)


@dataclass(frozen=True)
class Side:
    """One of the two servers: a label, the interpreter that runs the program, the package
    its imports name, and extra environment."""

    label: str
    python: Path
    package: str
    env: dict[str, str]


class PortTaken(RuntimeError):
    """A port of the server answered from a process outside its process group."""


# ------------------------------------------------------------------ payloads
def write_payloads(folder: Path) -> Path:
    """The bodies run_wrk and run_h2load send, under the names they look for."""
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {"a": A, "b": B}
    outputs = ["add", "sub"]
    (folder / f"{MODEL}.json").write_text(json.dumps({
        "inputs": [{"name": n, "shape": list(t.shape), "datatype": "FP32",
                    "data": t.reshape(-1).tolist()} for n, t in tensors.items()],
        "outputs": [{"name": n, "parameters": {"binary_data": False}} for n in outputs]}))
    header = json.dumps({
        "inputs": [{"name": n, "shape": list(t.shape), "datatype": "FP32",
                    "parameters": {"binary_data_size": t.nbytes}} for n, t in tensors.items()],
        "outputs": [{"name": n, "parameters": {"binary_data": True}} for n in outputs]},
        separators=(",", ":")).encode()
    (folder / f"{MODEL}.bin").write_bytes(header + A.tobytes() + B.tobytes())
    (folder / f"{MODEL}.bin.hlen").write_text(str(len(header)))
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest(model_name=MODEL)
    for name, tensor in tensors.items():
        item = request.inputs.add()
        item.name, item.datatype = name, "FP32"
        item.shape.extend(tensor.shape)
        request.raw_input_contents.append(tensor.tobytes())
    for name in outputs:
        request.outputs.add().name = name
    message = request.SerializeToString()
    (folder / f"{MODEL}.grpc").write_bytes(struct.pack(">BI", 0, len(message)) + message)
    return folder


def expected() -> dict[str, list]:
    return {"add": (A + B).tolist(), "sub": (A - B).tolist()}


def check_answers(http_port: int, grpc_port: int, payloads: Path, encoding: str) -> int:
    """Send the exact HTTP body and gRPC message of the load once; raise unless both answer
    as numpy does. Returns the size of the gRPC reply frame (h2load counts replies by it)."""
    import grpc
    import tritonclient.http as httpclient
    from tritonclient.grpc import service_pb2

    if encoding == "binary":
        body = (payloads / f"{MODEL}.bin").read_bytes()
        headers = {"Content-Type": "application/octet-stream",
                   "Inference-Header-Content-Length": (payloads / f"{MODEL}.bin.hlen")
                   .read_text()}
    else:
        body = (payloads / f"{MODEL}.json").read_bytes()
        headers = {"Content-Type": "application/json"}
    request = urllib.request.Request(f"http://127.0.0.1:{http_port}/v2/models/{MODEL}/infer",
                                     data=body, headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=30) as answer:
        length = answer.headers.get("Inference-Header-Content-Length")
        result = httpclient.InferenceServerClient.parse_response_body(
            answer.read(), header_length=int(length) if length else None)
    got = {name: result.as_numpy(name).tolist() for name in ("add", "sub")}
    if got != expected():
        raise RuntimeError(f"HTTP answered {got}, expected {expected()}")
    frame = (payloads / f"{MODEL}.grpc").read_bytes()
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        reply = channel.unary_unary(GRPC_INFER_PATH)(frame[5:], timeout=30)
    response = service_pb2.ModelInferResponse.FromString(reply)
    got = {out.name: np.frombuffer(raw, np.float32).reshape(tuple(out.shape)).tolist()
           for out, raw in zip(response.outputs, response.raw_output_contents, strict=True)}
    if got != expected():
        raise RuntimeError(f"gRPC answered {got}, expected {expected()}")
    return len(reply) + 5


# ------------------------------------------------------------------ one server
def _stat_fields(pid: str) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()   # from field 3 (state) on


def _alive(pid: str) -> bool:
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z"


class Server:
    """differential_server.py with one package, in its own session, pinned with taskset;
    its output in a log file."""

    def __init__(self, side: Side, args: argparse.Namespace, log: Path) -> None:
        self.side, self.log = side, log
        self.http, self.grpc, self.metrics = po.free_port(), po.free_port(), po.free_port()
        argv = [str(side.python), str(SERVER), side.package, str(self.http), str(self.grpc),
                str(self.metrics), MODEL]
        if args.server_cpus:
            argv = ["taskset", "-c", args.server_cpus, *argv]
        with open(log, "w") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, cwd=log.parent,
                                            env={**os.environ, **side.env},
                                            start_new_session=True)

    def log_tail(self) -> str:
        lines = self.log.read_text(errors="replace").splitlines()
        return "\n".join(lines[-LOG_TAIL_LINES:])

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if "READY" in self.log.read_text(errors="replace").splitlines():
                self._check_ports_are_ours()
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.25)
        state = ("exited " + str(self.process.returncode) if self.process.poll() is not None
                 else f"not ready after {timeout_s:.0f} s")
        if "already in use" in self.log.read_text(errors="replace"):
            raise PortTaken(f"{self.side.label}: a port was taken ({state})")
        raise RuntimeError(f"{self.side.label} {state}; {self.log}:\n{self.log_tail()}")

    def pids(self) -> list[str]:
        """Every live process of the server: its session (taskset execs the program, so the
        session is the program's pid) and the program's descendants (naiad.pytriton starts
        naiad serve in a session of its own)."""
        parents: dict[str, str] = {}
        found = set()
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                fields = _stat_fields(entry)
                if fields is None:
                    continue
                parents[entry] = fields[1]
                if fields[3] == str(self.process.pid):
                    found.add(entry)
        found.add(str(self.process.pid))
        grew = True
        while grew:
            more = {pid for pid, parent in parents.items() if parent in found} - found
            found |= more
            grew = bool(more)
        return sorted(pid for pid in found if pid in parents)

    def cpu_seconds(self) -> float:
        ticks = 0
        for pid in self.pids():
            fields = _stat_fields(pid)
            if fields is not None:
                ticks += int(fields[11]) + int(fields[12])   # utime, stime
        return ticks / os.sysconf("SC_CLK_TCK")

    def _check_ports_are_ours(self) -> None:
        ours: set[str] = set()
        for pid in self.pids():
            try:
                for fd in os.listdir(f"/proc/{pid}/fd"):
                    with_target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if with_target.startswith("socket:["):
                        ours.add(with_target[8:-1])
            except OSError:
                continue
        for port in (self.http, self.grpc):
            if not listening_inodes(port) & ours:
                raise PortTaken(f"{self.side.label}: port {port} answers from another process")

    def stop(self) -> None:
        """SIGINT to the program's group (both programs stop their servers on it); SIGKILL
        to the program after STOP_TIMEOUT_S, and to what is left of its processes
        EXIT_GRACE_S after it."""
        tree = self.pids()
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                print(f"  {self.side.label} did not stop in {STOP_TIMEOUT_S:.0f} s: SIGKILL",
                      flush=True)
                self.process.kill()
                self.process.wait()
        deadline = time.monotonic() + EXIT_GRACE_S
        left = [pid for pid in tree if _alive(pid)]
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = [pid for pid in left if _alive(pid)]
        for pid in left:
            print(f"  {self.side.label}: process {pid} left behind: SIGKILL", flush=True)
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass


def listening_inodes(port: int) -> set[str]:
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                found.add(fields[9])
    return found


def start(side: Side, args: argparse.Namespace, work: Path, round_: int) -> Server:
    for attempt in range(PORT_TAKEN_ATTEMPTS):
        name = side.package.replace(".", "_")
        server = Server(side, args, work / f"{name}-r{round_}-{attempt}.log")
        try:
            server.wait_ready(args.ready_timeout)
            return server
        except PortTaken as taken:
            print(f"  {taken}; starting again on new ports", flush=True)
            server.stop()
        except BaseException:
            server.stop()
            raise
    raise RuntimeError(f"{side.label}: ports taken {PORT_TAKEN_ATTEMPTS} times in a row")


# ------------------------------------------------------------------ load
def load(server: Server, protocol: str, concurrency: int, duration_s: float, payloads: Path,
         reply_frame: int, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    before = server.cpu_seconds()
    if protocol == "http":
        row = po.run_wrk(server.http, MODEL, concurrency, duration_s, payloads, args)
    else:
        row = po.run_h2load(server.grpc, MODEL, concurrency, duration_s, payloads, args,
                            reply_frame, work)
    if "error" not in row and row["requests"]:
        row["cpu_us"] = (server.cpu_seconds() - before) / row["requests"] * 1e6
    return row


def measure_side(side: Side, args: argparse.Namespace, work: Path, payloads: Path,
                 round_: int) -> dict[tuple[str, int], dict[str, Any]]:
    print(f"{side.label} (round {round_}): starting", flush=True)
    started = time.monotonic()
    server = start(side, args, work, round_)
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    try:
        reply_frame = check_answers(server.http, server.grpc, payloads, args.http_encoding)
        print(f"  ready in {time.monotonic() - started:.1f} s, answers checked "
              f"(gRPC reply frame {reply_frame} B)", flush=True)
        for protocol in args.protocols:
            if args.warmup:
                load(server, protocol, max(args.concurrency), args.warmup, payloads,
                     reply_frame, args, work)
            for c in args.concurrency:
                row = load(server, protocol, c, args.duration, payloads, reply_frame, args,
                           work)
                rows[(protocol, c)] = row
                print(f"  {protocol:4} c={c:<3} " + (
                    f"ERROR {row['error']}" if "error" in row else
                    f"{row['rps']:8.0f} req/s  p50 {row['p50_ms']:6.2f} ms  p99 "
                    f"{row['p99_ms']:6.2f} ms  {row.get('cpu_us', float('nan')):6.0f} us "
                    f"CPU/req  errors {row['errors']}"), flush=True)
    finally:
        server.stop()
    return rows


def median(rows: list[dict[str, Any]], key: str) -> float:
    values = [r[key] for r in rows if "error" not in r and key in r]
    return statistics.median(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=int, default=10, help="seconds per point")
    parser.add_argument("--warmup", type=int, default=2,
                        help="seconds of unmeasured load per protocol before its points")
    parser.add_argument("--concurrency", default="1,8,64")
    parser.add_argument("--protocols", default="http,grpc")
    parser.add_argument("--rounds", type=int, default=1, help="each server's runs, in turns")
    parser.add_argument("--http-encoding", choices=("binary", "json"), default="binary",
                        help="wrk's body: binary tensors (what PyTriton's ModelClient sends) "
                             "or JSON")
    parser.add_argument("--server-cpus", default="0",
                        help="taskset CPU list of each server's process tree ('' = none)")
    parser.add_argument("--client-cpus", default="1", help="taskset CPU list of wrk/h2load")
    parser.add_argument("--ready-timeout", type=float, default=180.0,
                        help="seconds for a server to bind its model")
    parser.add_argument("--pytriton-no-tensorstore", action="store_true",
                        help="PyTriton with PYTRITON_NO_TENSORSTORE=1 (its base64 transport)")
    parser.add_argument("--work-dir", type=Path, help="logs and payloads (default: a "
                        "temporary folder, kept when a server fails)")
    parser.add_argument("--json", type=Path, help="write every row here")
    args = parser.parse_args()
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    args.protocols = args.protocols.split(",")
    if not set(args.protocols) <= {"http", "grpc"}:
        parser.error("--protocols: http and/or grpc")
    if args.duration < 1 or args.warmup < 0:
        parser.error("--duration must be at least 1 s (wrk and h2load count whole seconds)")
    for tool in ("wrk", "h2load", "taskset"):
        if shutil.which(tool) is None:
            parser.error(f"{tool} not found (apt-get install -y wrk nghttp2-client util-linux)")
    if not PYTRITON_PYTHON.exists():
        sys.exit(f"the real PyTriton is not installed at {PYTRITON_PYTHON} (scripts/test)")
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="naiad-pytriton-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    payloads = write_payloads(work / "payloads")
    sides = [Side("PyTriton 0.7", PYTRITON_PYTHON, "pytriton",
                  {"PYTRITON_NO_TENSORSTORE": "1"} if args.pytriton_no_tensorstore else {}),
             Side("naiad.pytriton", Path(sys.executable), "naiad.pytriton", {})]
    print(f"AddSub, batch 1 {args.http_encoding} HTTP / gRPC, {args.duration} s per point, "
          f"servers on CPU '{args.server_cpus or 'any'}', load on CPU "
          f"'{args.client_cpus or 'any'}'; logs in {work}", flush=True)
    rows: dict[str, dict[tuple[str, int], list[dict[str, Any]]]] = {s.label: {} for s in sides}
    try:
        for round_ in range(1, args.rounds + 1):
            for side in sides if round_ % 2 else sides[::-1]:
                for point, row in measure_side(side, args, work, payloads, round_).items():
                    rows[side.label].setdefault(point, []).append(row)
    except BaseException:
        print(f"stopped; logs kept in {work}", file=sys.stderr)
        raise
    theirs, ours = (rows[s.label] for s in sides)
    print("\n| protocol | c | PyTriton req/s | naiad req/s | ratio | PyTriton p50/p99 ms | "
          "naiad p50/p99 ms | PyTriton µs CPU/req | naiad µs CPU/req | errors |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    below = []
    for protocol in args.protocols:
        for c in args.concurrency:
            t, o = theirs.get((protocol, c), []), ours.get((protocol, c), [])
            ratio = median(o, "rps") / median(t, "rps")
            if not ratio >= 1.0:
                below.append(f"{protocol} c={c}")
            errors = sum(r.get("errors", 0) for r in t + o) + sum("error" in r for r in t + o)
            print(f"| {protocol} | {c} | {median(t, 'rps'):.0f} | {median(o, 'rps'):.0f} | "
                  f"{ratio:.2f}x | {median(t, 'p50_ms'):.2f} / {median(t, 'p99_ms'):.2f} | "
                  f"{median(o, 'p50_ms'):.2f} / {median(o, 'p99_ms'):.2f} | "
                  f"{median(t, 'cpu_us'):.0f} | {median(o, 'cpu_us'):.0f} | {errors} |")
    print("\nnaiad >= 1.0x PyTriton at every point" if not below
          else f"\nnaiad below 1.0x PyTriton at: {', '.join(below)}")
    if args.json:
        args.json.write_text(json.dumps(
            {label: [{"protocol": p, "c": c, "round": i + 1, **row}
                     for (p, c), found in by_point.items() for i, row in enumerate(found)]
             for label, by_point in rows.items()}, indent=1))
    if not args.work_dir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
