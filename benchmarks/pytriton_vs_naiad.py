#!/usr/bin/env python3
"""PyTriton 0.7 against naiad.pytriton: one ``@batch`` add_sub callable
(tests/pytriton/differential_server.py's ``AddSub``: max_batch_size 64, dynamic batching),
served by the real PyTriton on its own tritonserver (from .venv/pytriton, which scripts/test
installs) and by naiad.pytriton, each loaded by ``naiad perf`` at concurrency 1, 8 and 64
over HTTP and gRPC. Prints req/s per point and naiad's ratio; the issue's bar is >= 1.0x at
every point.

PyTriton runs with PYTRITON_NO_TENSORSTORE=1 (its base64 transport): its shared-memory tensor
store cannot start inside its stub on this machine (the stub's libpython 3.11 does not match
the system's 3.11 standard library), see tests/pytriton/test_pytriton_differential.py.

Servers run one at a time on loopback and are stopped by SIGINT (SIGKILL after 60 s).
Bounded: about 2 servers x 6 points x (measurement + start), a few minutes.

  .venv/bin/python benchmarks/pytriton_vs_naiad.py --measurement-interval 3000
"""

from __future__ import annotations

import argparse
import csv
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVER = ROOT / "tests" / "pytriton" / "differential_server.py"
PYTRITON_PYTHON = ROOT / ".venv" / "pytriton" / "bin" / "python"
NAIAD_PERF = Path(sys.executable).with_name("naiad-perf")
READY_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 60.0
CONCURRENCIES = (1, 8, 64)
PROTOCOLS = ("http", "grpc")


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve(python: Path | str, package: str, env: dict[str, str]) -> tuple[subprocess.Popen[str],
                                                                            int, int]:
    http, grpc, metrics = free_port(), free_port(), free_port()
    process = subprocess.Popen([str(python), str(SERVER), package, str(http), str(grpc),
                                str(metrics)], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True,
                               env={**os.environ, **env}, start_new_session=True)
    deadline = time.monotonic() + READY_TIMEOUT_S
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("READY"):
            return process, http, grpc
        if time.monotonic() > deadline:
            break
    stop(process)
    raise RuntimeError(f"{package} did not get ready")


def stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    if process.stdout is not None:
        process.stdout.close()


def measure(protocol: str, port: int, concurrency: int, interval_ms: int) -> float:
    with tempfile.NamedTemporaryFile(suffix=".csv") as out:
        subprocess.run([str(NAIAD_PERF), "-m", "AddSub", "-u", f"127.0.0.1:{port}", "-i",
                        protocol, "-b", "1", "--shape", "a:1", "--shape", "b:1",
                        "--concurrency-range", f"{concurrency}:{concurrency}",
                        "--measurement-interval", str(interval_ms), "-f", out.name],
                       check=True, capture_output=True, timeout=600)
        with open(out.name) as written:
            rows = list(csv.DictReader(written))
    return float(rows[-1]["Inferences/Second"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--measurement-interval", type=int, default=3000, help="ms per window")
    args = parser.parse_args()
    if not PYTRITON_PYTHON.exists():
        sys.exit(f"the real PyTriton is not installed at {PYTRITON_PYTHON} (scripts/test)")
    results: dict[str, dict[tuple[str, int], float]] = {}
    for name, python, package, env in (
            ("PyTriton 0.7", PYTRITON_PYTHON, "pytriton", {"PYTRITON_NO_TENSORSTORE": "1"}),
            ("naiad.pytriton", Path(sys.executable), "naiad.pytriton", {})):
        process, http, grpc = serve(python, package, env)
        try:
            results[name] = {(protocol, c): measure(protocol, http if protocol == "http"
                                                    else grpc, c, args.measurement_interval)
                             for protocol in PROTOCOLS for c in CONCURRENCIES}
        finally:
            stop(process)
    print(f"{'protocol':8} {'c':>3} {'PyTriton req/s':>15} {'naiad req/s':>12} {'ratio':>6}")
    for protocol in PROTOCOLS:
        for c in CONCURRENCIES:
            theirs = results["PyTriton 0.7"][(protocol, c)]
            ours = results["naiad.pytriton"][(protocol, c)]
            print(f"{protocol:8} {c:>3} {theirs:>15.0f} {ours:>12.0f} {ours / theirs:>5.2f}x")


if __name__ == "__main__":
    main()
