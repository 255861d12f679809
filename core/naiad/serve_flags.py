"""Every flag of ``naiad serve``, written once: this table makes the command line's parser
(:func:`add_flags`), fills the server's options (:func:`option_values`: each flag's
``option`` names the field it sets) and renders the user guide's flag table
(:func:`markdown_table`; ``tests/core/test_serve_flags.py`` keeps docs/user-guide.md equal).

Adding a flag is one row. A row whose ``option`` is ``"server.FIELD"`` (``ServerOptions``),
``"load.FIELD"`` (its ``load``: ``naiad.models.records.LoadOptions``), ``"limits.FIELD"``
(the load's ``limits``: ``naiad.models.limits.ConfigLimits``), ``"mirror.FIELD"`` (its
``repository_mirror``), ``"listeners.FIELD"`` (``naiad.serve.Listeners``),
``"http_limits.FIELD"`` or ``"grpc.FIELD"`` needs nothing else in ``naiad.cli``; a row without
one is read by code of its own there (a value turned into something else first). The
dataclass field it fills keeps the default the table gives (a test checks both agree).

tritonserver's flags that change nothing or are refused are :mod:`naiad.tritonserver_flags`';
frontend plugins add theirs through the ``naiad_frontend_options`` hook.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from naiad import logs
from naiad.frontends.grpc.options import COMPRESSION_LEVELS, GRPC_SERVERS
from naiad.frontends.http.limits import HTTPLimits
from naiad.frontends.http.listener import HTTP_SERVERS
from naiad.models.limits import (
    DEFAULT_MAX_CONFIG_TENSOR_BYTES,
    DEFAULT_MAX_INSTANCES,
    DEFAULT_MAX_PRIORITY_LEVELS,
)
from naiad.models.progress import DEFAULT_PROGRESS_S
from naiad.models.staging import DEFAULT_MAX_BYTES
from naiad.plugins import DEFAULT_BACKEND_DIRECTORY
from naiad.scheduling.rate_limiter import MODES as RATE_LIMIT_MODES
from naiad.scheduling.worker import DEFAULT_LOOP_EXECUTION_MAX_US
from naiad.server_options import MIB
from naiad.shm import DEFAULT_MAX_REGIONS as DEFAULT_MAX_SHM_REGIONS
from naiad.tritonserver_flags import parse_bool

# The groups of ``naiad serve --help``, in order.
SERVER = "server"
MODEL_REPOSITORY = "model repository"
LISTENERS = "listeners"
RESPONSE_CACHE = "response cache"
TRACING = "tracing (docs/tracing.md)"
PROCESS = "process"
LOGGING = "logging"
PLUGINS = "plugins"
GROUPS = (SERVER, MODEL_REPOSITORY, LISTENERS, RESPONSE_CACHE, TRACING, PROCESS, LOGGING,
          PLUGINS)
#: Where a flag's value goes: the objects :func:`option_values` fills.
TARGETS = ("server", "load", "limits", "listeners", "http_limits", "grpc", "mirror")


def _backend_config(value: str) -> tuple[str, str, str]:
    """``NAME,KEY=VALUE`` (``KEY=VALUE`` alone is a setting for every backend)."""
    name, _, setting = value.partition(",") if "," in value else ("", "", value)
    key, eq, val = setting.partition("=")
    if not eq or not key:
        raise argparse.ArgumentTypeError(f"expected NAME,KEY=VALUE, got '{value}'")
    return name, key, val


def _at_least_one(value: str) -> int:
    """A count that must be 1 or more."""
    count = int(value)
    if count < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {count}")
    return count


def _count_or_zero(value: str) -> int:
    """A count from 0 (no bound) to 2**31 - 1."""
    count = int(value)
    if not 0 <= count <= 2**31 - 1:
        raise argparse.ArgumentTypeError(f"must be from 0 to {2**31 - 1}, got {count}")
    return count


def _cache_config(value: str) -> tuple[str, str, str]:
    """``NAME,KEY=VALUE``: one setting of the response cache NAME."""
    name, comma, setting = value.partition(",")
    key, eq, val = setting.partition("=")
    if not (name and comma and key and eq):
        raise argparse.ArgumentTypeError(f"expected NAME,KEY=VALUE (for example "
                                         f"local,size=1048576), got '{value}'")
    return name.strip(), key.strip(), val.strip()


@dataclass(frozen=True)
class Flag:
    """One flag: its names, ``--help`` group and text, how its value is read, and the
    option it sets."""

    names: tuple[str, ...]
    group: str
    #: "value" (one value), "switch" (tritonserver's BOOL: ``--flag`` alone is true,
    #: ``--flag=false``), "true" (present or not), "append" (repeatable)
    kind: str = "value"
    dest: str | None = None
    default: Any = None
    type: Callable[[str], Any] | None = None
    choices: Sequence[str] | None = None
    metavar: str | None = None
    #: "TARGET.FIELD" (see :data:`TARGETS`), or None: read by ``naiad.cli`` itself
    option: str | None = None
    help: str | None = None
    #: one of the most used flags: ``naiad serve --help`` shows it (``--help-all``: every flag)
    common: bool = False

    @property
    def key(self) -> str:
        """The attribute of the parsed arguments that holds the value."""
        return self.dest or self.names[0].lstrip("-").replace("-", "_")

    def add_to(self, group: argparse._ArgumentGroup) -> None:
        """Add this flag to ``group`` of the ``naiad serve`` parser."""
        settings: dict[str, Any] = {"default": self.default, "help": help_text(self)}
        if self.dest:
            settings["dest"] = self.dest
        if self.kind == "switch":
            settings.update(type=parse_bool, nargs="?", const=True, metavar="BOOL")
        elif self.kind == "true":
            settings.update(action="store_true")
            del settings["default"]
        else:
            if self.kind == "append":
                settings["action"] = "append"
            for name in ("type", "choices", "metavar"):
                if getattr(self, name) is not None:
                    settings[name] = getattr(self, name)
        group.add_argument(*self.names, **settings)


FLAGS: tuple[Flag, ...] = (
    Flag(("--id",), SERVER, dest="server_id", default="naiad", metavar="NAME",
         option="server.server_id",
         help="the server's name in its metadata (default naiad)"),
    Flag(("--model-repository", "--model-store"), MODEL_REPOSITORY, common=True, kind="append",
         dest="model_repository", default=[], metavar="PATH", option="server.model_repositories",
         help="a model repository (repeatable)"),
    Flag(("--strict-model-config",), MODEL_REPOSITORY, common=True, kind="switch", default=False,
         option="load.strict_model_config",
         help="require a complete config.pbtxt; no auto-complete"),
    Flag(("--disable-auto-complete-config",), MODEL_REPOSITORY, kind="true",
         option="load.disable_auto_complete_config",
         help="do not let backends fill in missing configuration"),
    Flag(("--model-control-mode",), MODEL_REPOSITORY, common=True, default="none",
         choices=("none", "explicit", "poll"), option="server.model_control_mode",
         help="none: load everything at start; explicit: load and unload through the "
              "repository API; poll: follow the repositories' changes"),
    Flag(("--repository-poll-secs",), MODEL_REPOSITORY, default=15, type=int, metavar="SECONDS",
         option="server.repository_poll_secs",
         help="with poll control: seconds between two scans (default 15)"),
    Flag(("--repository-cache-dir",), MODEL_REPOSITORY, default="", metavar="PATH",
         help="where remote repositories (s3://, gs://, as://) are mirrored: a "
              "content-addressed store and the model folders (default "
              "$XDG_CACHE_HOME/naiad/repositories or ~/.cache/naiad/repositories)"),
    Flag(("--repository-cache-max-bytes",), MODEL_REPOSITORY, default=10 * 1024**3, type=int,
         metavar="BYTES", option="mirror.max_bytes",
         help="bound of that store: files no mirrored model uses are evicted past it (default "
              "10 GiB)"),
    Flag(("--repository-download-threads",), MODEL_REPOSITORY, default=8, type=int, metavar="N",
         option="mirror.download_threads",
         help="files downloaded at the same time per remote repository (default 8)"),
    Flag(("--repository-settle-secs",), MODEL_REPOSITORY, default=1.0, type=float,
         metavar="SECONDS", option="mirror.settle_s",
         help="a changed remote model is loaded only when two listings this far apart agree on "
              "its files (default 1; poll mode compares polls)"),
    Flag(("--model-config-name",), MODEL_REPOSITORY, default="", metavar="NAME",
         option="load.config_name",
         help="load <model>/configs/NAME.pbtxt instead of config.pbtxt where it exists"),
    Flag(("--model-load-thread-count",), MODEL_REPOSITORY, default=4, type=int, metavar="N",
         option="load.load_thread_count",
         help="models loaded at the same time (default 4)"),
    Flag(("--model-load-retry-count",), MODEL_REPOSITORY, default=0, type=int, metavar="N",
         option="load.load_retry_count",
         help="how often a failed model load is tried again (default 0)"),
    Flag(("--load-model",), MODEL_REPOSITORY, common=True, kind="append", default=[],
         metavar="NAME",
         option="server.load_models",
         help="with explicit control: a model to load at start ('*' = all)"),
    Flag(("--backend-config",), MODEL_REPOSITORY, common=True, kind="append", default=[],
         type=_backend_config, metavar="NAME,KEY=VALUE",
         help="a setting for one backend (repeatable)"),
    Flag(("--exit-on-error",), MODEL_REPOSITORY, common=True, kind="switch", default=True,
         option="server.exit_on_error",
         help="fail start-up when a model fails to load"),
    Flag(("--strict-readiness",), MODEL_REPOSITORY, common=True, kind="switch", default=True,
         option="server.strict_readiness",
         help="ready only when no model has failed to load, in every --model-control-mode (a "
              "model unloaded on purpose, or whose config does not parse, does not count)"),
    Flag(("--exit-timeout-secs",), MODEL_REPOSITORY, default=30, type=int, metavar="SECONDS",
         option="server.exit_timeout_secs",
         help="how long shutdown waits for in-flight requests (default 30)"),
    Flag(("--exit-grace-secs",), MODEL_REPOSITORY, default=10.0, type=float, metavar="SECONDS",
         option="server.exit_grace_secs",
         help="past --exit-timeout-secs: how long ending the requests left, unloading and "
              "closing the listeners may take before the process exits anyway, naming the "
              "models still running (naiad only; default 10)"),
    Flag(("--max-instances-per-model",), MODEL_REPOSITORY, default=DEFAULT_MAX_INSTANCES,
         type=int, metavar="N", option="limits.max_instances",
         help="the most instances one model version may have; a larger instance_group fails to "
              "load (naiad only; default 64)"),
    Flag(("--max-priority-levels",), MODEL_REPOSITORY, default=DEFAULT_MAX_PRIORITY_LEVELS,
         type=int, metavar="N", option="limits.max_priority_levels",
         help="the most dynamic_batching priority_levels a model may have; more fails its load "
              "(naiad only; default 1000)"),
    Flag(("--max-shared-memory-regions",), SERVER, default=DEFAULT_MAX_SHM_REGIONS,
         type=_at_least_one, metavar="N", option="server.max_shared_memory_regions",
         help="the most system shared memory regions registered at once (each holds a file "
              "descriptor); one more is refused RESOURCE_EXHAUSTED (naiad only; default 1024)"),
    Flag(("--backend-directory",), MODEL_REPOSITORY, default=DEFAULT_BACKEND_DIRECTORY,
         metavar="PATH", option="server.backend_directory",
         help="where Triton's Python-based backends live (PATH/NAME/model.py serves models "
              'with backend: "NAME"); other backends are installed naiad plugins (default '
              "/opt/tritonserver/backends)"),
    Flag(("--rate-limit",), MODEL_REPOSITORY, default="off", type=str.lower,
         choices=RATE_LIMIT_MODES, option="load.rate_limit",
         help="execution_count: an instance runs only while the resources its instance_group's "
              "rate_limiter names are free (default off)"),
    Flag(("--rate-limit-resource",), MODEL_REPOSITORY, kind="append", default=[],
         metavar="NAME:COUNT[:DEVICE]",
         help="how many of a rate limiter resource there are, on DEVICE or on every device and "
              "globally (repeatable; default: the most one instance needs)"),
    Flag(("--max-config-tensor-bytes",), MODEL_REPOSITORY,
         default=DEFAULT_MAX_CONFIG_TENSOR_BYTES, type=int, metavar="BYTES",
         option="limits.max_tensor_bytes",
         help="the most bytes of a tensor built from a model configuration (a model_warmup "
              "sample with its batch, a sequence state's initial value); larger fails the load "
              "(naiad only; default 256 MiB)"),
    Flag(("--model-load-progress-secs",), MODEL_REPOSITORY, default=DEFAULT_PROGRESS_S,
         type=float, metavar="SECONDS", option="load.progress_s",
         help="a slow load step (configuration, initialize, warmup, repository download) logs "
              "that it still runs this often; 0: never (naiad only; default 10)"),
    Flag(("--load-files-directory",), MODEL_REPOSITORY, default="", metavar="PATH",
         option="server.load_files_directory",
         help="where models deployed through the load API (file: parameters) are written, each "
              "load in a private folder removed when no version uses it, all at shutdown "
              "(naiad only; default: the system's temporary directory)"),
    Flag(("--load-files-max-size",), MODEL_REPOSITORY, default=DEFAULT_MAX_BYTES, type=int,
         metavar="BYTES", option="server.load_files_max_size",
         help="the most bytes the file: parameters of one load request may hold; 0 refuses "
              "every such load (naiad only; default 1 GiB)"),
    Flag(("--allow-http",), LISTENERS, kind="switch", default=True,
         option="listeners.allow_http",
         help="serve HTTP/REST"),
    Flag(("--http-address",), LISTENERS, common=True, default="0.0.0.0", metavar="ADDRESS",
         option="listeners.http_address"),
    Flag(("--http-port",), LISTENERS, common=True, default=8000, type=int, metavar="PORT",
         option="listeners.http_port"),
    Flag(("--reuse-http-port",), LISTENERS, kind="switch", default=False,
         option="listeners.reuse_http_port",
         help="let other servers listen on the same HTTP port (SO_REUSEPORT)"),
    Flag(("--http-header-forward-pattern",), LISTENERS, default="", metavar="REGEX",
         option="listeners.http_header_forward_pattern",
         help="HTTP headers whose names match become request parameters"),
    Flag(("--http-restricted-api",), LISTENERS, kind="append", default=[],
         metavar="API,...:KEY=VALUE",
         help="requests to these APIs need header KEY=VALUE (repeatable)"),
    Flag(("--frontend-processes",), LISTENERS, default=0, type=int, metavar="COUNT",
         option="listeners.frontend_processes",
         help="serve HTTP and gRPC from COUNT processes that forward every request to this "
              "one, which holds the models (0: this process serves them; naiad only; "
              "docs/operations.md)"),
    Flag(("--http-server",), LISTENERS, default="uvicorn", choices=HTTP_SERVERS,
         option="listeners.http_server",
         help="the ASGI server for HTTP (default uvicorn: the faster one measured in "
              "benchmarks/)"),
    Flag(("--http-max-input-size",), LISTENERS, default=64 * MIB, type=int, metavar="BYTES",
         option="server.max_input_size",
         help="largest request accepted, after decompression, HTTP and gRPC (default 64 MiB)"),
    Flag(("--max-response-size",), LISTENERS, default=128 * MIB, type=int, metavar="BYTES",
         option="server.max_response_size",
         help="largest inference response a frontend builds, HTTP (JSON and binary data "
              "together) and gRPC; a larger answer is refused (HTTP 413, gRPC "
              "RESOURCE_EXHAUSTED) naming the model, output and size: ask for binary or "
              "shared-memory outputs, or raise it (naiad only; default 128 MiB, the binary "
              "answer of an identity model to a 64 MiB input fits)"),
    Flag(("--http-max-header-size",), LISTENERS, default=HTTPLimits.max_header_size, type=int,
         metavar="BYTES", option="http_limits.max_header_size",
         help="largest request line and header fields of one HTTP request together; more is "
              "refused with 431 and the connection closed (naiad only; default 64 KiB)"),
    Flag(("--http-max-header-count",), LISTENERS, default=HTTPLimits.max_header_count, type=int,
         metavar="N", option="http_limits.max_header_count",
         help="most header fields of one HTTP request; more is refused with 431 (naiad only; "
              "default 100)"),
    Flag(("--http-keepalive-timeout",), LISTENERS, default=HTTPLimits.keepalive_timeout,
         type=float, metavar="SECONDS", option="http_limits.keepalive_timeout",
         help="an HTTP connection idle this long between requests is closed. Longer than the "
              "idle timeout of the proxies and load balancers that usually sit in front (60 s "
              "for AWS ALB and ingress-nginx), so that they, not naiad, close idle connections "
              "and never send a request on one naiad is closing; lower it when clients connect "
              "directly (naiad only; default 75)"),
    Flag(("--http-header-timeout",), LISTENERS, default=HTTPLimits.header_timeout, type=float,
         metavar="SECONDS", option="http_limits.header_timeout",
         help="an HTTP request must deliver its request line and headers within this long from "
              "its first byte, a new connection within this long from its accept (slow-header "
              "attacks); else 408 and the connection closed; hypercorn bounds that wait by "
              "--http-keepalive-timeout instead (naiad only; default 10)"),
    Flag(("--http-body-timeout",), LISTENERS, default=HTTPLimits.body_timeout, type=float,
         metavar="SECONDS", option="http_limits.body_timeout",
         help="an HTTP request body that is incomplete and receives no byte for this long (an "
              "inactivity timeout: a large body on a slow link passes as long as it moves) is "
              "answered 408 and the connection closed (naiad only; default 30)"),
    Flag(("--allow-grpc",), LISTENERS, kind="switch", default=True,
         option="listeners.allow_grpc",
         help="serve gRPC"),
    Flag(("--grpc-address",), LISTENERS, default="0.0.0.0", metavar="ADDRESS",
         option="listeners.grpc_address"),
    Flag(("--grpc-port",), LISTENERS, common=True, default=8001, type=int, metavar="PORT",
         option="listeners.grpc_port"),
    Flag(("--reuse-grpc-port",), LISTENERS, kind="switch", default=False,
         option="grpc.reuse_port",
         help="let other servers listen on the same gRPC port (SO_REUSEPORT)"),
    Flag(("--grpc-header-forward-pattern",), LISTENERS, default="", metavar="REGEX",
         option="grpc.header_forward_pattern",
         help="gRPC headers whose names match become request parameters"),
    Flag(("--grpc-restricted-protocol",), LISTENERS, kind="append", default=[],
         metavar="API,...:KEY=VALUE",
         help="requests to these APIs need header triton-grpc-protocol-KEY=VALUE (repeatable)"),
    Flag(("--grpc-use-ssl",), LISTENERS, kind="switch", default=False,
         help="serve gRPC over TLS"),
    Flag(("--grpc-use-ssl-mutual",), LISTENERS, kind="switch", default=False,
         option="grpc.use_ssl_mutual",
         help="serve gRPC over TLS and require client certificates signed by --grpc-root-cert"),
    Flag(("--grpc-server-cert",), LISTENERS, default="", metavar="PEM",
         option="grpc.server_cert",
         help="the server certificate (with TLS)"),
    Flag(("--grpc-server-key",), LISTENERS, default="", metavar="PEM", option="grpc.server_key",
         help="the server's private key (with TLS)"),
    Flag(("--grpc-root-cert",), LISTENERS, default="", metavar="PEM", option="grpc.root_cert",
         help="the certificate that signs client certificates (mutual TLS)"),
    Flag(("--grpc-infer-response-compression-level",), LISTENERS, default="none",
         choices=COMPRESSION_LEVELS, option="grpc.infer_response_compression_level",
         help="compression of inference responses"),
    Flag(("--grpc-keepalive-time",), LISTENERS, default=7_200_000, type=int, metavar="MS",
         option="grpc.keepalive_time_ms"),
    Flag(("--grpc-keepalive-timeout",), LISTENERS, default=20_000, type=int, metavar="MS",
         option="grpc.keepalive_timeout_ms"),
    Flag(("--grpc-keepalive-permit-without-calls",), LISTENERS, kind="switch", default=False,
         option="grpc.keepalive_permit_without_calls",
         help="allow keepalive pings on connections without calls"),
    Flag(("--grpc-http2-max-pings-without-data",), LISTENERS, default=2, type=int, metavar="N",
         option="grpc.http2_max_pings_without_data"),
    Flag(("--grpc-http2-min-recv-ping-interval-without-data",), LISTENERS, default=300_000,
         type=int, metavar="MS", option="grpc.http2_min_recv_ping_interval_without_data_ms"),
    Flag(("--grpc-http2-max-ping-strikes",), LISTENERS, default=2, type=int, metavar="N",
         option="grpc.http2_max_ping_strikes"),
    Flag(("--grpc-max-connection-age",), LISTENERS, default=None, type=int, metavar="MS",
         option="grpc.max_connection_age_ms"),
    Flag(("--grpc-max-connection-age-grace",), LISTENERS, default=None, type=int, metavar="MS",
         option="grpc.max_connection_age_grace_ms"),
    Flag(("--grpc-max-header-size",), LISTENERS, default=16 * 1024, type=int, metavar="BYTES",
         option="grpc.max_header_size",
         help="the most bytes of metadata one gRPC request may send (names and values, as "
              "HTTP/2 counts them); more is RESOURCE_EXHAUSTED (naiad only; default 16 KiB, "
              "grpc's own limit)"),
    Flag(("--grpc-idle-timeout",), LISTENERS, default=300_000, type=int, metavar="MS",
         option="grpc.idle_timeout_ms",
         help="close a gRPC connection that has had no call in progress for this long (clients "
              "reconnect on their next call); 0: never (naiad only; default 300000, 5 minutes)"),
    Flag(("--grpc-handshake-timeout",), LISTENERS, default=10_000, type=int, metavar="MS",
         option="grpc.handshake_timeout_ms",
         help="close a new gRPC connection that has not finished its handshake (TLS, HTTP/2 "
              "preface and settings) in this time (naiad only; default 10000)"),
    Flag(("--grpc-message-timeout",), LISTENERS, default=60_000, type=int, metavar="MS",
         option="grpc.message_timeout_ms",
         help="cancel a unary gRPC call whose request message has not come in full this long "
              "after the call started (a stalled client holds a server thread meanwhile); 0: "
              "no limit (naiad only; default 60000)"),
    Flag(("--grpc-max-streams",), LISTENERS, default=1024, type=_count_or_zero,
         metavar="STREAMS", option="grpc.max_streams",
         help="the most ModelStreamInfer calls open at once (on --grpc-server=grpcio each "
              "holds a server thread); more are refused "
              "RESOURCE_EXHAUSTED, and other calls always keep threads of their own; 0: no "
              "bound (naiad only; default 1024)"),
    Flag(("--grpc-server",), LISTENERS, default="naiad", choices=GRPC_SERVERS,
         option="grpc.server",
         help="what serves gRPC: naiad, naiad's own HTTP/2 server on the event loop, which "
              "answers ModelInfer without a thread hand-off, or grpcio, grpc's Python server "
              "(about twice the CPU per call: docs/design.md; naiad only; default naiad)"),
    Flag(("--grpc-stream-idle-timeout",), LISTENERS, default=0, type=_count_or_zero,
         metavar="MS", option="grpc.stream_idle_timeout_ms",
         help="end a ModelStreamInfer call (UNAVAILABLE) that has had no request in flight "
              "and sent none for this long; 0: never, as tritonserver (naiad only)"),
    Flag(("--stream-max-buffered-responses",), LISTENERS, default=1024,
         type=_count_or_zero, metavar="RESPONSES",
         option="server.stream_max_buffered_responses",
         help="responses one gRPC stream or HTTP generate_stream request may hold for a "
              "client that does not read them; beyond, the stream ends with an error naming "
              "this flag and its requests are cancelled; 0: no bound (naiad only; default "
              "1024)"),
    Flag(("--stream-max-buffered-responses-total",), LISTENERS, default=4096,
         type=_count_or_zero, metavar="RESPONSES",
         option="server.stream_max_buffered_responses_total",
         help="responses all streams together may hold for clients that do not read; "
              "beyond, the stream holding the most ends as above; 0: no bound (naiad only; "
              "default 4096)"),
    Flag(("--allow-metrics",), LISTENERS, kind="switch", default=True,
         option="listeners.allow_metrics",
         help="serve Prometheus metrics"),
    Flag(("--metrics-address",), LISTENERS, default="0.0.0.0", metavar="ADDRESS",
         option="listeners.metrics_address"),
    Flag(("--metrics-port",), LISTENERS, common=True, default=8002, type=int, metavar="PORT",
         option="listeners.metrics_port"),
    Flag(("--allow-cpu-metrics",), LISTENERS, kind="switch", default=True,
         option="listeners.allow_cpu_metrics",
         help="report nv_cpu_* metrics"),
    Flag(("--allow-gpu-metrics",), LISTENERS, kind="switch", default=True,
         option="listeners.allow_gpu_metrics",
         help="report nv_gpu_* metrics of the GPUs NVML sees (needs naiad[gpu])"),
    Flag(("--metrics-config",), LISTENERS, kind="append", default=[], metavar="KEY=VALUE",
         help="a metrics setting (repeatable): Triton's counter_latencies, summary_latencies, "
              "summary_quantiles, histogram_latencies, and naiad's summary_max_age, "
              "naiad_histograms, naiad_latency_buckets_ms, naiad_batch_size_buckets, "
              "naiad_summary_max_samples (docs/metrics.md)"),
    Flag(("--cache-config",), RESPONSE_CACHE, common=True, kind="append", default=[],
         type=_cache_config,
         metavar="NAME,KEY=VALUE",
         help="a setting of the response cache NAME, from the naiad-cache-NAME plugin "
              "(local,size=BYTES; redis,host=...); repeatable, one cache"),
    Flag(("--response-cache-byte-size",), RESPONSE_CACHE, default=0, type=int, metavar="BYTES",
         help="tritonserver's older spelling of --cache-config local,size=BYTES (default 0: no "
              "cache)"),
    Flag(("--trace-config",), TRACING, common=True, kind="append", default=[],
         metavar="[MODE,]KEY=VALUE",
         help="a trace setting (repeatable): level=OFF|TIMESTAMPS|TENSORS, rate=N, count=N, "
              "mode=triton|opentelemetry; triton,file=PATH, triton,log-frequency=N; "
              "opentelemetry,url=URL, opentelemetry,resource=KEY=VALUE, opentelemetry,bsp_*=N"),
    Flag(("--trace-file",), TRACING, metavar="PATH",
         help="deprecated: --trace-config triton,file=PATH"),
    Flag(("--trace-level",), TRACING, kind="append", metavar="LEVEL",
         help="deprecated: --trace-config level=LEVEL (repeatable)"),
    Flag(("--trace-rate",), TRACING, metavar="N",
         help="deprecated: --trace-config rate=N"),
    Flag(("--trace-count",), TRACING, metavar="N",
         help="deprecated: --trace-config count=N"),
    Flag(("--trace-log-frequency",), TRACING, metavar="N",
         help="deprecated: --trace-config triton,log-frequency=N"),
    Flag(("--loop-execution-max-usecs",), PROCESS, default=DEFAULT_LOOP_EXECUTION_MAX_US,
         type=_count_or_zero, metavar="MICROSECONDS", option="load.loop_execution_max_us",
         help="run a batch of an instance that may run on any thread (ONNX Runtime on the CPU) "
              "on the event loop, not its thread, when its recent batches took at most this "
              "long; 0: never (naiad only; docs/design.md)"),
    Flag(("--sched-batch",), PROCESS, kind="switch", default=True,
         help="run the server's threads in Linux's SCHED_BATCH class (naiad only; fewer wasted "
              "context switches between threads that share the GIL)"),
    Flag(("--log-verbose",), LOGGING, common=True, default=0, type=int, metavar="LEVEL",
         help="verbose logging level (0 = off)"),
    Flag(("--log-info",), LOGGING, kind="switch", default=True,
         help="log informational messages"),
    Flag(("--log-warning",), LOGGING, kind="switch", default=True,
         help="log warnings"),
    Flag(("--log-error",), LOGGING, kind="switch", default=True,
         help="log errors"),
    Flag(("--log-format",), LOGGING, default="default", choices=logs.LOG_FORMATS,
         help="default: 'LMMDD hh:mm:ss.ffffff'; ISO8601: 'YYYY-MM-DDThh:mm:ssZ L'"),
    Flag(("--log-file",), LOGGING, common=True, default="", metavar="PATH",
         help="append the log to this file instead of standard error"),
    Flag(("--plugin",), PLUGINS, kind="append", default=[], metavar="NAME",
         option="server.plugins_allowed",
         help="allow only these plugins to load (entry point or distribution name; repeatable)"),
    Flag(("--block-plugin",), PLUGINS, kind="append", default=[], metavar="NAME",
         option="server.plugins_blocked",
         help="never load this plugin (repeatable)"),
)


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Every flag of the table, in its group, in the table's order."""
    groups = {title: parser.add_argument_group(title) for title in GROUPS}
    for flag in FLAGS:
        flag.add_to(groups[flag.group])


