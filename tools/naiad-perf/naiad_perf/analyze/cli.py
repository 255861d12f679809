"""``naiad analyze`` (also ``naiad-analyze``): the command line.

    naiad analyze -m MODEL -u 127.0.0.1:8000 [...]          a running server (explicit mode)
    naiad analyze -m MODEL --model-repository REPO [...]    a naiad this command starts
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from naiad_perf.analyze.candidates import SweepBounds, describe
from naiad_perf.analyze.checkpoint import Checkpoint, CheckpointMismatch
from naiad_perf.analyze.memory import SAMPLE_INTERVAL_S
from naiad_perf.analyze.report import write_outputs
from naiad_perf.analyze.runner import Analysis, AnalysisError, AnalyzeSettings, format_verdict
from naiad_perf.analyze.scoring import Constraints, Objective
from naiad_perf.analyze.target import (
    LOAD_TIMEOUT_S,
    READY_TIMEOUT_S,
    Server,
    find_server_pid,
    host_port,
    local_server,
)
from naiad_perf.api import LoadSpec

DEFAULT_MAX_CANDIDATES = {"quick": 8, "brute": 32}
DEFAULT_CONCURRENCY = "1,2,4,8,16"
METRICS_PORT = 8002  # Triton's and naiad's default metrics port
EXIT_INTERRUPTED = 130


def parse_concurrency(text: str) -> list[int]:
    """``start:end[:step]`` (perf_analyzer's form) or a list ``1,2,4``."""
    try:
        if ":" in text:
            parts = [int(p) for p in text.split(":")]
            if len(parts) not in (2, 3):
                raise ValueError
            start, end, step = parts[0], parts[1], parts[2] if len(parts) == 3 else 1
            values = list(range(start, end + 1, step)) if step > 0 else []
        else:
            values = [int(p) for p in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--concurrency-range: expected START:END[:STEP] or a list like 1,2,4, got "
            f"'{text}'") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"--concurrency-range: levels must be >= 1, got "
                                         f"'{text}'")
    return values


def parse_shape(text: str) -> tuple[str, list[int]]:
    name, _, dims = text.rpartition(":")
    try:
        return name, [int(d) for d in dims.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shape: expected NAME:D1,D2,..., got '{text}'"
                                         ) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="naiad analyze",
        description="Search a model's configuration (instance count, batching, backend "
                    "threads) for the best throughput, latency or memory under constraints.")
    where = parser.add_argument_group("server")
    where.add_argument("-m", "--model-name", required=True, help="the model to tune")
    place = where.add_mutually_exclusive_group(required=True)
    place.add_argument("-u", "--url", help="a running server (HOST:PORT), started with "
                       "--model-control-mode explicit: candidates are loaded through its "
                       "repository API and the original configuration is reloaded at the end")
    place.add_argument("--model-repository", type=Path,
                       help="local mode: start naiad serve on free loopback ports, serving a "
                            "copy of REPOSITORY/MODEL")
    where.add_argument("-i", "--protocol", choices=("http", "grpc"), default="http")
    where.add_argument("--metrics-url", help="HOST:PORT of the metrics endpoint, where the "
                       f"GPUs are counted (default: the server's host, port {METRICS_PORT})")
    where.add_argument("--server-pid", type=int, help="the server's process, for memory "
                       "(default: found from the URL's port when the server runs here)")
    where.add_argument("--serve-arg", action="append", default=[], metavar="ARG",
                       help="local mode: one more argument for naiad serve (repeatable)")
    where.add_argument("--load-timeout", type=float, default=LOAD_TIMEOUT_S, metavar="SECONDS",
                       help="how long one candidate's load may take (default %(default)s)")
    where.add_argument("--server-ready-timeout", type=float, default=READY_TIMEOUT_S,
                       metavar="SECONDS", help="local mode: how long naiad serve may take to "
                       "get ready (default %(default)s)")

    search = parser.add_argument_group("search")
    search.add_argument("--mode", choices=("quick", "brute"), default="quick")
    search.add_argument("--max-candidates", type=int, help="at most this many configurations "
                        "measured (default: 8 in quick mode, 32 in brute mode)")
    search.add_argument("--min-improvement", type=float, default=2.0, metavar="PERCENT",
                        help="quick mode moves only for a gain above this (default "
                             "%(default)s %%), so noise does not steer it")
    search.add_argument("--max-instance-count", type=int, default=4)
    search.add_argument("--max-batch-size", type=int, default=32,
                        help="largest max_batch_size tried (powers of two up to it)")
    search.add_argument("--queue-delays", default="0,100,500,2000", metavar="US,US,...",
                        help="max_queue_delay_microseconds values tried with dynamic batching")
    search.add_argument("--max-thread-count", type=int, default=4,
                        help="largest backend thread count tried (ONNX, PyTorch)")

    goal = parser.add_argument_group("constraints and objective")
    goal.add_argument("--max-latency-p99", type=float, metavar="MS")
    goal.add_argument("--min-throughput", type=float, metavar="INFER_PER_S")
    goal.add_argument("--max-memory", type=float, metavar="MB",
                      help="peak resident memory of the server and its worker processes")
    goal.add_argument("--objective", default="throughput",
                      help="throughput, latency or memory, or weighted: throughput=2,latency=1")

    load = parser.add_argument_group("load (as naiad perf)")
    load.add_argument("--concurrency-range", type=parse_concurrency,
                      default=parse_concurrency(DEFAULT_CONCURRENCY),
                      help=f"levels each candidate is measured at (default {DEFAULT_CONCURRENCY})")
    load.add_argument("-b", "--batch-size", type=int, default=1)
    load.add_argument("--shape", type=parse_shape, action="append", default=[])
    load.add_argument("--input-data", default="random")
    load.add_argument("--measurement-interval", type=int, default=5000, metavar="MS")
    load.add_argument("--measurement-mode", choices=("time_windows", "count_windows"),
                      default="time_windows")
    load.add_argument("--measurement-request-count", type=int, default=50)
    load.add_argument("--stability-percentage", type=float, default=10.0)
    load.add_argument("--max-trials", type=int, default=10)
    load.add_argument("--percentile", type=int)
    load.add_argument("--memory-sample-interval", type=float, default=SAMPLE_INTERVAL_S * 1000,
                      metavar="MS", help="how often the server's memory is read (default "
                      "%(default)s)")

    parser.add_argument("-o", "--output-dir", type=Path,
                        help="where the report, CSV, best config and checkpoint go (default "
                             "analyze-MODEL); run again with the same folder to resume")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="show each concurrency level's progress")
    return parser


