"""What the server says about itself and its models, the same over HTTP and gRPC: server and
model metadata, a model's configuration, statistics and the trace settings. A part of
:class:`naiad.server.InferenceServer` (which it is mixed into), kept apart from the request
path."""

from __future__ import annotations

from tritonclient.grpc.model_config_pb2 import DataType

from naiad import __version__
from naiad.datatypes import config_to_datatype
from naiad.errors import InferenceServerError, invalid_arg
from naiad.models.manager import ModelManager
from naiad.server_options import ServerOptions
from naiad.tracing import TraceManager

# The protocol extensions naiad implements (reported by GET /v2 and ServerMetadata), in
# tritonserver 2.51's order. Not listed, because naiad does not implement it:
# cuda_shared_memory (docs/compatibility.md).
EXTENSIONS = [
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "system_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
]


class ServerMetadata:
    """The answers about the server and its models (a mixin of ``InferenceServer``, whose
    ``__init__`` sets the attributes below)."""

    options: ServerOptions
    models: ModelManager
    tracing: TraceManager
    tracer: TraceManager | None

    def server_metadata(self) -> dict:
        return {"name": self.options.server_id, "version": __version__,
                "extensions": EXTENSIONS}

    def model_metadata(self, name: str, version: str = "") -> dict:
        model = self.models.get(name, version)
        batch = model.config.max_batch_size > 0

        def tensors(items: object) -> list[dict]:
            return [{
                "name": t.name,
                "datatype": config_to_datatype(_type_name(t.data_type)),
                "shape": ([-1] if batch else []) + list(t.dims),
            } for t in items]  # type: ignore[attr-defined]

        return {
            "name": name,
            "versions": [str(v) for v in sorted(self.models.models[name].versions)],
            "platform": model.config.platform or model.config.backend,
            "inputs": tensors(model.config.input),
            "outputs": tensors(model.config.output),
        }

    def model_config(self, name: str, version: str = "") -> dict:
        return self.models.get(name, version).config_json

    def statistics(self, name: str = "", version: str = "") -> list[dict]:
        if not name:
            return [v.stats.as_dict() for record in sorted(self.models.models.values(),
                                                          key=lambda r: r.name)
                    for _, v in sorted(record.versions.items())]
        record = self.models.models.get(name)
        if record is None or not record.versions:
            raise invalid_arg(f"requested model '{name}' is not available")
        if version:
            try:
                return [self.models.get(name, version).stats.as_dict()]
            except InferenceServerError:
                raise invalid_arg(f"requested model '{name}' version {version} is not "
                                  f"available") from None
        return [v.stats.as_dict() for _, v in sorted(record.versions.items())]

    def trace_settings(self, model: str, changes: dict[str, object]
                       ) -> list[tuple[str, list[str]]]:
        """Triton's trace extension, for the server (``model`` "") or one model: the
        settings after applying ``changes`` (none: read them), in Triton's order, every
        value a list. See :meth:`naiad.tracing.TraceManager.update`."""
        if model and model not in self.models.models:
            raise invalid_arg(f"Request for unknown model : {model}")
        if not changes:
            return self.tracing.view(model)
        settings = self.tracing.update(model, changes)
        self.tracer = self.tracing if self.tracing.active else None
        return settings


def _type_name(value: int) -> str:
    return DataType.Name(value)
