"""The ``naiad.backends`` entry point ``onnxruntime``: claims models with
``backend: "onnxruntime"`` (``platform: "onnxruntime_onnx"`` maps to it)."""

from __future__ import annotations

from naiad.hookspecs import hookimpl
from naiad.types import Backend
from naiad_backend_onnx.backend import OnnxBackend


@hookimpl
def naiad_backend(name: str, backend_config: dict[str, str]) -> Backend | None:
    if name == "onnxruntime":
        return OnnxBackend(backend_config)
    return None
