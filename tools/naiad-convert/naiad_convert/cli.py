"""``naiad convert`` (also ``naiad-convert``): the command line.

    naiad convert mymodels:make_mlp --input x:FP32:batch,16 -o convert-mlp
    naiad convert model.onnx --samples samples.npz --serve-timing

Exit status: 0 a repository was written; 1 the model could not be loaded or run; 2 bad
arguments or sample inputs that do not match the model; 3 no format passed (or the one
``--format`` named did not); 130 interrupted (run the same command again to resume).
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from naiad_convert.check import DEFAULT_ATOL, DEFAULT_RTOL, Tolerance
from naiad_convert.errors import (
    EXIT_INTERRUPTED,
    EXIT_NO_FORMAT,
    EXIT_OK,
    EXIT_USAGE,
    ConvertError,
)
from naiad_convert.formats import FORMAT_NAMES, ExportSettings
from naiad_convert.formats.onnx import DEFAULT_OPSET, EXPORTERS, default_exporter
from naiad_convert.pipeline import ConvertSettings, Pipeline
from naiad_convert.report import write_report
from naiad_convert.samples import parse_input_arg
from naiad_convert.serving import (
    DEFAULT_CONCURRENCY,
    DEFAULT_INTERVAL_MS,
    DEFAULT_READY_TIMEOUT_S,
    ServeSettings,
)
from naiad_convert.state import Progress
from naiad_convert.timing import (
    DEFAULT_MAX_WINDOWS,
    DEFAULT_STABILITY_PERCENT,
    DEFAULT_WINDOW_S,
    TimingSettings,
    batch_sizes_up_to,
)

DEFAULT_MAX_BATCH_SIZE = 16
MIB = 1 << 20


def int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers like 1,2,4, got '{text}'") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"values must be >= 1, got '{text}'")
    return values


def format_list(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in FORMAT_NAMES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown format(s) {unknown}: choose from "
                                         f"{', '.join(FORMAT_NAMES)}")
    return names


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="naiad convert",
        description="Export a PyTorch or ONNX model to every format that fits this machine, "
                    "check each against the original, time each, and write a model "
                    "repository for the best.",
        epilog="Exit status: 0 a repository was written; 1 the model cannot be loaded or "
               "run; 2 bad arguments or inputs that do not match the model; 3 no format "
               "passed; 130 interrupted (the same command resumes).")
    parser.add_argument("source", help="module:attr (an nn.Module, its class or a factory), "
                        "path/file.py:attr, a TorchScript file, a torch.export .pt2 file or "
                        "an ONNX file")
    given = parser.add_argument_group("inputs")
    given.add_argument("--samples", type=Path, metavar="FILE",
                       help="sample inputs: .npz (np.savez, batch on axis 0) or "
                            "perf_analyzer's JSON input file")
    given.add_argument("--input", action="append", default=[], metavar="NAME:DATATYPE:DIMS",
                       help="an input to generate samples for (x:FP32:batch,3,32,32; the "
                            "leading name or -1 is the batch axis); repeat per input")
    given.add_argument("--max-batch-size", type=int, default=DEFAULT_MAX_BATCH_SIZE,
                       help="the repository's max_batch_size and the largest batch exported, "
                            "checked and timed; 0 for a model without a batch axis "
                            "(default %(default)s)")
    given.add_argument("--check-batch", type=int, default=4, metavar="N",
                       help="the batch larger than one every format is also checked on "
                            "(default %(default)s)")
    formats = parser.add_argument_group("formats")
    formats.add_argument("--formats", type=format_list, default=FORMAT_NAMES,
                         metavar="NAME,...", help=f"formats to try (default all: "
                         f"{','.join(FORMAT_NAMES)})")
    formats.add_argument("--format", choices=FORMAT_NAMES, dest="chosen_format",
                         help="write the repository for this format (it must pass), not the "
                              "fastest")
    formats.add_argument("--opset", type=int, default=DEFAULT_OPSET,
                         help="ONNX opset (default %(default)s)")
    formats.add_argument("--onnx-exporter", choices=("auto", *EXPORTERS), default="auto",
                         help="torch.onnx.export's dynamo exporter or the tracing one; auto: "
                              "dynamo when onnxscript is installed")
    formats.add_argument("--device", default="cpu", help="where torch formats and "
                         "onnxruntime run for checks and timings: cpu or cuda[:N] "
                         "(default %(default)s)")
    formats.add_argument("--tensorrt-fp16", action="store_true",
                         help="let TensorRT use FP16 kernels (check the tolerance)")
    formats.add_argument("--tensorrt-workspace", type=int, default=1024, metavar="MIB",
                         help="TensorRT builder workspace in MiB (default %(default)s)")
    check = parser.add_argument_group("correctness")
    check.add_argument("--atol", type=float, default=DEFAULT_ATOL,
                       help="absolute tolerance (default %(default)s)")
    check.add_argument("--rtol", type=float, default=DEFAULT_RTOL,
                       help="relative tolerance (default %(default)s)")
    timing = parser.add_argument_group("timing")
    timing.add_argument("--batch-sizes", type=int_list, metavar="B,...",
                        help="batch sizes timed (default 1,2,4,... up to --max-batch-size)")
    timing.add_argument("--window", type=float, default=DEFAULT_WINDOW_S * 1000, metavar="MS",
                        help="in-process timing window (default %(default)s)")
    timing.add_argument("--stability-percentage", type=float, default=DEFAULT_STABILITY_PERCENT,
                        help="windows agree when within this of their mean (default "
                             "%(default)s)")
    timing.add_argument("--max-windows", type=int, default=DEFAULT_MAX_WINDOWS,
                        help="windows per batch size at most (default %(default)s)")
    serve = parser.add_argument_group("served timing (naiad serve and naiad perf)")
    serve.add_argument("--serve-timing", action="store_true",
                       help="also serve every correct format with naiad serve and measure it "
                            "with naiad perf; the winner is chosen on these figures")
    serve.add_argument("--serve-concurrency", type=int_list,
                       default=DEFAULT_CONCURRENCY, metavar="C,...",
                       help="concurrency levels (default %(default)s)")
    serve.add_argument("--serve-batch-sizes", type=int_list, metavar="B,...",
                       help="batch sizes sent (default: the timing batch sizes)")
    serve.add_argument("--serve-interval", type=int, default=DEFAULT_INTERVAL_MS, metavar="MS",
                       help="naiad perf's measurement window (default %(default)s)")
    serve.add_argument("--serve-protocol", choices=("http", "grpc"), default="grpc")
    serve.add_argument("--serve-ready-timeout", type=float, default=DEFAULT_READY_TIMEOUT_S,
                       metavar="SECONDS", help="how long naiad serve and each model's load "
                       "may take (default %(default)s)")
    serve.add_argument("--serve-arg", action="append", default=[], metavar="ARG",
                       help="one more argument for naiad serve (repeatable)")
    parser.add_argument("--model-name", help="the model's name in the repository (default: "
                        "the attribute or file name)")
    parser.add_argument("-o", "--output-dir", type=Path,
                        help="where formats, report and repository go (default "
                             "convert-MODEL); the same folder resumes an interrupted run")
    parser.add_argument("--restart", action="store_true",
                        help="discard the output folder's progress instead of resuming")
    return parser


def default_model_name(source: str) -> str:
    text = source.rpartition(":")[2] if ":" in source and not Path(source).exists() else (
        Path(source).stem)
    name = "".join(c if c.isalnum() or c in "_-" else "_" for c in text)
    return name or "model"


def settings_from(args: argparse.Namespace, argv: Sequence[str]) -> ConvertSettings:
    if args.max_batch_size < 0:
        raise ConvertError("--max-batch-size must be >= 0", EXIT_USAGE)
    if args.chosen_format and args.chosen_format not in args.formats:
        raise ConvertError(f"--format {args.chosen_format} is not among --formats "
                           f"{','.join(args.formats)}", EXIT_USAGE)
    model_name = args.model_name or default_model_name(args.source)
    sizes = args.batch_sizes or batch_sizes_up_to(args.max_batch_size)
    if args.max_batch_size > 0 and max(sizes) > args.max_batch_size:
        raise ConvertError(f"--batch-sizes {max(sizes)} is over --max-batch-size "
                           f"{args.max_batch_size}", EXIT_USAGE)
    if args.max_batch_size == 0:
        sizes = (1,)
    exporter = default_exporter() if args.onnx_exporter == "auto" else args.onnx_exporter
    export = ExportSettings(args.max_batch_size, args.opset, exporter, args.device,
                            args.tensorrt_fp16, args.tensorrt_workspace * MIB)
    timing = TimingSettings(tuple(sizes), args.window / 1000, args.stability_percentage,
                            args.max_windows)
    serve = None
    if args.serve_timing:
        serve = ServeSettings(tuple(args.serve_batch_sizes or sizes),
                              tuple(args.serve_concurrency), args.serve_interval,
                              args.stability_percentage, args.max_windows,
                              args.serve_protocol, args.serve_ready_timeout,
                              tuple(args.serve_arg))
    return ConvertSettings(
        source=args.source, output=args.output_dir or Path(f"convert-{model_name}"),
        model_name=model_name, formats=tuple(args.formats), export=export, timing=timing,
        tolerance=Tolerance(args.atol, args.rtol), samples_path=args.samples,
        input_args=tuple(parse_input_arg(text) for text in args.input),
        chosen_format=args.chosen_format, serve=serve, check_batch=args.check_batch,
        argv=tuple(argv))


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # a kill unwinds like Ctrl-C: progress.json holds what finished


def _say(line: str) -> None:
    print(line, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        settings = settings_from(args, argv)
        progress = Progress.open(settings.output, settings.fingerprint(), args.restart)
        settings.output.mkdir(parents=True, exist_ok=True)
        outcome = Pipeline(settings, progress, _say).run()
        write_report(settings.output, outcome, settings)
    except KeyboardInterrupt:
        print("naiad convert: interrupted; what finished is kept in progress.json: run the "
              "same command again to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    except ConvertError as exc:
        print(f"naiad convert: {exc}", file=sys.stderr)
        return exc.status
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(f"report: {settings.output / 'report.html'}")
    if outcome.winner is None:
        print(f"naiad convert: no format passed (tolerance atol {settings.tolerance.atol:g}, "
              f"rtol {settings.tolerance.rtol:g}): see the report", file=sys.stderr)
        return EXIT_NO_FORMAT
    print(f"chose {outcome.winner.name}: repository {outcome.repository.parent} "
          f"(model '{settings.model_name}')")
    return EXIT_OK
