"""The ``naiad.backends`` entry point ``pytorch``: claims models with ``backend: "pytorch"``
(and ``platform: "pytorch_libtorch"``, which the core maps to it)."""

from __future__ import annotations

from naiad.hookspecs import hookimpl
from naiad.types import Backend


@hookimpl
def naiad_backend(name: str, backend_config: dict[str, str]) -> Backend | None:
    if name != "pytorch":
        return None
    # Imported here: torch loads only when a model names this backend.
    from naiad_backend_torch.backend import TorchBackend

    return TorchBackend(backend_config)
