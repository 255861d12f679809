"""The ``naiad`` command: ``naiad serve`` (tritonserver's flags) and ``naiad plugins``."""

from __future__ import annotations

import argparse
import logging
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from naiad import __version__, logs, tritonserver_flags
from naiad.errors import InferenceServerError
from naiad.frontends.forwarding import compile_pattern
from naiad.frontends.grpc.options import COMPRESSION_LEVELS, GRPCOptions
from naiad.frontends.http.limits import HTTPLimits
from naiad.frontends.http.listener import HTTP_SERVERS
from naiad.frontends.restrictions import parse_restrictions
from naiad.metrics.config import MetricsConfig, parse_metrics_config
from naiad.models.limits import DEFAULT_MAX_CONFIG_TENSOR_BYTES, DEFAULT_MAX_PRIORITY_LEVELS
from naiad.models.paths import name_problem, repository_problems
from naiad.models.progress import DEFAULT_PROGRESS_S
from naiad.models.staging import DEFAULT_MAX_BYTES
from naiad.plugins import DEFAULT_BACKEND_DIRECTORY, PluginManager, installed_plugins
from naiad.repository.mirror import MirrorSettings
from naiad.scheduling.rate_limiter import MODES as RATE_LIMIT_MODES
from naiad.scheduling.rate_limiter import parse_resource_flag
from naiad.serve import Listeners, run
from naiad.server_options import MIB, ServerOptions
from naiad.tracing import DeprecatedFlags, TraceConfig, parse_trace_config
from naiad.tracing.otel import check_installed as check_opentelemetry_installed

_bool = tritonserver_flags.parse_bool


# A bound on a mistyped --frontend-processes, not a tuning limit.
MAX_FRONTEND_PROCESSES = 256


def _backend_config(value: str) -> tuple[str, str, str]:
    """``NAME,KEY=VALUE`` (``KEY=VALUE`` alone is a setting for every backend)."""
    name, _, setting = value.partition(",") if "," in value else ("", "", value)
    key, eq, val = setting.partition("=")
    if not eq or not key:
        raise argparse.ArgumentTypeError(f"expected NAME,KEY=VALUE, got '{value}'")
    return name, key, val