def option_values(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """For each of :data:`TARGETS`, the fields the parsed ``args`` set: the values of the
    flags whose ``option`` names that target."""
    values: dict[str, dict[str, Any]] = {target: {} for target in TARGETS}
    for flag in FLAGS:
        if flag.option is not None:
            target, _, field = flag.option.partition(".")
            values[target][field] = getattr(args, flag.key)
    return values


def _shown_default(flag: Flag) -> str:
    if flag.kind == "true":
        return "off"
    if flag.default in (None, "", []):
        return ""
    if isinstance(flag.default, bool):
        return str(flag.default).lower()
    if isinstance(flag.default, int) and flag.default >= MIB and flag.default % MIB == 0:
        if flag.default % (1024 * MIB) == 0:
            return f"{flag.default // (1024 * MIB)} GiB"
        return f"{flag.default // MIB} MiB"
    return str(flag.default)


def help_text(flag: Flag) -> str:
    """The flag's ``--help`` line: its text, and its default where the text does not give
    one already (ports, ``--model-control-mode``, switches: every flag that has one)."""
    text = flag.help or ""
    shown = _shown_default(flag)
    if not shown or flag.kind == "true" or "default" in text:
        return text
    return f"{text} (default {shown})" if text else f"default {shown}"


# ---- naiad serve --help (the common flags) and --help-all (every flag) ----

HELP_ALL = "--help-all"


class _HelpAction(argparse.Action):
    """Print the short (``-h``, ``--help``) or the full (``--help-all``) help and exit."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 every_flag: bool = False, help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0,
                         help=help)
        self.every_flag = every_flag

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        text = parser.format_help() if self.every_flag else short_help(parser)
        parser._print_message(text, sys.stdout)
        parser.exit()


def add_help_flags(parser: argparse.ArgumentParser) -> None:
    """``-h``/``--help`` (the most used flags, by group) and ``--help-all`` (every flag,
    tritonserver's inert ones and the frontend plugins' too); the parser needs
    ``add_help=False``."""
    parser.add_argument("-h", "--help", action=_HelpAction,
                        help="show the most used flags and exit")
    parser.add_argument(HELP_ALL, action=_HelpAction, every_flag=True,
                        help="show every flag and exit")


def short_help(parser: argparse.ArgumentParser) -> str:
    """``naiad serve --help``: the rows marked ``common``, in their groups, then how many
    more there are and where they are listed (the full list runs to hundreds of lines)."""
    common = {name for flag in FLAGS if flag.common for name in flag.names}
    helps = {action for action in parser._actions if isinstance(action, _HelpAction)}
    formatter = parser._get_formatter()
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    formatter.add_text(parser.description)
    left = 0
    for group in parser._action_groups:
        shown = [action for action in group._group_actions
                 if action in helps or common & set(action.option_strings)]
        left += len(group._group_actions) - len(shown)
        if shown:
            formatter.start_section(group.title)
            formatter.add_arguments(shown)
            formatter.end_section()
    formatter.add_text(f"{left} more flags (limits, timeouts, TLS, tuning, tracing details, "
                       f"tritonserver's flags that change nothing here, installed frontends'): "
                       f"'naiad serve {HELP_ALL}' lists every flag; docs/user-guide.md#flags "
                       f"has them as a table.")
    return formatter.format_help()


def markdown_table() -> str:
    """The user guide's flag table: one row per flag, its ``--help`` text as the meaning."""
    lines = ["| flag | default | meaning |", "|---|---|---|"]
    for flag in FLAGS:
        names = ", ".join(f"`{name}`" for name in flag.names)
        meaning = (flag.help or "").replace("|", "\\|")
        lines.append(f"| {names} | {_shown_default(flag)} | {meaning} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # python -m naiad.serve_flags: the user guide's table
    print(markdown_table(), end="")
