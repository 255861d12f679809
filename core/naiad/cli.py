"""The ``naiad`` command: ``naiad serve`` (tritonserver's flags) and ``naiad plugins``."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from naiad import __version__
from naiad.plugins import installed_plugins
from naiad.serve import HTTP_SERVERS, Listeners, run
from naiad.server import MIB, ServerOptions


def _bool(value: str) -> bool:
    """Triton's boolean flag values: true/false, 1/0, on/off, yes/no."""
    lowered = value.strip().lower()
    if lowered in ("true", "1", "on", "yes"):
        return True
    if lowered in ("false", "0", "off", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got '{value}'")


def _backend_config(value: str) -> tuple[str, str, str]:
    """``NAME,KEY=VALUE`` (``KEY=VALUE`` alone is a setting for every backend)."""
    name, _, setting = value.partition(",") if "," in value else ("", "", value)
    key, eq, val = setting.partition("=")
    if not eq or not key:
        raise argparse.ArgumentTypeError(f"expected NAME,KEY=VALUE, got '{value}'")
    return name, key, val


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        hint = ""
        if "unrecognized arguments" in message:
            hint = ("\nnaiad serve takes tritonserver's flag names; "
                    "'naiad serve --help' lists the ones it supports")
        self.exit(2, f"{self.prog}: error: {message}{hint}\n")


def _add_flag(group: argparse._ArgumentGroup, name: str, default: bool, help_text: str) -> None:
    # `--flag` alone means true; `--flag=false` / `--flag false` as in tritonserver.
    group.add_argument(name, type=_bool, nargs="?", const=True, default=default,
                       metavar="BOOL", help=f"{help_text} (default {str(default).lower()})")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="naiad", description="A Triton-compatible inference server.")
    parser.add_argument("--version", action="version", version=f"naiad {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    serve = commands.add_parser("serve", help="serve model repositories",
                                description="Serve Triton model repositories over HTTP and "
                                            "gRPC. Flags have tritonserver's names and defaults.")
    repo = serve.add_argument_group("model repository")
    repo.add_argument("--model-repository", "--model-store", action="append", default=[],
                      dest="model_repository", metavar="PATH",
                      help="a model repository (repeatable)")
    _add_flag(repo, "--strict-model-config", False,
              "require a complete config.pbtxt; no auto-complete")
    repo.add_argument("--disable-auto-complete-config", action="store_true",
                      help="do not let backends fill in missing configuration")
    repo.add_argument("--model-control-mode", choices=("none", "explicit", "poll"),
                      default="none", help="none: load everything at start; explicit: load "
                                           "and unload through the repository API")
    repo.add_argument("--load-model", action="append", default=[], metavar="NAME",
                      help="with explicit control: a model to load at start ('*' = all)")
    repo.add_argument("--backend-config", action="append", default=[], type=_backend_config,
                      metavar="NAME,KEY=VALUE", help="a setting for one backend (repeatable)")
    _add_flag(repo, "--exit-on-error", True, "fail start-up when a model fails to load")
    _add_flag(repo, "--strict-readiness", True,
              "ready only when every model is ready")
    repo.add_argument("--exit-timeout-secs", type=int, default=30, metavar="SECONDS",
                      help="how long shutdown waits for in-flight requests (default 30)")

    net = serve.add_argument_group("listeners")
    _add_flag(net, "--allow-http", True, "serve HTTP/REST")
    net.add_argument("--http-address", default="0.0.0.0")
    net.add_argument("--http-port", type=int, default=8000)
    net.add_argument("--http-server", choices=HTTP_SERVERS, default="uvicorn",
                     help="the ASGI server for HTTP (default uvicorn: the faster one measured "
                          "in benchmarks/)")
    net.add_argument("--http-max-input-size", type=int, default=64 * MIB, metavar="BYTES",
                     help="largest request accepted, after decompression, HTTP and gRPC "
                          "(default 64 MiB)")
    _add_flag(net, "--allow-grpc", True, "serve gRPC")
    net.add_argument("--grpc-address", default="0.0.0.0")
    net.add_argument("--grpc-port", type=int, default=8001)
    _add_flag(net, "--allow-metrics", True, "serve Prometheus metrics")
    net.add_argument("--metrics-address", default="0.0.0.0")
    net.add_argument("--metrics-port", type=int, default=8002)

    process = serve.add_argument_group("process")
    _add_flag(process, "--sched-batch", True,
              "run the server's threads in Linux's SCHED_BATCH class (naiad only; fewer "
              "wasted context switches between threads that share the GIL)")

    logs = serve.add_argument_group("logging")
    logs.add_argument("--log-verbose", type=int, default=0, metavar="LEVEL",
                      help="verbose logging level (0 = off)")
    _add_flag(logs, "--log-info", True, "log informational messages")
    _add_flag(logs, "--log-warning", True, "log warnings")
    _add_flag(logs, "--log-error", True, "log errors")

    plugins = serve.add_argument_group("plugins")
    plugins.add_argument("--plugin", action="append", default=[], metavar="NAME",
                         help="allow only these plugins to load (entry point or distribution "
                              "name; repeatable)")
    plugins.add_argument("--block-plugin", action="append", default=[], metavar="NAME",
                         help="never load this plugin (repeatable)")

    commands.add_parser("plugins", help="list installed plugins per group")
    return parser


def _configure_logging(args: argparse.Namespace) -> None:
    level = logging.INFO if args.log_info else logging.WARNING
    if args.log_verbose > 0:
        level = logging.DEBUG
    if not args.log_warning and not args.log_error:
        level = logging.CRITICAL
    logging.basicConfig(level=level, format="%(asctime)s %(levelname).1s %(name)s] %(message)s")


def _options(args: argparse.Namespace) -> tuple[ServerOptions, Listeners]:
    # "" holds the settings given without a backend name: they reach every backend.
    backend_config: dict[str, dict[str, str]] = {}
    for name, key, value in args.backend_config:
        backend_config.setdefault(name, {})[key] = value
    options = ServerOptions(
        model_repositories=args.model_repository,
        strict_model_config=args.strict_model_config,
        disable_auto_complete_config=args.disable_auto_complete_config,
        exit_on_error=args.exit_on_error,
        exit_timeout_secs=args.exit_timeout_secs,
        strict_readiness=args.strict_readiness,
        model_control_mode=args.model_control_mode,
        load_models=args.load_model,
        backend_config=backend_config,
        plugins_allowed=args.plugin,
        plugins_blocked=args.block_plugin,
        max_input_size=args.http_max_input_size,
        freeze_heap=True,
    )
    listeners = Listeners(
        http_address=args.http_address, http_port=args.http_port, allow_http=args.allow_http,
        grpc_address=args.grpc_address, grpc_port=args.grpc_port, allow_grpc=args.allow_grpc,
        metrics_address=args.metrics_address, metrics_port=args.metrics_port,
        allow_metrics=args.allow_metrics, http_server=args.http_server,
    )
    return options, listeners


def _list_plugins() -> int:
    plugins = installed_plugins()
    if not plugins:
        print("no naiad plugins installed")
        return 0
    group = None
    for plugin in plugins:
        if plugin.group != group:
            group = plugin.group
            print(f"{group}:")
        print(f"  {plugin.name:<16} {plugin.distribution} {plugin.version}  ({plugin.value})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "plugins":
        return _list_plugins()
    if not args.model_repository:
        print("naiad serve: error: --model-repository is required (repeatable)", file=sys.stderr)
        return 2
    _configure_logging(args)
    options, listeners = _options(args)
    return run(options, listeners, batch_scheduling=args.sched_batch)
