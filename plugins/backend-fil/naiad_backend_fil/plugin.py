"""The ``naiad.backends`` entry point ``fil``: claims models with ``backend: "fil"``."""

from __future__ import annotations

from naiad.hookspecs import hookimpl
from naiad.types import Backend


@hookimpl
def naiad_backend(name: str, backend_config: dict[str, str]) -> Backend | None:
    if name == "fil":
        # Imported here: Treelite loads only once a FIL model does.
        from naiad_backend_fil.backend import FilBackend

        return FilBackend(backend_config)
    return None
