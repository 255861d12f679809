"""The ``naiad.backends`` entry point ``python``: claims models with ``backend: "python"``."""

from __future__ import annotations

from naiad.hookspecs import hookimpl
from naiad.types import Backend
from naiad_backend_python.backend import PythonBackend


@hookimpl
def naiad_backend(name: str, backend_config: dict[str, str]) -> Backend | None:
    if name == "python":
        return PythonBackend(backend_config)
    return None
