"""What the tool learns from the server before it sends a request: the model's metadata and
configuration (inputs, datatypes, dims, batching, sequence batching, decoupled), and the
statistics extension it reads before and after each measurement window."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from naiad_perf.api import LoadSpec

# The control connection's own timeout: a metadata or statistics call, never the load.
CONTROL_TIMEOUT_S = 30.0


class PerfError(Exception):
    """A problem the user must fix (bad flag, model the tool cannot drive, server error):
    the command prints it on one line and exits 1."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    datatype: str                    # V2 datatype: "FP32", "BYTES", ...
    dims: tuple[int, ...]            # without the batch dimension; -1 where variable


@dataclass(frozen=True)
class ModelInfo:
    name: str
    version: str
    max_batch_size: int
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    sequence: bool = False           # config has sequence_batching: start/end/correlation ids
    decoupled: bool = False          # model_transaction_policy.decoupled
    platform: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


def control_client(spec: LoadSpec) -> Any:
    """A tritonclient client for the control calls (metadata, config, statistics, shared
    memory registration) in the spec's protocol."""
    if spec.protocol == "grpc":
        import tritonclient.grpc as grpcclient

        return grpcclient.InferenceServerClient(spec.url)
    if spec.protocol != "http":
        raise PerfError(f"unknown protocol '{spec.protocol}': expected http or grpc")
    import tritonclient.http as httpclient

    return httpclient.InferenceServerClient(spec.url, connection_timeout=CONTROL_TIMEOUT_S,
                                            network_timeout=CONTROL_TIMEOUT_S)


def _as_dict(spec: LoadSpec, answer: Any) -> dict[str, Any]:
    if spec.protocol == "grpc":
        from google.protobuf.json_format import MessageToDict

        return MessageToDict(answer, preserving_proto_field_name=True)
    return dict(answer)


def _tensor(entry: dict[str, Any], batched: bool) -> TensorInfo:
    dims = tuple(int(d) for d in entry.get("shape", []))
    if batched and dims:
        dims = dims[1:]  # metadata shapes carry the batch dimension as -1
    return TensorInfo(entry["name"], entry["datatype"], dims)


def read_model(spec: LoadSpec, client: Any | None = None) -> ModelInfo:
    """The model as the server describes it; a PerfError naming the model when it is not
    there or not ready."""
    from tritonclient.utils import InferenceServerException

    own = client is None
    client = client or control_client(spec)
    try:
        if not client.is_model_ready(spec.model, spec.version):
            raise PerfError(f"model '{spec.model}' (version '{spec.version or 'latest'}') is "
                            f"not ready on {spec.url}")
        metadata = _as_dict(spec, client.get_model_metadata(spec.model, spec.version))
        config = _as_dict(spec, client.get_model_config(spec.model, spec.version))
    except InferenceServerException as exc:
        raise PerfError(f"model '{spec.model}' on {spec.url}: {exc.message()}") from exc
    finally:
        if own:
            client.close()
    config = config.get("config", config)  # gRPC wraps it in ModelConfigResponse
    max_batch_size = int(config.get("max_batch_size", 0))
    batched = max_batch_size > 0
    policy = config.get("model_transaction_policy", {})
    versions = metadata.get("versions") or [""]
    return ModelInfo(
        name=spec.model,
        version=spec.version or "",
        max_batch_size=max_batch_size,
        inputs=tuple(_tensor(t, batched) for t in metadata.get("inputs", [])),
        outputs=tuple(_tensor(t, batched) for t in metadata.get("outputs", [])),
        sequence="sequence_batching" in config,
        decoupled=bool(policy.get("decoupled", False)),
        platform=str(metadata.get("platform", "")),
        extra={"versions": versions},
    )


def check_load(spec: LoadSpec, model: ModelInfo) -> None:
    """Refuse what the model cannot take, before any process is started."""
    if spec.batch_size < 1:
        raise PerfError(f"batch size must be at least 1, got {spec.batch_size}")
    if model.max_batch_size == 0 and spec.batch_size > 1:
        raise PerfError(f"model '{model.name}' does not batch (max_batch_size 0): "
                        f"-b {spec.batch_size} cannot be sent")
    if model.max_batch_size and spec.batch_size > model.max_batch_size:
        raise PerfError(f"-b {spec.batch_size} exceeds the max_batch_size of model "
                        f"'{model.name}', {model.max_batch_size}")
    if model.decoupled and not (spec.protocol == "grpc" and spec.streaming):
        raise PerfError(f"model '{model.name}' is decoupled: it answers over a gRPC stream "
                        f"only (-i grpc --streaming)")
    if spec.streaming and spec.protocol != "grpc":
        raise PerfError("--streaming needs the gRPC protocol (-i grpc)")
    if spec.shared_memory not in ("none", "system"):
        raise PerfError(f"--shared-memory {spec.shared_memory}: expected none or system "
                        f"(cuda needs a GPU client build)")
    names = {t.name for t in model.inputs}
    for name in spec.shapes:
        if name not in names:
            raise PerfError(f"--shape {name}: model '{model.name}' has no input '{name}' "
                            f"(inputs: {', '.join(sorted(names))})")


@dataclass
class ServerCounters:
    """The statistics extension's cumulative counters for one model (every version summed)."""

    inference_count: int = 0
    execution_count: int = 0
    success_count: int = 0
    success_ns: int = 0
    queue_ns: int = 0
    compute_input_ns: int = 0
    compute_infer_ns: int = 0
    compute_output_ns: int = 0

    def minus(self, before: ServerCounters) -> ServerCounters:
        return ServerCounters(**{k: getattr(self, k) - getattr(before, k)
                                 for k in self.__dataclass_fields__})

    def per_request(self) -> dict[str, float]:
        """The per-request averages of Measurement.server (microseconds)."""
        n = max(self.success_count, 1)
        queue, cin, cinf, cout = (self.queue_ns / n / 1e3, self.compute_input_ns / n / 1e3,
                                  self.compute_infer_ns / n / 1e3,
                                  self.compute_output_ns / n / 1e3)
        latency = self.success_ns / n / 1e3
        return {"request_count": float(self.success_count),
                "inference_count": float(self.inference_count),
                "execution_count": float(self.execution_count),
                "request_latency_us": latency,
                "queue_us": queue, "compute_input_us": cin, "compute_infer_us": cinf,
                "compute_output_us": cout,
                "overhead_us": max(latency - queue - cin - cinf - cout, 0.0)}


def read_counters(spec: LoadSpec, client: Any) -> ServerCounters:
    """The model's counters now (a server without the statistics extension gives zeros)."""
    from tritonclient.utils import InferenceServerException

    try:
        stats = _as_dict(spec, client.get_inference_statistics(spec.model, spec.version))
    except InferenceServerException:
        return ServerCounters()
    total = ServerCounters()
    for entry in stats.get("model_stats", []):
        infer = entry.get("inference_stats", {})

        def part(key: str, what: str, infer: dict[str, Any] = infer) -> int:
            return int(infer.get(key, {}).get(what, 0))

        total.inference_count += int(entry.get("inference_count", 0))
        total.execution_count += int(entry.get("execution_count", 0))
        total.success_count += part("success", "count")
        total.success_ns += part("success", "ns")
        total.queue_ns += part("queue", "ns")
        total.compute_input_ns += part("compute_input", "ns")
        total.compute_infer_ns += part("compute_infer", "ns")
        total.compute_output_ns += part("compute_output", "ns")
    return total
