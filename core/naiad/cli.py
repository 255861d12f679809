"""The ``naiad`` command: ``naiad serve`` (tritonserver's flags) and ``naiad plugins``."""

from __future__ import annotations

import argparse
import logging
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from naiad import (
    __version__,
    flag_suggestions,
    install_hints,
    logs,
    serve_flags,
    tritonserver_flags,
)
from naiad.errors import InferenceServerError
from naiad.frontends.forwarding import compile_pattern
from naiad.frontends.grpc.options import GRPCOptions
from naiad.frontends.http.limits import HTTPLimits
from naiad.frontends.restrictions import parse_restrictions
from naiad.metrics.config import MetricsConfig, parse_metrics_config
from naiad.models.limits import ConfigLimits
from naiad.models.paths import name_problem, repository_problems
from naiad.models.records import LoadOptions
from naiad.plugins import ENTRY_POINT_GROUPS, PluginManager, installed_plugins
from naiad.repository.mirror import MirrorSettings
from naiad.scheduling.rate_limiter import parse_resource_flag
from naiad.serve import Listeners, run
from naiad.server_options import ServerOptions
from naiad.tracing import DeprecatedFlags, TraceConfig, parse_trace_config
from naiad.tracing.otel import check_installed as check_opentelemetry_installed

# A bound on a mistyped --frontend-processes, not a tuning limit.
MAX_FRONTEND_PROCESSES = 256


def _response_cache(args: argparse.Namespace) -> tuple[str, dict[str, str]]:
    """The one response cache the command line configures: (name, settings), or ("", {})."""
    settings: dict[str, dict[str, str]] = {}
    for name, key, value in args.cache_config:
        settings.setdefault(name, {})[key] = value
    if args.response_cache_byte_size:
        settings.setdefault("local", {}).setdefault("size", str(args.response_cache_byte_size))
    if not settings:
        return "", {}
    if len(settings) > 1:
        raise ValueError(f"one response cache at a time: --cache-config names "
                         f"{' and '.join(sorted(settings))}")
    [(name, values)] = settings.items()
    return name, values


class _Parser(argparse.ArgumentParser):
    """argparse with naiad's error: the error line first, a suggestion for a misspelled flag,
    and where the full list is (``naiad serve``'s usage block alone is 75 lines)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        lines = [f"{self.prog}: error: {message}"]
        if "unrecognized arguments" in message:
            unknown = message.split(":", 1)[1].split()
            lines += flag_suggestions.suggestions(unknown, self._every_option())
            lines.append("naiad serve takes tritonserver's flag names; "
                         "'naiad serve --help-all' lists every one")
        else:
            lines.append(f"'{self.prog} --help' lists the flags")
        self.exit(2, "\n".join(lines) + "\n")

    def _every_option(self) -> list[str]:
        """The option strings of this parser and of its subcommands' parsers."""
        found: list[str] = []
        for action in self._actions:
            found += action.option_strings
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    found += [o for a in sub._actions for o in a.option_strings]
        return found


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="naiad", description="A Triton-compatible inference server.")
    parser.add_argument("--version", action="version", version=f"naiad {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    serve = commands.add_parser("serve", help="serve model repositories", add_help=False,
                                usage="naiad serve --model-repository PATH [FLAG ...]",
                                description="Serve Triton model repositories over HTTP and "
                                            "gRPC. Flags have tritonserver's names and defaults.")
    serve_flags.add_help_flags(serve)
    serve_flags.add_flags(serve)
    tritonserver_flags.add_flags(serve)
    # Installed frontend plugins (entry points "naiad.frontends": the OpenAI API) add theirs.
    frontend_plugins = PluginManager()
    frontend_plugins.load_frontends(check_permission=False)
    frontend_plugins.add_frontend_options(serve)

    commands.add_parser("plugins", help="list installed plugins and commands per group")
    # Commands of other installed distributions: listed here, run by _external_command.
    installed = installed_commands()
    missing = [f"{name} ({known[0]})" for name, known in KNOWN_COMMANDS.items()
               if name not in installed]
    for name, distribution in installed.items():
        summary = KNOWN_COMMANDS.get(name, ("", "", f"from {distribution}"))[2]
        commands.add_parser(name, help=summary, add_help=False)
    if missing:
        parser.epilog = (f"Not installed: {', '.join(missing)}; 'naiad NAME' says how to "
                         f"install it.")
    return parser


def _configure_logging(args: argparse.Namespace) -> None:
    logs.configure(logs.LogSettings(
        log_info=args.log_info, log_warning=args.log_warning, log_error=args.log_error,
        log_verbose_level=args.log_verbose, log_format=args.log_format,
        log_file=args.log_file))


