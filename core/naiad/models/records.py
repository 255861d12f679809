"""What the model manager keeps per model and per version, and the flags that change how
models load: the records the rest of naiad imports (from here, not from the manager)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from naiad.config.platforms import ENSEMBLE
from naiad.metrics.config import MetricsConfig
from naiad.metrics.custom_metrics import ModelMetrics
from naiad.metrics.histogram import Histogram
from naiad.metrics.stats import ModelStats
from naiad.models.gate import VersionGate
from naiad.models.limits import ConfigLimits
from naiad.models.progress import DEFAULT_PROGRESS_S
from naiad.models.signature import ModelSignature
from naiad.repository.fingerprint import ModelFingerprint
from naiad.scheduling.base import Scheduler, SchedulingContext
from naiad.scheduling.rate_limiter import ResourceFlag
from naiad.scheduling.worker import DEFAULT_LOOP_EXECUTION_MAX_US

READY, UNAVAILABLE, LOADING, UNLOADING = "READY", "UNAVAILABLE", "LOADING", "UNLOADING"


@dataclass(slots=True)
class ModelVersion:
    """One loaded, serving version of a model: what the request path uses."""

    name: str
    version: int
    config: ModelConfig
    signature: ModelSignature
    scheduler: Scheduler
    context: SchedulingContext
    stats: ModelStats
    config_json: dict
    # The model folder as it was when this version loaded (poll mode keeps a version whose
    # files and configuration did not change instead of loading it again).
    fingerprint: ModelFingerprint | None = None
    #: ``model_transaction_policy { decoupled: true }``: the model sends any number of
    #: responses per request (see :meth:`InferenceServer.stream`)
    decoupled: bool = False
    #: milliseconds from a request's arrival to its first response, for a decoupled model
    #: with ``--metrics-config histogram_latencies=true`` (None otherwise: nothing recorded)
    first_response: Histogram | None = None
    #: the version's custom metrics (``ModelContext.metrics``), deleted when it unloads
    metrics: ModelMetrics | None = None
    #: admission: requests enter before they reach the scheduler and leave when they are
    #: over; closed when the version retires (see :mod:`naiad.models.gate`)
    gate: VersionGate = field(default_factory=VersionGate)


@dataclass(slots=True)
class ModelRecord:
    """Everything known about one model name: serving versions and per-version states."""

    name: str
    path: Path | None
    versions: dict[int, ModelVersion] = field(default_factory=dict)
    # version (or None before versions are known) -> (state, reason)
    states: dict[int | None, tuple[str, str]] = field(default_factory=dict)
    latest: ModelVersion | None = None
    # The last load failed inside the model's backend while completing its configuration
    # (its model.py did not import, its requirements.txt did not build): Triton meets
    # that loading the model's versions, so with strict readiness it holds the server's
    # readiness back while no version serves. A configuration that cannot be read does not.
    backend_failed: bool = False


@dataclass
class LoadOptions:
    """The flags that change how models load: ``ServerOptions.load``, filled from the
    rows of ``naiad.serve_flags`` whose option is ``load.*`` or ``limits.*``."""

    strict_model_config: bool = False
    disable_auto_complete_config: bool = False
    # backend name -> KEY=VALUE settings; "" holds those given for every backend
    backend_config: dict[str, dict[str, str]] = field(default_factory=dict)
    # --model-config-name: read <model>/configs/<name>.pbtxt where it exists
    config_name: str = ""
    # --model-load-thread-count: model versions being created at the same time
    load_thread_count: int = 4
    # --model-load-retry-count: further attempts after a version failed to load
    load_retry_count: int = 0
    # --max-instances-per-model, --max-priority-levels, --max-config-tensor-bytes: a
    # configuration asking for more fails its load (naiad.models.limits)
    limits: ConfigLimits = field(default_factory=ConfigLimits)
    # --model-load-progress-secs: a load step (configuration, initialize, warmup) still
    # running logs that it is, this often (0: never)
    progress_s: float = DEFAULT_PROGRESS_S
    # --metrics-config: what each version records beyond its counters (naiad's histograms,
    # Triton's summaries; with histogram_latencies=true, decoupled versions get a
    # first-response histogram, nv_inference_first_response_histogram_ms)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    # --rate-limit (off | execution_count) and its --rate-limit-resource counts: with
    # execution_count the model manager keeps the server's resource pools
    # (naiad.scheduling.rate_limiter)
    rate_limit: str = "off"
    rate_limit_resources: list[ResourceFlag] = field(default_factory=list)
    # --loop-execution-max-usecs: a batch of an instance that may run on any thread runs
    # on the event loop when its recent batches took at most this long (0: never)
    loop_execution_max_us: int = DEFAULT_LOOP_EXECUTION_MAX_US

    def settings_for(self, backend: str) -> dict[str, str]:
        """The ``--backend-config`` settings one backend sees: the shared ones, overridden
        by those given for it by name."""
        return {**self.backend_config.get("", {}), **self.backend_config.get(backend, {})}


def loading_message(name: str) -> str:
    return (f"model '{name}' is loading and not ready yet; it serves once its load "
            f"finishes (GET /v2/repository/index shows its state)")


def describe_instances(config: ModelConfig) -> str:
    """``2 instance(s) (KIND_CPU)`` for the load log; an ensemble runs none of its own."""
    if config.platform == ENSEMBLE:
        return f"{len(config.ensemble_scheduling.step)} step(s)"
    kinds = sorted({ModelInstanceGroup.Kind.Name(group.kind) for group in config.instance_group})
    count = sum(max(group.count, 1) for group in config.instance_group)
    return f"{count} instance(s) per device ({', '.join(kinds)})"


def failure_reasons(record: ModelRecord) -> str:
    return "; ".join(reason for state, reason in record.states.values() if reason)
