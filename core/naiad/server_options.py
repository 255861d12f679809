"""Every setting of the server (:class:`ServerOptions`), with Triton's flag names and
defaults; ``naiad serve`` fills it from the command line (naiad.cli)."""

from __future__ import annotations

from dataclasses import dataclass, field

from naiad.models.records import LoadOptions
from naiad.models.staging import DEFAULT_MAX_BYTES
from naiad.repository.mirror import MirrorSettings
from naiad.shm import DEFAULT_MAX_REGIONS as DEFAULT_MAX_SHM_REGIONS
from naiad.tracing import TraceConfig

MIB = 1024 * 1024


@dataclass
class ServerOptions:
    """Every setting of the server, with Triton's flag names and defaults."""

    model_repositories: list[str] = field(default_factory=list)
    # How models load: configuration completion, --backend-config, load threads and
    # retries, the bounds on a configuration, progress lines, latency metrics, the rate
    # limiter (naiad.models.records).
    load: LoadOptions = field(default_factory=LoadOptions)
    exit_on_error: bool = True
    exit_timeout_secs: int = 30
    # naiad only: past --exit-timeout-secs, how long ending the requests left, unloading and
    # closing the listeners may take before the process exits anyway (naiad.lifetime).
    exit_grace_secs: float = 10.0
    # naiad only: the most system shared memory regions registered at once (naiad.shm).
    max_shared_memory_regions: int = DEFAULT_MAX_SHM_REGIONS
    # --backend-directory: Triton's Python-based backends (DIR/NAME/model.py)
    backend_directory: str = "/opt/tritonserver/backends"
    strict_readiness: bool = True
    model_control_mode: str = "none"
    load_models: list[str] = field(default_factory=list)
    plugins_allowed: list[str] = field(default_factory=list)
    plugins_blocked: list[str] = field(default_factory=list)
    # Triton's --http-max-input-size: the largest request body, after decompression.
    max_input_size: int = 64 * MIB
    # naiad only (--max-response-size): the largest inference response body a frontend
    # builds, in bytes (HTTP: JSON and binary data together; gRPC: the serialized
    # message). A larger answer is refused with RESOURCE_EXHAUSTED naming the setting; the
    # default lets a binary identity answer to a 64 MiB input through.
    max_response_size: int = 128 * MIB
    # naiad only (--stream-max-buffered-responses, --stream-max-buffered-responses-total):
    # responses a streaming frontend (gRPC ModelStreamInfer, HTTP generate_stream) holds for
    # a client that does not read, per stream and for all streams; 0: no bound
    # (naiad.frontends.stream_buffer).
    stream_max_buffered_responses: int = 1024
    stream_max_buffered_responses_total: int = 4096
    # naiad only: models deployed through the load API (``file:`` parameters) are written
    # under this directory ("": the system's temporary directory), at most this many bytes
    # per load request (naiad.models.staging).
    load_files_directory: str = ""
    load_files_max_size: int = DEFAULT_MAX_BYTES
    # naiad only (``naiad serve`` sets it): keep what the models loaded out of the garbage
    # collector's full passes, see InferenceServer.settle_heap.
    freeze_heap: bool = False
    # --id: the server's name in its metadata (Triton's default is "triton").
    server_id: str = "naiad"
    # Where and how remote repositories (s3://, gs://, as://) are mirrored.
    repository_mirror: MirrorSettings = field(default_factory=MirrorSettings)
    # --model-control-mode=poll: seconds between two scans of the repositories.
    repository_poll_secs: int = 15
    # --cache-config NAME,KEY=VALUE: the response cache's plugin name and its settings
    # ("" for none; models enable it with response_cache { enable: true }).
    cache_name: str = ""
    cache_settings: dict[str, str] = field(default_factory=dict)
    # --trace-config (and the older --trace-* flags): request tracing (naiad.tracing).
    trace: TraceConfig = field(default_factory=TraceConfig)
