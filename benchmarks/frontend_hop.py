"""What one more process hop costs a request: the price of frontend processes that forward
decoded requests to one engine process (docs/design.md, "Processes").

Two processes joined by a Unix socket pair, speaking the Python worker's frame protocol
(``naiad_stub_wire``): the "frontend" sends a plain ``execute`` header with one FP32 [1, 16]
tensor in the payload, the "engine" reads it, decodes the header and answers a plain
``result`` with the tensor back, and the frontend reads that. ``--window`` frames are in
flight at once (1: a lone client; 8: a loaded server, where one read takes several
frames). Reported: round trips per second and the CPU time of each side per round trip
(user + system, from ``os.times``), over ``--rounds`` runs of ``--count`` round trips.

    .venv/bin/python benchmarks/frontend_hop.py --window 1,8 --count 20000 --rounds 3
    taskset -c 0 .venv/bin/python benchmarks/frontend_hop.py   # both sides on one core
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins" / "backend-python"))
from naiad_backend_python.stub import naiad_stub_wire as wire

TENSOR = np.arange(16, dtype=np.float32)


def execute_header(batch: int) -> dict:
    return {"op": "execute", "id": batch, "out": None, "requests": [
        {"id": "", "parameters": None, "outputs": None,
         "inputs": [["INPUT0", "FP32", [1, 16], "p", 0, TENSOR.nbytes]]}]}


def engine(sock: socket.socket, count: int, reply: socket.socket) -> None:
    """The child: answer ``count`` frames, then report its CPU seconds on ``reply``."""
    connection = wire.Connection(sock)
    start = os.times()
    for _ in range(count):
        header, payload, _fds = connection.receive()
        descriptor = header["requests"][0]["inputs"][0]
        connection.send({"op": "result", "id": header["id"], "responses": [
            {"outputs": [["OUTPUT0", descriptor[1], descriptor[2], "p", 0, len(payload)]],
             "parameters": None, "error": None}]}, [payload])
    end = os.times()
    reply.sendall(repr(end.user + end.system - start.user - start.system).encode())


def one_run(count: int, window: int) -> tuple[float, float, float]:
    """(round trips/s, frontend CPU µs per round trip, engine CPU µs per round trip)."""
    frontend_sock, engine_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    report_read, report_write = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # the engine
        frontend_sock.close()
        report_read.close()
        try:
            engine(engine_sock, count, report_write)
        finally:
            os._exit(0)
    engine_sock.close()
    report_write.close()
    connection = wire.Connection(frontend_sock)
    payload = [memoryview(TENSOR.view(np.uint8))]
    sent = received = 0
    wall, cpu = time.perf_counter(), os.times()
    while received < count:
        while sent < count and sent - received < window:
            connection.send(execute_header(sent), payload)
            sent += 1
        _header, body, _fds = connection.receive()
        np.frombuffer(body, np.float32)  # the response tensor, as the frontend reads it
        received += 1
    end_cpu, elapsed = os.times(), time.perf_counter() - wall
    engine_cpu = float(report_read.recv(64).decode())
    os.waitpid(pid, 0)
    frontend_sock.close()
    report_read.close()
    frontend = end_cpu.user + end_cpu.system - cpu.user - cpu.system
    return count / elapsed, frontend / count * 1e6, engine_cpu / count * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--window", default="1,8", type=lambda s: [int(w) for w in s.split(",")])
    parser.add_argument("--count", type=int, default=20000, help="round trips per run")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    print("| window | round trips/s (median, min-max) | frontend CPU µs | engine CPU µs |")
    print("|---|---|---|---|")
    for window in args.window:
        runs = [one_run(args.count, window) for _ in range(args.rounds)]
        rates = [r[0] for r in runs]
        print(f"| {window} | {statistics.median(rates):.0f} ({min(rates):.0f}-{max(rates):.0f})"
              f" | {statistics.median(r[1] for r in runs):.1f}"
              f" | {statistics.median(r[2] for r in runs):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