def _options(args: argparse.Namespace) -> tuple[ServerOptions, Listeners]:
    # "" holds the settings given without a backend name: they reach every backend.
    backend_config: dict[str, dict[str, str]] = {}
    for name, key, value in args.backend_config:
        backend_config.setdefault(name, {})[key] = value
    cache_name, cache_settings = _response_cache(args)
    given = serve_flags.option_values(args)
    options = ServerOptions(
        **given["server"],
        load=LoadOptions(
            **given["load"],
            limits=ConfigLimits(**given["limits"]),
            backend_config=backend_config,
            metrics=_metrics_config(args),
            rate_limit_resources=[parse_resource_flag(v) for v in args.rate_limit_resource],
        ),
        freeze_heap=True,
        cache_name=cache_name,
        cache_settings=cache_settings,
        repository_mirror=MirrorSettings(
            **({"cache_dir": Path(args.repository_cache_dir).expanduser()}
               if args.repository_cache_dir else {}),
            **given["mirror"]),
        trace=_trace_config(args)[0],
    )
    listeners = Listeners(
        **given["listeners"],
        frontend_options=args,
        http_restricted=parse_restrictions(args.http_restricted_api, "--http-restricted-api"),
        http_limits=HTTPLimits(**given["http_limits"]),
        grpc=GRPCOptions(
            **given["grpc"],
            use_ssl=args.grpc_use_ssl or args.grpc_use_ssl_mutual,
            restricted=parse_restrictions(args.grpc_restricted_protocol,
                                          "--grpc-restricted-protocol"),
        ),
    )
    return options, listeners


def _metrics_config(args: argparse.Namespace) -> MetricsConfig:
    """``--metrics-config``'s settings; the defaults when they do not parse (then
    :func:`_check` reports why, and the server does not start)."""
    try:
        return parse_metrics_config(args.metrics_config)
    except ValueError:
        return MetricsConfig()


def _parse_trace_flags(args: argparse.Namespace) -> tuple[TraceConfig, list[str]]:
    """The trace settings of ``--trace-config`` and the older ``--trace-*`` flags, and the
    deprecation warnings to log. Raises ValueError saying what does not parse."""
    return parse_trace_config(args.trace_config, DeprecatedFlags(
        trace_file=args.trace_file, trace_level=args.trace_level, trace_rate=args.trace_rate,
        trace_count=args.trace_count, trace_log_frequency=args.trace_log_frequency))


def _trace_config(args: argparse.Namespace) -> tuple[TraceConfig, list[str]]:
    """:func:`_parse_trace_flags`, tracing off when they do not parse (:func:`_check` then
    reports why, and the server does not start)."""
    try:
        return _parse_trace_flags(args)
    except ValueError:
        return TraceConfig(), []


def _check(args: argparse.Namespace) -> list[str]:
    """What makes this command line unusable, one message per problem."""
    problems = tritonserver_flags.refusals(args)
    if not args.model_repository:
        problems.append("--model-repository is required (repeatable)")
    for flag in ("http_header_forward_pattern", "grpc_header_forward_pattern"):
        try:
            compile_pattern(getattr(args, flag))
        except re.error as exc:
            problems.append(f"--{flag.replace('_', '-')}: not a regular expression: {exc}")
    for value in args.rate_limit_resource:
        try:
            parse_resource_flag(value)
        except ValueError as exc:
            problems.append(str(exc))
    if args.rate_limit_resource and args.rate_limit == "off":
        problems.append("--rate-limit-resource needs --rate-limit=execution_count")
    # tritonserver's refusals, in its words (its OpenAI frontend's tests compare them)
    if args.load_model and args.model_control_mode != "explicit":
        problems.append("Use of '--load-model' requires setting '--model-control-mode=explicit' "
                        "as well.")
    if args.load_model.count("*") and len(args.load_model) > 1:
        problems.append("--load-model=*: Wildcard model name '*' must be the ONLY startup "
                        "model if specified at all.")
    if " " in args.model_config_name:
        problems.append("--model-config-name must not contain spaces")
    if args.model_config_name and (name_problem(args.model_config_name)
                                   or "/" in args.model_config_name):
        problems.append("--model-config-name must be a file name (no '/', no '..')")
    for flag in ("model_load_thread_count", "repository_poll_secs", "max_instances_per_model",
                 "max_response_size", "max_priority_levels", "max_config_tensor_bytes"):
        if getattr(args, flag) < 1:
            problems.append(f"--{flag.replace('_', '-')} must be at least 1")
    if args.model_load_progress_secs < 0:
        problems.append("--model-load-progress-secs must not be negative")
    if args.exit_grace_secs < 0 or args.exit_timeout_secs < 0:
        problems.append("--exit-timeout-secs and --exit-grace-secs must not be negative")
    if args.model_load_retry_count < 0:
        problems.append("--model-load-retry-count must not be negative")
    if args.load_files_max_size < 0:
        problems.append("--load-files-max-size must not be negative")
    for flag in ("repository_cache_max_bytes", "repository_download_threads"):
        if getattr(args, flag) < 1:
            problems.append(f"--{flag.replace('_', '-')} must be at least 1")
    if args.repository_settle_secs < 0:
        problems.append("--repository-settle-secs must not be negative")
    if args.response_cache_byte_size < 0:
        problems.append("--response-cache-byte-size must not be negative")
    if not 0 <= args.frontend_processes <= MAX_FRONTEND_PROCESSES:
        problems.append(f"--frontend-processes must be from 0 to {MAX_FRONTEND_PROCESSES}")
    elif args.frontend_processes and args.http_server != "uvicorn":
        problems.append("--frontend-processes serves HTTP with uvicorn only; drop "
                        "--http-server=hypercorn or use --frontend-processes=0")
    for flag in ("http_max_header_size", "http_max_header_count"):
        if getattr(args, flag) < 1:
            problems.append(f"--{flag.replace('_', '-')} must be at least 1")
    for flag in ("http_keepalive_timeout", "http_header_timeout", "http_body_timeout"):
        if not getattr(args, flag) > 0:  # NaN too
            problems.append(f"--{flag.replace('_', '-')} must be a positive number of "
                            f"seconds")
    # grpc core takes these as C ints; a header limit under 1 KiB refuses every call.
    for flag, low in (("grpc_max_header_size", 1024), ("grpc_idle_timeout", 0),
                      ("grpc_handshake_timeout", 1), ("grpc_message_timeout", 0)):
        if not low <= getattr(args, flag) <= 2**31 - 1:
            problems.append(f"--{flag.replace('_', '-')} must be from {low} to {2**31 - 1}")
    try:
        parse_metrics_config(args.metrics_config)
    except ValueError as exc:
        problems.append(f"--metrics-config {exc}")
    try:
        trace = _parse_trace_flags(args)[0]
        if trace.mode == "opentelemetry":
            check_opentelemetry_installed()
    except ValueError as exc:
        problems.append(str(exc))
    except InferenceServerError as exc:
        problems.append(exc.message)
    return problems


