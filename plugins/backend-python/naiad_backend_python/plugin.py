"""The ``naiad.backends`` entry point ``python``: claims models with ``backend: "python"``."""

from __future__ import annotations

from naiad.hookspecs import hookimpl
from naiad.types import Backend
from naiad_backend_python.backend import BASED_BACKEND_FILE, PythonBackend


@hookimpl
def naiad_backend(name: str, backend_config: dict[str, str]) -> Backend | None:
    if name == "python" or BASED_BACKEND_FILE in backend_config:
        return PythonBackend(backend_config)
    return None
