"""naiad-cache-redis: the response cache on a Redis server, configured with Triton's redis
cache keys (``--cache-config redis,host=...,port=...``), shared by every replica that points
at the same Redis."""

from naiad_cache_redis.cache import RedisResponseCache
from naiad_cache_redis.settings import RedisSettings, parse_settings

__all__ = ["RedisResponseCache", "RedisSettings", "parse_settings"]
