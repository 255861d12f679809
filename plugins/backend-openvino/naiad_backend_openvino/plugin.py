"""The ``naiad.backends`` entry point ``openvino``: claims models with
``backend: "openvino"``."""

from __future__ import annotations

from naiad.hookspecs import hookimpl
from naiad.types import Backend


@hookimpl
def naiad_backend(name: str, backend_config: dict[str, str]) -> Backend | None:
    if name == "openvino":
        # Imported here: OpenVINO loads only once an OpenVINO model does.
        from naiad_backend_openvino.backend import OpenVinoBackend

        return OpenVinoBackend(backend_config)
    return None