def _cache_config(value: str) -> tuple[str, str, str]:
    """``NAME,KEY=VALUE``: one setting of the response cache NAME."""
    name, comma, setting = value.partition(",")
    key, eq, val = setting.partition("=")
    if not (name and comma and key and eq):
        raise argparse.ArgumentTypeError(f"expected NAME,KEY=VALUE (for example "
                                         f"local,size=1048576), got '{value}'")
    return name.strip(), key.strip(), val.strip()


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
    server = serve.add_argument_group("server")
    server.add_argument("--id", default="naiad", dest="server_id", metavar="NAME",
                        help="the server's name in its metadata (default naiad)")

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
                                           "and unload through the repository API; poll: "
                                           "follow the repositories' changes")
    repo.add_argument("--repository-poll-secs", type=int, default=15, metavar="SECONDS",
                      help="with poll control: seconds between two scans (default 15)")
    repo.add_argument("--repository-cache-dir", default="", metavar="PATH",
                      help="where remote repositories (s3://, gs://, as://) are mirrored: a "
                           "content-addressed store and the model folders (default "
                           "$XDG_CACHE_HOME/naiad/repositories or ~/.cache/naiad/repositories)")
    repo.add_argument("--repository-cache-max-bytes", type=int, default=10 * 1024**3,
                      metavar="BYTES",
                      help="bound of that store: files no mirrored model uses are evicted "
                           "past it (default 10 GiB)")
    repo.add_argument("--repository-download-threads", type=int, default=8, metavar="N",
                      help="files downloaded at the same time per remote repository "
                           "(default 8)")
    repo.add_argument("--repository-settle-secs", type=float, default=1.0, metavar="SECONDS",
                      help="a changed remote model is loaded only when two listings this far "
                           "apart agree on its files (default 1; poll mode compares polls)")
    repo.add_argument("--model-config-name", default="", metavar="NAME",
                      help="load <model>/configs/NAME.pbtxt instead of config.pbtxt where "
                           "it exists")
    repo.add_argument("--model-load-thread-count", type=int, default=4, metavar="N",
                      help="models loaded at the same time (default 4)")
    repo.add_argument("--model-load-retry-count", type=int, default=0, metavar="N",
                      help="how often a failed model load is tried again (default 0)")
    repo.add_argument("--load-model", action="append", default=[], metavar="NAME",
                      help="with explicit control: a model to load at start ('*' = all)")
    repo.add_argument("--backend-config", action="append", default=[], type=_backend_config,
                      metavar="NAME,KEY=VALUE", help="a setting for one backend (repeatable)")
    _add_flag(repo, "--exit-on-error", True, "fail start-up when a model fails to load")
    _add_flag(repo, "--strict-readiness", True,
              "ready only when every model is ready")
    repo.add_argument("--exit-timeout-secs", type=int, default=30, metavar="SECONDS",
                      help="how long shutdown waits for in-flight requests (default 30)")
    repo.add_argument("--exit-grace-secs", type=float, default=10.0, metavar="SECONDS",
                      help="past --exit-timeout-secs: how long ending the requests left, "
                           "unloading and closing the listeners may take before the process "
                           "exits anyway, naming the models still running (naiad only; "
                           "default 10)")
    repo.add_argument("--max-instances-per-model", type=int, default=64, metavar="N",
                      help="the most instances one model version may have; a larger "
                           "instance_group fails to load (naiad only; default 64)")
    repo.add_argument("--max-priority-levels", type=int, default=DEFAULT_MAX_PRIORITY_LEVELS,
                      metavar="N",
                      help="the most dynamic_batching priority_levels a model may have; more "
                           "fails its load (naiad only; default 1000)")
    repo.add_argument("--backend-directory", default=DEFAULT_BACKEND_DIRECTORY, metavar="PATH",
                      help="where Triton's Python-based backends live (PATH/NAME/model.py "
                           "serves models with backend: \"NAME\"); other backends are "
                           "installed naiad plugins (default /opt/tritonserver/backends)")
    repo.add_argument("--rate-limit", choices=RATE_LIMIT_MODES, default="off",
                      type=str.lower,
                      help="execution_count: an instance runs only while the resources its "
                           "instance_group's rate_limiter names are free (default off)")
    repo.add_argument("--rate-limit-resource", action="append", default=[],
                      metavar="NAME:COUNT[:DEVICE]",
                      help="how many of a rate limiter resource there are, on DEVICE or on "
                           "every device and globally (repeatable; default: the most one "
                           "instance needs)")
    repo.add_argument("--max-config-tensor-bytes", type=int,
                      default=DEFAULT_MAX_CONFIG_TENSOR_BYTES, metavar="BYTES",
                      help="the most bytes of a tensor built from a model configuration (a "
                           "model_warmup sample with its batch, a sequence state's initial "
                           "value); larger fails the load (naiad only; default 256 MiB)")
    repo.add_argument("--model-load-progress-secs", type=float, default=DEFAULT_PROGRESS_S,
                      metavar="SECONDS",
                      help="a slow load step (configuration, initialize, warmup, repository "
                           "download) logs that it still runs this often; 0: never (naiad "
                           "only; default 10)")
    repo.add_argument("--load-files-directory", default="", metavar="PATH",
                      help="where models deployed through the load API (file: parameters) "
                           "are written, each load in a private folder removed when no "
                           "version uses it, all at shutdown (naiad only; default: the "
                           "system's temporary directory)")
    repo.add_argument("--load-files-max-size", type=int, default=DEFAULT_MAX_BYTES,
                      metavar="BYTES",
                      help="the most bytes the file: parameters of one load request may "
                           "hold; 0 refuses every such load (naiad only; default 1 GiB)")

    net = serve.add_argument_group("listeners")
    _add_flag(net, "--allow-http", True, "serve HTTP/REST")
    net.add_argument("--http-address", default="0.0.0.0")
    net.add_argument("--http-port", type=int, default=8000)
    _add_flag(net, "--reuse-http-port", False,
              "let other servers listen on the same HTTP port (SO_REUSEPORT)")
    net.add_argument("--http-header-forward-pattern", default="", metavar="REGEX",
                     help="HTTP headers whose names match become request parameters")
    net.add_argument("--http-restricted-api", action="append", default=[],
                     metavar="API,...:KEY=VALUE",
                     help="requests to these APIs need header KEY=VALUE (repeatable)")
    net.add_argument("--frontend-processes", type=int, default=0, metavar="COUNT",
                     help="serve HTTP from COUNT processes that forward every request to "
                          "this one, which holds the models (0: this process serves it; "
                          "naiad only; docs/operations.md)")
    net.add_argument("--http-server", choices=HTTP_SERVERS, default="uvicorn",
                     help="the ASGI server for HTTP (default uvicorn: the faster one measured "
                          "in benchmarks/)")
    net.add_argument("--http-max-input-size", type=int, default=64 * MIB, metavar="BYTES",
                     help="largest request accepted, after decompression, HTTP and gRPC "
                          "(default 64 MiB)")
    net.add_argument("--max-response-size", type=int, default=128 * MIB, metavar="BYTES",
                     help="largest inference response a frontend builds, HTTP (JSON and "
                          "binary data together) and gRPC; a larger answer is refused "
                          "(HTTP 413, gRPC RESOURCE_EXHAUSTED) naming the model, output and "
                          "size: ask for binary or shared-memory outputs, or raise it "
                          "(naiad only; default 128 MiB, the binary answer of an identity "
                          "model to a 64 MiB input fits)")
    net.add_argument("--http-max-header-size", type=int, default=HTTPLimits.max_header_size,
                     metavar="BYTES",
                     help="largest request line and header fields of one HTTP request "
                          "together; more is refused with 431 and the connection closed "
                          "(naiad only; default 64 KiB)")
    net.add_argument("--http-max-header-count", type=int, default=HTTPLimits.max_header_count,
                     metavar="N", help="most header fields of one HTTP request; more is "
                                       "refused with 431 (naiad only; default 100)")
    net.add_argument("--http-keepalive-timeout", type=float,
                     default=HTTPLimits.keepalive_timeout, metavar="SECONDS",
                     help="an HTTP connection idle this long between requests is closed. "
                          "Longer than the idle timeout of the proxies and load balancers "
                          "that usually sit in front (60 s for AWS ALB and ingress-nginx), so "
                          "that they, not naiad, close idle connections and never send a "
                          "request on one naiad is closing; lower it when clients connect "
                          "directly (naiad only; default 75)")
    net.add_argument("--http-header-timeout", type=float, default=HTTPLimits.header_timeout,
                     metavar="SECONDS",
                     help="an HTTP request must deliver its request line and headers within "
                          "this long from its first byte, a new connection within this long "
                          "from its accept (slow-header attacks); else 408 and the connection "
                          "closed; hypercorn bounds that wait by --http-keepalive-timeout "
                          "instead (naiad only; default 10)")
    net.add_argument("--http-body-timeout", type=float, default=HTTPLimits.body_timeout,
                     metavar="SECONDS",
                     help="an HTTP request body that is incomplete and receives no byte for "
                          "this long (an inactivity timeout: a large body on a slow link "
                          "passes as long as it moves) is answered 408 and the connection "
                          "closed (naiad only; default 30)")
    _add_flag(net, "--allow-grpc", True, "serve gRPC")
    net.add_argument("--grpc-address", default="0.0.0.0")
    net.add_argument("--grpc-port", type=int, default=8001)
    _add_flag(net, "--reuse-grpc-port", False,
              "let other servers listen on the same gRPC port (SO_REUSEPORT)")
    net.add_argument("--grpc-header-forward-pattern", default="", metavar="REGEX",
                     help="gRPC headers whose names match become request parameters")
    net.add_argument("--grpc-restricted-protocol", action="append", default=[],
                     metavar="API,...:KEY=VALUE",
                     help="requests to these APIs need header triton-grpc-protocol-KEY=VALUE "
                          "(repeatable)")
    _add_flag(net, "--grpc-use-ssl", False, "serve gRPC over TLS")
    _add_flag(net, "--grpc-use-ssl-mutual", False,
              "serve gRPC over TLS and require client certificates signed by --grpc-root-cert")
    net.add_argument("--grpc-server-cert", default="", metavar="PEM",
                     help="the server certificate (with TLS)")
    net.add_argument("--grpc-server-key", default="", metavar="PEM",
                     help="the server's private key (with TLS)")
    net.add_argument("--grpc-root-cert", default="", metavar="PEM",
                     help="the certificate that signs client certificates (mutual TLS)")
    net.add_argument("--grpc-infer-response-compression-level", default="none",
                     choices=COMPRESSION_LEVELS, help="compression of inference responses")
    net.add_argument("--grpc-keepalive-time", type=int, default=7_200_000, metavar="MS")
    net.add_argument("--grpc-keepalive-timeout", type=int, default=20_000, metavar="MS")
    _add_flag(net, "--grpc-keepalive-permit-without-calls", False,
              "allow keepalive pings on connections without calls")
    net.add_argument("--grpc-http2-max-pings-without-data", type=int, default=2, metavar="N")
    net.add_argument("--grpc-http2-min-recv-ping-interval-without-data", type=int,
                     default=300_000, metavar="MS")
    net.add_argument("--grpc-http2-max-ping-strikes", type=int, default=2, metavar="N")
    net.add_argument("--grpc-max-connection-age", type=int, default=None, metavar="MS")
    net.add_argument("--grpc-max-connection-age-grace", type=int, default=None, metavar="MS")
    net.add_argument("--grpc-max-header-size", type=int, default=16 * 1024, metavar="BYTES",
                     help="the most bytes of metadata one gRPC request may send (names and "
                          "values, as HTTP/2 counts them); more is RESOURCE_EXHAUSTED "
                          "(naiad only; default 16 KiB, grpc's own limit)")
    net.add_argument("--grpc-idle-timeout", type=int, default=300_000, metavar="MS",
                     help="close a gRPC connection that has had no call in progress for this "
                          "long (clients reconnect on their next call); 0: never (naiad "
                          "only; default 300000, 5 minutes)")
    net.add_argument("--grpc-handshake-timeout", type=int, default=10_000, metavar="MS",
                     help="close a new gRPC connection that has not finished its handshake "
                          "(TLS, HTTP/2 preface and settings) in this time (naiad only; "
                          "default 10000)")
    net.add_argument("--grpc-message-timeout", type=int, default=60_000, metavar="MS",
                     help="cancel a unary gRPC call whose request message has not come in "
                          "full this long after the call started (a stalled client holds a "
                          "server thread meanwhile); 0: no limit (naiad only; default 60000)")
    _add_flag(net, "--allow-metrics", True, "serve Prometheus metrics")
    net.add_argument("--metrics-address", default="0.0.0.0")
    net.add_argument("--metrics-port", type=int, default=8002)
    _add_flag(net, "--allow-cpu-metrics", True, "report nv_cpu_* metrics")
    _add_flag(net, "--allow-gpu-metrics", True,
              "report nv_gpu_* metrics of the GPUs NVML sees (needs naiad[gpu])")
    net.add_argument("--metrics-config", action="append", default=[], metavar="KEY=VALUE",
                     help="a metrics setting (repeatable): Triton's counter_latencies, "
                          "summary_latencies, summary_quantiles, histogram_latencies, and "
                          "naiad's summary_max_age, naiad_histograms, naiad_latency_buckets_ms, "
                          "naiad_batch_size_buckets, naiad_summary_max_samples "
                          "(docs/metrics.md)")

    cache = serve.add_argument_group("response cache")
    cache.add_argument("--cache-config", action="append", default=[], type=_cache_config,
                       metavar="NAME,KEY=VALUE",
                       help="a setting of the response cache NAME, from the naiad-cache-NAME "
                            "plugin (local,size=BYTES; redis,host=...); repeatable, one cache")
    cache.add_argument("--response-cache-byte-size", type=int, default=0, metavar="BYTES",
                       help="tritonserver's older spelling of --cache-config "
                            "local,size=BYTES (default 0: no cache)")

    tracing = serve.add_argument_group("tracing (docs/tracing.md)")
    tracing.add_argument("--trace-config", action="append", default=[],
                         metavar="[MODE,]KEY=VALUE",
                         help="a trace setting (repeatable): level=OFF|TIMESTAMPS|TENSORS, "
                              "rate=N, count=N, mode=triton|opentelemetry; triton,file=PATH, "
                              "triton,log-frequency=N; opentelemetry,url=URL, "
                              "opentelemetry,resource=KEY=VALUE, opentelemetry,bsp_*=N")
    tracing.add_argument("--trace-file", metavar="PATH",
                         help="deprecated: --trace-config triton,file=PATH")
    tracing.add_argument("--trace-level", action="append", metavar="LEVEL",
                         help="deprecated: --trace-config level=LEVEL (repeatable)")
    tracing.add_argument("--trace-rate", metavar="N", help="deprecated: --trace-config rate=N")
    tracing.add_argument("--trace-count", metavar="N",
                         help="deprecated: --trace-config count=N")
    tracing.add_argument("--trace-log-frequency", metavar="N",
                         help="deprecated: --trace-config triton,log-frequency=N")

    process = serve.add_argument_group("process")
    _add_flag(process, "--sched-batch", True,
              "run the server's threads in Linux's SCHED_BATCH class (naiad only; fewer "
              "wasted context switches between threads that share the GIL)")

    log_flags = serve.add_argument_group("logging")
    log_flags.add_argument("--log-verbose", type=int, default=0, metavar="LEVEL",
                      help="verbose logging level (0 = off)")
    _add_flag(log_flags, "--log-info", True, "log informational messages")
    _add_flag(log_flags, "--log-warning", True, "log warnings")
    _add_flag(log_flags, "--log-error", True, "log errors")
    log_flags.add_argument("--log-format", choices=logs.LOG_FORMATS, default="default",
                      help="default: 'LMMDD hh:mm:ss.ffffff'; ISO8601: "
                           "'YYYY-MM-DDThh:mm:ssZ L'")
    log_flags.add_argument("--log-file", default="", metavar="PATH",
                      help="append the log to this file instead of standard error")

    plugins = serve.add_argument_group("plugins")
    plugins.add_argument("--plugin", action="append", default=[], metavar="NAME",
                         help="allow only these plugins to load (entry point or distribution "
                              "name; repeatable)")
    plugins.add_argument("--block-plugin", action="append", default=[], metavar="NAME",
                         help="never load this plugin (repeatable)")

    tritonserver_flags.add_flags(serve)
    # Installed frontend plugins (entry points "naiad.frontends": the OpenAI API) add theirs.
    frontend_plugins = PluginManager()
    frontend_plugins.load_frontends(check_permission=False)
    frontend_plugins.add_frontend_options(serve)

    commands.add_parser("plugins", help="list installed plugins per group")
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
    options = ServerOptions(
        model_repositories=args.model_repository,
        strict_model_config=args.strict_model_config,
        disable_auto_complete_config=args.disable_auto_complete_config,
        exit_on_error=args.exit_on_error,
        exit_timeout_secs=args.exit_timeout_secs,
        exit_grace_secs=args.exit_grace_secs,
        max_instances_per_model=args.max_instances_per_model,
        max_priority_levels=args.max_priority_levels,
        max_config_tensor_bytes=args.max_config_tensor_bytes,
        rate_limit=args.rate_limit,
        backend_directory=args.backend_directory,
        rate_limit_resources=[parse_resource_flag(v) for v in args.rate_limit_resource],
        model_load_progress_secs=args.model_load_progress_secs,
        strict_readiness=args.strict_readiness,
        model_control_mode=args.model_control_mode,
        load_models=args.load_model,
        backend_config=backend_config,
        plugins_allowed=args.plugin,
        plugins_blocked=args.block_plugin,
        max_input_size=args.http_max_input_size,
        max_response_size=args.max_response_size,
        load_files_directory=args.load_files_directory,
        load_files_max_size=args.load_files_max_size,
        freeze_heap=True,
        server_id=args.server_id,
        model_config_name=args.model_config_name,
        model_load_thread_count=args.model_load_thread_count,
        model_load_retry_count=args.model_load_retry_count,
        repository_poll_secs=args.repository_poll_secs,
        cache_name=cache_name,
        cache_settings=cache_settings,
        repository_mirror=MirrorSettings(
            **({"cache_dir": Path(args.repository_cache_dir).expanduser()}
               if args.repository_cache_dir else {}),
            max_bytes=args.repository_cache_max_bytes,
            download_threads=args.repository_download_threads,
            settle_s=args.repository_settle_secs),
        metrics=_metrics_config(args),
        trace=_trace_config(args)[0],
    )
    listeners = Listeners(
        http_address=args.http_address, http_port=args.http_port, allow_http=args.allow_http,
        grpc_address=args.grpc_address, grpc_port=args.grpc_port, allow_grpc=args.allow_grpc,
        metrics_address=args.metrics_address, metrics_port=args.metrics_port,
        allow_metrics=args.allow_metrics, http_server=args.http_server,
        allow_cpu_metrics=args.allow_cpu_metrics, allow_gpu_metrics=args.allow_gpu_metrics,
        reuse_http_port=args.reuse_http_port, frontend_processes=args.frontend_processes,
        http_header_forward_pattern=args.http_header_forward_pattern,
        frontend_options=args,
        http_restricted=parse_restrictions(args.http_restricted_api, "--http-restricted-api"),
        http_limits=HTTPLimits(
            max_header_size=args.http_max_header_size,
            max_header_count=args.http_max_header_count,
            keepalive_timeout=args.http_keepalive_timeout,
            header_timeout=args.http_header_timeout,
            body_timeout=args.http_body_timeout),
        grpc=GRPCOptions(
            reuse_port=args.reuse_grpc_port,
            use_ssl=args.grpc_use_ssl or args.grpc_use_ssl_mutual,
            use_ssl_mutual=args.grpc_use_ssl_mutual,
            server_cert=args.grpc_server_cert,
            server_key=args.grpc_server_key,
            root_cert=args.grpc_root_cert,
            infer_response_compression_level=args.grpc_infer_response_compression_level,
            keepalive_time_ms=args.grpc_keepalive_time,
            keepalive_timeout_ms=args.grpc_keepalive_timeout,
            keepalive_permit_without_calls=args.grpc_keepalive_permit_without_calls,
            http2_max_pings_without_data=args.grpc_http2_max_pings_without_data,
            http2_min_recv_ping_interval_without_data_ms=(
                args.grpc_http2_min_recv_ping_interval_without_data),
            http2_max_ping_strikes=args.grpc_http2_max_ping_strikes,
            max_connection_age_ms=args.grpc_max_connection_age,
            max_connection_age_grace_ms=args.grpc_max_connection_age_grace,
            max_header_size=args.grpc_max_header_size,
            idle_timeout_ms=args.grpc_idle_timeout,
            handshake_timeout_ms=args.grpc_handshake_timeout,
            message_timeout_ms=args.grpc_message_timeout,
            header_forward_pattern=args.grpc_header_forward_pattern,
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
    if args.load_model.count("*") and len(args.load_model) > 1:
        problems.append("--load-model=* must be the only --load-model")
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


# Commands other distributions add through the entry-point group "naiad.commands" (name ->
# main(argv) -> int), and the distribution that provides each known one.
COMMANDS_GROUP = "naiad.commands"
BUILTIN_COMMANDS = ("serve", "plugins")
KNOWN_COMMANDS = {"perf": ("naiad-perf", "./tools/naiad-perf"),
                  "analyze": ("naiad-perf", "./tools/naiad-perf")}


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
        distribution, folder = KNOWN_COMMANDS[args[0]]
        print(f"naiad: '{args[0]}' is provided by the {distribution} distribution, which is "
              f"not installed: pip install {distribution} (from a checkout: pip install "
              f"{folder})", file=sys.stderr)
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
