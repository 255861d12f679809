"""The ``naiad.caches`` entry point ``redis``: ``--cache-config redis,host=...,port=...``."""

from __future__ import annotations

from naiad.hookspecs import hookimpl
from naiad.types import ResponseCache
from naiad_cache_redis.cache import RedisResponseCache
from naiad_cache_redis.settings import CACHE_NAME, parse_settings


@hookimpl
def naiad_cache(name: str, settings: dict[str, str]) -> ResponseCache | None:
    if name != CACHE_NAME:
        return None
    cache = RedisResponseCache(parse_settings(settings))
    cache.check()
    return cache