def settings_from(args: argparse.Namespace, url: str) -> AnalyzeSettings:
    objective = Objective.parse(args.objective)
    delays = tuple(int(d) for d in args.queue_delays.split(","))
    spec = LoadSpec(url=url, model=args.model_name, protocol=args.protocol,
                    batch_size=args.batch_size, shapes=dict(args.shape),
                    input_data=args.input_data,
                    measurement_interval_ms=args.measurement_interval,
                    measurement_mode=args.measurement_mode,
                    measurement_request_count=args.measurement_request_count,
                    stability_percentage=args.stability_percentage,
                    max_trials=args.max_trials, percentile=args.percentile)
    return AnalyzeSettings(
        spec=spec, concurrency=args.concurrency_range, mode=args.mode,
        max_candidates=args.max_candidates or DEFAULT_MAX_CANDIDATES[args.mode],
        min_gain=args.min_improvement / 100,
        constraints=Constraints(args.max_latency_p99, args.min_throughput, args.max_memory),
        objective=objective,
        bounds=SweepBounds(args.max_instance_count, args.max_batch_size, delays,
                           args.max_thread_count, args.batch_size),
        memory_interval_s=args.memory_sample_interval / 1000,
        restore=args.url is not None, verbose=args.verbose)


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    # A kill (SIGTERM) unwinds like Ctrl-C: the original configuration is restored and a
    # local server stopped; the checkpoint already holds every finished candidate.
    raise KeyboardInterrupt


def _progress(line: str) -> None:
    print(line, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    output: Path = args.output_dir or Path(f"analyze-{args.model_name}")
    try:
        settings = settings_from(args, args.url or "")
        checkpoint = Checkpoint.open(output, settings.fingerprint())
    except (ValueError, CheckpointMismatch) as exc:
        parser.error(str(exc))
    wants_memory = (settings.constraints.max_memory_mb is not None
                    or settings.objective.weights.get("memory", 0) > 0)
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        if args.url is None:
            output.mkdir(parents=True, exist_ok=True)
            with local_server(args.model_repository, args.model_name, args.serve_arg,
                              output, protocol=args.protocol,
                              load_timeout_s=args.load_timeout,
                              ready_timeout_s=args.server_ready_timeout) as server:
                settings.spec.url = server.url
                analysis = Analysis(settings, server, checkpoint, progress=_progress,
                                    memory_source="the naiad serve this run started (/proc)")
                outcome = analysis.run()
        else:
            host, _ = host_port(args.url)
            pid = args.server_pid or find_server_pid(args.url)
            if wants_memory and pid is None:
                parser.error("--max-memory and the memory objective read the server's "
                             "processes in /proc: they need local mode (--model-repository), "
                             "a server on this machine this user may inspect, or --server-pid")
            server = Server(args.url, args.protocol,
                            args.metrics_url or f"{host}:{METRICS_PORT}", pid,
                            args.load_timeout)
            source = (f"process {pid} and its children (/proc)" if pid is not None else
                      "not measured (the server's process is not visible from here)")
            analysis = Analysis(settings, server, checkpoint, progress=_progress,
                                memory_source=source)
            outcome = analysis.run()
        write_outputs(output, outcome, settings)
    except KeyboardInterrupt:
        print(f"interrupted: {len(checkpoint.results)} candidates kept in "
              f"{checkpoint.path}; run the same command again to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    except AnalysisError as exc:
        print(f"naiad analyze: {exc}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
    if outcome.winner is not None:
        print(f"best: {describe(outcome.winner.result.candidate)}: "
              f"{format_verdict(outcome.winner)}")
    print(f"report: {output / 'report.html'}")
    return 0 if outcome.winner is not None and outcome.winner.feasible else 3
