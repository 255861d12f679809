#!/usr/bin/env python3
"""What tracing costs per request: one model served with tracing off, tracing at Triton's
default sampling (triton mode, ``rate=1000``) and tracing every request (triton mode,
``rate=1``), throughput and latency side by side, in one run.

The model, the client and the comparison are metrics_overhead.py's (an identity over
FP32[16] run in process, so the server's own per-request work, where tracing happens, is
most of what a request costs; the servers measured in turns, the median of ``--rounds``).
Each server writes its own trace file in a temporary folder. Printed per target: requests
per second and p50/p99 latency, then the ratios against the tracing-off server. With tracing
off a request pays one attribute check in the core and one in the frontend, so "rate=1000"
should be within noise of 1.00; "rate=1" pays a trace per request (timestamps, a few small
objects, the hand-off to the tracing thread, which formats and writes it).

  .venv/bin/python benchmarks/tracing_overhead.py
  .venv/bin/python benchmarks/tracing_overhead.py --rounds 3 --requests 1000
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "core"))
sys.path.insert(0, str(HERE))

from metrics_overhead import arguments, compare, repository  # noqa: E402

# target -> its --trace-config values (each writes to its own file)
TARGETS = {
    "tracing off": [],
    "triton, rate=1000": ["level=TIMESTAMPS", "rate=1000"],
    "triton, rate=1": ["level=TIMESTAMPS", "rate=1"],
}
BASELINE = "tracing off"


def command(repo: Path, trace_file: Path, settings: list[str]) -> list[str]:
    trace = [part for value in [f"triton,file={trace_file}", *settings]
             for part in ("--trace-config", value)]
    return [sys.executable, "-m", "naiad", "serve", "--http-address", "127.0.0.1",
            "--grpc-address", "127.0.0.1", "--metrics-address", "127.0.0.1",
            "--http-port", "{http_port}", "--grpc-port", "{grpc_port}",
            "--metrics-port", "{metrics_port}", "--model-repository", str(repo), *trace]


def main() -> int:
    args = arguments(__doc__)
    with tempfile.TemporaryDirectory(prefix="naiad-bench-tracing-") as tmp:
        repo = repository(Path(tmp) / "models")
        compare({name: command(repo, Path(tmp) / f"trace-{index}.json", settings)
                 for index, (name, settings) in enumerate(TARGETS.items())}, BASELINE, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