def _list_plugins() -> int:
    plugins = installed_plugins(groups=(*ENTRY_POINT_GROUPS.values(), COMMANDS_GROUP))
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


# Commands other distributions add through the entry-point group "naiad.commands" (name ->
# main(argv) -> int), and the distribution that provides each known one.
COMMANDS_GROUP = "naiad.commands"
BUILTIN_COMMANDS = ("serve", "plugins")
KNOWN_COMMANDS = {
    "perf": ("naiad-perf", "tools/naiad-perf",
             "measure a served model's latency and throughput (perf_analyzer's job)"),
    "analyze": ("naiad-perf", "tools/naiad-perf",
                "find a model's best configuration by measuring (Model Analyzer's job)"),
    "convert": ("naiad-convert", "tools/naiad-convert",
                "export a model to the formats that fit and serve the best (Model "
                "Navigator's job)"),
}


def installed_commands() -> dict[str, str]:
    """Every installed "naiad.commands" entry point: name -> its distribution's name."""
    return {plugin.name: plugin.distribution
            for plugin in installed_plugins(groups=(COMMANDS_GROUP,))}


def _external_command(argv: Sequence[str] | None) -> int | None:
    """Run ``naiad NAME ...`` from an installed "naiad.commands" entry point; None when the
    first argument is a built-in command or an option (argparse takes it from there)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0].startswith("-") or args[0] in BUILTIN_COMMANDS:
        return None
    from importlib.metadata import entry_points

    for entry in entry_points(group=COMMANDS_GROUP):
        if entry.name == args[0]:
            return int(entry.load()(args[1:]) or 0)
    if args[0] in KNOWN_COMMANDS:
        distribution, folder, _ = KNOWN_COMMANDS[args[0]]
        print(f"naiad: '{args[0]}' is provided by the {distribution} distribution, which is "
              f"not installed; {install_hints.install_hint(distribution, folder)}",
              file=sys.stderr)
        return 2
    return None


def main(argv: Sequence[str] | None = None) -> int:
    external = _external_command(argv)
    if external is not None:
        return external
    args = build_parser().parse_args(argv)
    if args.command == "plugins":
        return _list_plugins()
    problems = _check(args)
    try:
        options, listeners = _options(args)
    except ValueError as exc:  # a restriction that does not parse
        problems.append(str(exc))
    if not problems:  # the repositories exist and can be read: usage errors too (exit 2)
        problems = repository_problems(args.model_repository)
    if problems:
        for problem in problems:
            print(f"naiad serve: error: {problem}", file=sys.stderr)
        return 2
    _configure_logging(args)
    for warning in _trace_config(args)[1]:
        logging.getLogger("naiad").warning("%s", warning)
    for line in tritonserver_flags.inert_given(args):
        logging.getLogger("naiad").info("%s", line)
    return run(options, listeners, batch_scheduling=args.sched_batch)
