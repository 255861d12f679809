"""PyTriton's server API (``pytriton.triton``) on naiad: ``Triton`` starts ``naiad serve``
as a child process on PyTriton's default ports; ``RemoteTriton`` binds into a running naiad
(or Triton). ``bind`` loads each callable as an ordinary Python model through the repository
load API: PyTriton's config as the ``config`` override, and ``file:`` overrides holding a
generic model.py and the callable pickled by value (cloudpickle), which naiad's Python
backend runs in its worker processes (or in the server, ``execution-mode=in_process``).

Its parts live where PyTriton keeps them: the bound model in ``naiad.pytriton.models.model``,
the workspace in ``naiad.pytriton.utils.workspace``, the server process in
``naiad.pytriton.server.triton_server``; ``Model`` and ``Workspace`` are importable from here
too, as from PyTriton's module.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import logging
import os
import pathlib
import re
import secrets
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from typing import Any

from naiad.pytriton.client import ModelClient
from naiad.pytriton.client.exceptions import PyTritonClientTimeoutError
from naiad.pytriton.client.utils import TritonUrl, create_auth_headers, wait_for_server_ready
from naiad.pytriton.constants import (  # noqa: F401  (PyTriton's triton module has them)
    DEFAULT_GRPC_PORT,
    DEFAULT_HTTP_PORT,
    DEFAULT_METRICS_PORT,
    TRITON_LOCAL_IP,
)
from naiad.pytriton.decorators import TritonContext
from naiad.pytriton.exceptions import (
    PyTritonValidationError,
    not_supported,
)
from naiad.pytriton.model_config.model_config import ModelConfig
from naiad.pytriton.model_config.tensor import Tensor
from naiad.pytriton.models.model import Model
from naiad.pytriton.proxy.telemetry import (  # noqa: F401  (PyTriton's triton module has them)
    build_proxy_tracer_from_triton_config,
    get_telemetry_tracer,
    set_telemetry_tracer,
)
from naiad.pytriton.server import triton_server
from naiad.pytriton.utils.workspace import Workspace

LOGGER = logging.getLogger("naiad.pytriton.triton")

SECONDS = 1.0
MONITORING_PERIOD_S = 10.0 * SECONDS
DEFAULT_TRITON_STARTUP_TIMEOUT_S = 120.0 * SECONDS   # as PyTriton
WAIT_FOR_MODEL_TIMEOUT_S = 60.0 * SECONDS           # as PyTriton
SERVER_STOP_TIMEOUT_S = 30.0 * SECONDS              # SIGTERM, then SIGKILL after this
SERVER_POLL_S = 0.5 * SECONDS                       # readiness checks between liveness checks
LOCAL_IP = TRITON_LOCAL_IP
TRITON_ACCESS_HEADER = "triton-access-token"
# Extra `naiad serve` arguments for the server Triton() starts (shell syntax), e.g.
# "--backend-config=python,execution-mode=in_process".
SERVE_ARGS_ENV = "NAIAD_PYTRITON_SERVE_ARGS"

VALID_TRITON_ENDPOINTS = {"health", "metadata", "inference", "shared-memory", "model-config",
                          "model-repository", "statistics", "trace", "logging"}
DEFAULT_PROTECTED_ENDPOINTS = ["shared-memory", "model-repository", "statistics", "trace",
                               "logging"]
# TritonConfig fields naiad has no counterpart for: refused when set.
_UNSUPPORTED_FIELDS = {
    "allow_sagemaker": "naiad serves no SageMaker endpoint",
    "sagemaker_port": "naiad serves no SageMaker endpoint",
    "sagemaker_safe_port_range": "naiad serves no SageMaker endpoint",
    "sagemaker_thread_count": "naiad serves no SageMaker endpoint",
    "allow_vertex_ai": "naiad serves no Vertex AI endpoint",
    "vertex_ai_port": "naiad serves no Vertex AI endpoint",
    "vertex_ai_thread_count": "naiad serves no Vertex AI endpoint",
    "vertex_ai_default_model": "naiad serves no Vertex AI endpoint",
}
# Fields that are not tritonserver flags of the same name.
_NOT_FLAGS = {"model_repository"}


@dataclasses.dataclass(kw_only=True)
class TritonConfig:
    """The server's settings: PyTriton's fields, each a ``tritonserver`` flag of the same name
    (``http_port`` is ``--http-port``), passed to ``naiad serve``; None keeps the default."""

    model_repository: pathlib.Path | None = None
    id: str | None = None
    log_verbose: int | None = None
    log_file: pathlib.Path | None = None
    exit_timeout_secs: int | None = None
    exit_on_error: bool | None = None
    strict_readiness: bool | None = None
    allow_http: bool | None = None
    http_address: str | None = None
    http_port: int | None = None
    http_header_forward_pattern: str | None = None
    http_thread_count: int | None = None
    http_restricted_api: str | None = None
    allow_grpc: bool | None = None
    grpc_address: str | None = None
    grpc_port: int | None = None
    grpc_header_forward_pattern: str | None = None
    grpc_infer_allocation_pool_size: int | None = None
    grpc_use_ssl: bool | None = None
    grpc_use_ssl_mutual: bool | None = None
    grpc_server_cert: pathlib.Path | None = None
    grpc_server_key: pathlib.Path | None = None
    grpc_root_cert: pathlib.Path | None = None
    grpc_infer_response_compression_level: str | None = None
    grpc_keepalive_time: int | None = None
    grpc_keepalive_timeout: int | None = None
    grpc_keepalive_permit_without_calls: bool | None = None
    grpc_http2_max_pings_without_data: int | None = None
    grpc_http2_min_recv_ping_interval_without_data: int | None = None
    grpc_http2_max_ping_strikes: int | None = None
    grpc_restricted_protocol: str | None = None
    allow_metrics: bool | None = None
    allow_gpu_metrics: bool | None = None
    allow_cpu_metrics: bool | None = None
    metrics_interval_ms: int | None = None
    metrics_port: int | None = None
    metrics_address: str | None = None
    allow_sagemaker: bool | None = None
    sagemaker_port: int | None = None
    sagemaker_safe_port_range: str | None = None
    sagemaker_thread_count: int | None = None
    allow_vertex_ai: bool | None = None
    vertex_ai_port: int | None = None
    vertex_ai_thread_count: int | None = None
    vertex_ai_default_model: str | None = None
    metrics_config: list[str] | None = None
    trace_config: list[str] | None = None
    cache_config: list[str] | None = None
    cache_directory: str | None = None
    buffer_manager_thread_count: int | None = None

    def __post_init__(self) -> None:
        if self.allow_http not in (True, None) and self.allow_grpc not in (True, None):
            raise PyTritonValidationError("The `http` or `grpc` endpoint has to be allowed.")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> TritonConfig:
        """A TritonConfig of ``config`` (strings cast to each field's type; lists from lists
        or comma-separated strings); unknown names are logged and left out."""
        fields = {field.name: field for field in dataclasses.fields(cls)}
        for name, value in config.items():
            if name not in fields:
                LOGGER.warning("Ignoring %s=%s as could not find matching config field. "
                               "Available fields: %s", name, value, ", ".join(fields))

        def cast(field: dataclasses.Field[Any], value: Any) -> Any:
            kind = str(field.type)
            if value is None:
                return None
            if "list" in kind:
                return list(value) if not isinstance(value, str) else value.split(",")
            if "bool" in kind and isinstance(value, str):
                return value.strip().lower() in ("1", "true", "yes", "on")
            if "int" in kind:
                return int(value)
            if "Path" in kind:
                return pathlib.Path(value)
            return str(value)

        return cls(**{name: cast(fields[name], value) for name, value in config.items()
                      if name in fields})

    @classmethod
    def from_env(cls) -> TritonConfig:
        """From ``PYTRITON_TRITON_CONFIG_<FIELD>`` variables (``..._<FIELD>_<N>`` for the
        items of a list field)."""
        prefix = "PYTRITON_TRITON_CONFIG_"
        config: dict[str, Any] = {}
        list_item = re.compile(r"^(.+?)_(\d+)$")
        lists: dict[str, dict[int, str]] = {}
        for name, value in os.environ.items():
            if not name.startswith(prefix):
                continue
            key = name[len(prefix):].lower()
            found = list_item.match(key)
            if found:
                lists.setdefault(found.group(1), {})[int(found.group(2))] = value
            else:
                config[key] = value
        for key, items in lists.items():
            config[key] = [items[i] for i in sorted(items)]
        return cls.from_dict(config)


@dataclasses.dataclass
class TritonLifecyclePolicy:
    """When the server starts and where the model store is (PyTriton's policy)."""

    launch_triton_on_startup: bool = True
    local_model_store: bool = False


DefaultTritonLifecyclePolicy = TritonLifecyclePolicy()
VertextAILifecyclePolicy = TritonLifecyclePolicy(launch_triton_on_startup=False,
                                                 local_model_store=True)


@dataclasses.dataclass
class TritonSecurityConfig:
    """Token-based restriction of endpoints (by default the control APIs); a token is made
    when none is given and some endpoint is restricted."""

    access_token: str | None = None
    restricted_endpoints: list[str] | None = None

    def __post_init__(self) -> None:
        if self.restricted_endpoints is None:
            self.restricted_endpoints = list(DEFAULT_PROTECTED_ENDPOINTS)
        invalid = set(self.restricted_endpoints) - VALID_TRITON_ENDPOINTS
        if invalid:
            raise PyTritonValidationError(
                f"Invalid endpoint names: {', '.join(sorted(invalid))}. Valid endpoints are: "
                f"{', '.join(sorted(VALID_TRITON_ENDPOINTS))}")
        if self.access_token is None and self.restricted_endpoints:
            self.access_token = secrets.token_urlsafe(32)


class TritonBase:
    """What Triton and RemoteTriton share: binding models into the server at ``url``."""

    def __init__(self, url: str, workspace: Workspace | str | pathlib.Path | None = None,
                 triton_lifecycle_policy: TritonLifecyclePolicy = DefaultTritonLifecyclePolicy,
                 access_token: str | None = None) -> None:
        self._triton_lifecycle_policy = triton_lifecycle_policy
        self._workspace = workspace if isinstance(workspace, Workspace) else Workspace(workspace)
        self._url = url
        self._access_token = access_token
        self._triton_url = TritonUrl.from_url(url)
        self._headers = (create_auth_headers(access_token, self._triton_url.scheme)
                         if access_token else None)
        self._cv = threading.Condition()
        self._triton_context = TritonContext()
        self._models: dict[tuple[str, int], Model] = {}
        self._loaded: list[Model] = []
        self._stopped = True
        self._connected = False
        atexit.register(self.stop)

    def bind(self, model_name: str, infer_func: Callable[..., Any] | Sequence[Callable[..., Any]],
             inputs: Sequence[Tensor], outputs: Sequence[Tensor], model_version: int = 1,
             config: ModelConfig | None = None, strict: bool = False,
             trace_config: list[str] | None = None) -> None:
        """Bind ``infer_func`` (a callable, or one per instance) as model ``model_name``:
        loaded at once when connected, else at ``connect``/``run``/``serve``."""
        self._validate_model_name(model_name)
        if trace_config is not None:
            raise not_supported("bind(trace_config=...)",
                                "set tracing on the server (TritonConfig.trace_config)")
        model = Model(model_name, model_version, infer_func, inputs, outputs,
                      config or ModelConfig(), strict, self._triton_context, self._workspace)
        key = (model_name.lower(), model_version)
        if key in self._models:
            raise PyTritonValidationError(
                f"Model {model_name} with version {model_version} already exists.")
        self._models[key] = model
        if self.is_connected():
            self._load(model)

    @property
    def _models_list(self) -> list[Model]:
        return list(self._models.values())

    def _client(self, model: Model) -> ModelClient:
        return ModelClient(self._url, model.model_name, str(model.model_version),
                           access_token=self._access_token)

    def _load(self, model: Model) -> None:
        with self._client(model) as client:
            client.wait_for_server(DEFAULT_TRITON_STARTUP_TIMEOUT_S)
            client.load_model(config=model.config_json, files=model.files)
        self._loaded.append(model)

    def connect(self) -> None:
        """Wait for the server, load every bound model, wait for them to be ready."""
        with self._cv:
            if self._connected:
                return
            self._wait_for_server()
            for model in self._models_list:
                if model not in self._loaded:
                    self._load(model)
            self._wait_for_models()
            self._connected = True

    def serve(self, monitoring_period_s: float = MONITORING_PERIOD_S) -> None:
        """Connect and block until SIGINT or SIGTERM (or the server ends), then stop."""
        self.connect()
        restore = _terminate_as_interrupt()
        try:
            with self._cv:
                while self.is_alive():
                    self._cv.wait(timeout=monitoring_period_s)
        except KeyboardInterrupt:
            LOGGER.info("SIGINT received, exiting.")
        finally:
            restore()
        self.stop()

    def stop(self) -> bool:
        """Unload the bound models (RemoteTriton) or end the server (Triton); clean the
        workspace. False when already stopped."""
        with self._cv:
            if self._stopped:
                return False
            self._stopped = True
            self._connected = False
        atexit.unregister(self.stop)
        self._pre_stop_impl()
        self._workspace.clean()
        with self._cv:
            self._cv.notify_all()
        return True

    def is_alive(self) -> bool:
        """Whether the server runs and answers."""
        return self._is_alive_impl()

    def is_connected(self) -> bool:
        with self._cv:
            return self._connected

    def __enter__(self) -> TritonBase:
        if self._triton_lifecycle_policy.launch_triton_on_startup:
            self.connect()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _is_alive_impl(self) -> bool:
        return True

    def _pre_stop_impl(self) -> None:
        pass

    def _general_client(self) -> Any:
        import tritonclient.grpc
        import tritonclient.http

        lib: Any = tritonclient.grpc if self._triton_url.scheme == "grpc" else tritonclient.http
        return lib.InferenceServerClient(self._triton_url.without_scheme)

    def _wait_for_server(self) -> None:
        client = self._general_client()
        try:
            wait_for_server_ready(client, DEFAULT_TRITON_STARTUP_TIMEOUT_S, self._headers)
        except PyTritonClientTimeoutError as exc:
            raise TimeoutError("Triton Inference Server is not ready after timeout.") from exc
        finally:
            client.close()

    def _wait_for_models(self) -> None:
        for model in self._models_list:
            try:
                with self._client(model) as client:
                    client.wait_for_model(WAIT_FOR_MODEL_TIMEOUT_S)
            except PyTritonClientTimeoutError:
                LOGGER.warning("Could not verify locally if models are ready using %s.",
                               self._url)
            LOGGER.info("Infer function available as model: `/v2/models/%s`", model.model_name)
        LOGGER.info("(Press CTRL+C or use the command `kill -SIGINT %d` to send a SIGINT "
                    "signal and quit)", os.getpid())

    @classmethod
    def _validate_model_name(cls, model_name: str) -> None:
        if not model_name:
            raise PyTritonValidationError("Model name cannot be empty")
        if not re.match(r"^[a-zA-Z0-9._-]+$", model_name):
            raise PyTritonValidationError(
                "Model name can only contain alphanumeric characters, dots, underscores and "
                "dashes")


def _terminate_as_interrupt() -> Callable[[], None]:
    """SIGTERM raises KeyboardInterrupt while ``serve`` blocks (main thread only), so both
    signals stop the server; the returned function restores the previous handler."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    return lambda: signal.signal(signal.SIGTERM, previous)


def _flag_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, pathlib.Path):
        return value.as_posix()
    return str(value)


def serve_arguments(config: TritonConfig, security: TritonSecurityConfig,
                    model_repository: pathlib.Path) -> list[str]:
    """``naiad serve`` arguments for ``config``: explicit model control, every set field as
    its tritonserver flag; a field naiad has no counterpart for raises, naming it."""
    args = ["--model-control-mode=explicit",
            f"--model-repository={(config.model_repository or model_repository)}"]
    for name, value in config.to_dict().items():
        if value is None or name in _NOT_FLAGS:
            continue
        if name in _UNSUPPORTED_FIELDS:
            if value:
                raise not_supported(f"TritonConfig.{name}", _UNSUPPORTED_FIELDS[name])
            continue
        flag = "--" + name.replace("_", "-")
        for item in value if isinstance(value, list) else [value]:
            args.append(f"{flag}={_flag_value(item)}")
    if security.access_token and security.restricted_endpoints:
        restriction = (f"{','.join(security.restricted_endpoints)}:"
                       f"{TRITON_ACCESS_HEADER}={security.access_token}")
        if config.http_restricted_api is None:
            args.append(f"--http-restricted-api={restriction}")
        if config.grpc_restricted_protocol is None:
            args.append(f"--grpc-restricted-protocol={restriction}")
    # PyTriton serves no OpenAI API: naiad's OpenAI frontend, where installed, would take its
    # port (9000) and a second Triton() on the host would fail to start on it.
    if any(entry.name == "openai" for entry in entry_points(group="naiad.frontends")):
        args.append("--allow-openai=false")
    args += shlex.split(os.environ.get(SERVE_ARGS_ENV, ""))
    return args


def _local_address(address: str | None) -> str:
    if not address or re.match(r"^0+\.0+\.0+\.0+$", address) or address in ("::", "[::]"):
        return LOCAL_IP
    return address


class Triton(TritonBase):
    """naiad's server started by the program (``naiad serve`` as its child process, on
    PyTriton's default ports 8000/8001/8002), with the callables bound into it."""

    def __init__(self, *, config: TritonConfig | None = None,
                 workspace: Workspace | str | pathlib.Path | None = None,
                 triton_lifecycle_policy: TritonLifecyclePolicy | None = None,
                 security_config: TritonSecurityConfig | None = None) -> None:
        if triton_lifecycle_policy is not None and triton_lifecycle_policy.local_model_store:
            raise not_supported("TritonLifecyclePolicy(local_model_store=True)",
                                "models are always loaded through the repository load API")

        def set_fields(found: TritonConfig | None) -> dict[str, Any]:
            return {k: v for k, v in (found.to_dict() if found else {}).items()
                    if v is not None}

        self._config = TritonConfig(**{**set_fields(TritonConfig.from_env()),
                                       **set_fields(config)})
        self._security_config = security_config or TritonSecurityConfig()
        workspace = workspace if isinstance(workspace, Workspace) else Workspace(workspace)
        self._serve_args = serve_arguments(self._config, self._security_config,
                                           workspace.model_store_path)
        if self._config.allow_http in (True, None):
            url = (f"http://{_local_address(self._config.http_address)}:"
                   f"{self._config.http_port or DEFAULT_HTTP_PORT}")
        else:
            url = (f"grpc://{_local_address(self._config.grpc_address)}:"
                   f"{self._config.grpc_port or DEFAULT_GRPC_PORT}")
        super().__init__(url=url, workspace=workspace,
                         triton_lifecycle_policy=triton_lifecycle_policy
                         or DefaultTritonLifecyclePolicy,
                         access_token=self._security_config.access_token)
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Triton:
        if self._triton_lifecycle_policy.launch_triton_on_startup:
            self._run_server()
        super().__enter__()
        return self

    def run(self) -> None:
        """Start the server and load the bound models; returns while the server serves."""
        self._run_server()
        self.connect()

    def serve(self, monitoring_period_s: float = MONITORING_PERIOD_S) -> None:
        """Start the server, load the bound models and block until SIGINT or SIGTERM."""
        self._run_server()
        super().serve(monitoring_period_s=monitoring_period_s)

    def get_access_token(self) -> str | None:
        """The token restricted endpoints ask for (given or generated)."""
        return self._security_config.access_token

    def _run_server(self) -> None:
        if self._process is not None and self._process.poll() is None:
            return
        with self._cv:
            self._stopped = False
        self._process = triton_server.start(self._serve_args)

    def _is_alive_impl(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _wait_for_server(self) -> None:
        """Until the server is ready; RuntimeError as soon as its process has ended."""
        deadline = time.monotonic() + DEFAULT_TRITON_STARTUP_TIMEOUT_S
        client = self._general_client()
        try:
            while True:
                if self._process is None or self._process.poll() is not None:
                    code = None if self._process is None else self._process.returncode
                    raise RuntimeError(f"naiad serve exited with {code} before it was ready "
                                       "(its log is above)")
                try:
                    wait_for_server_ready(client, SERVER_POLL_S, self._headers)
                    return
                except PyTritonClientTimeoutError:
                    if time.monotonic() >= deadline:
                        raise TimeoutError("Triton Inference Server is not ready after "
                                           "timeout.") from None
        finally:
            client.close()

    def _pre_stop_impl(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            triton_server.stop(process, SERVER_STOP_TIMEOUT_S)


class RemoteTriton(TritonBase):
    """Binds callables into a naiad (or Triton) already running at ``url``; ``stop``
    unloads them. The server needs ``--model-control-mode=explicit``."""

    def __init__(self, url: str, workspace: Workspace | str | pathlib.Path | None = None,
                 access_token: str | None = None) -> None:
        super().__init__(url=TritonUrl.from_url(url).with_scheme, workspace=workspace,
                         triton_lifecycle_policy=TritonLifecyclePolicy(
                             launch_triton_on_startup=True, local_model_store=False),
                         access_token=access_token)
        with self._cv:
            self._stopped = False

    def __enter__(self) -> RemoteTriton:
        super().__enter__()
        return self

    def _is_alive_impl(self) -> bool:
        client = self._general_client()
        try:
            return bool(client.is_server_live(headers=self._headers))
        except Exception:  # an unreachable server is not alive
            return False
        finally:
            client.close()

    def _pre_stop_impl(self) -> None:
        for model in self._loaded:
            with contextlib.suppress(Exception), self._client(model) as client:
                client.unload_model()
        self._loaded.clear()
