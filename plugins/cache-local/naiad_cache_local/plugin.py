"""The ``naiad.caches`` entry point ``local``: ``--cache-config local,size=BYTES``."""

from __future__ import annotations

from naiad.hookspecs import hookimpl
from naiad.types import ResponseCache
from naiad_cache_local.lru import LocalCache


@hookimpl
def naiad_cache(name: str, settings: dict[str, str]) -> ResponseCache | None:
    if name == "local":
        return LocalCache.from_settings(settings)
    return None
