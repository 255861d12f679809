"""The ``naiad.backends`` entry point ``tensorrt``: claims models with ``backend: "tensorrt"``
(and ``platform: "tensorrt_plan"``, which the core maps to it).

Importing this module imports neither tensorrt nor the CUDA binding: they load with the
first model that needs them.
"""

from __future__ import annotations

from naiad.hookspecs import hookimpl
from naiad.types import Backend
from naiad_backend_tensorrt.backend import TensorRTBackend


@hookimpl
def naiad_backend(name: str, backend_config: dict[str, str]) -> Backend | None:
    if name == "tensorrt":
        return TensorRTBackend(backend_config)
    return None
