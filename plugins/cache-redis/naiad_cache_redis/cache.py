"""The response cache on Redis: the core's key, prefixed, to the core's serialized response.

Every server pointed at the same Redis (and ``db`` and ``key_prefix``) shares the entries, so
replicas behind a load balancer answer each other's repeated requests. Entries carry no
expiry: size Redis with ``maxmemory`` and an eviction policy (``allkeys-lru``), as for
Triton's redis cache. A call Redis does not answer is a miss (lookup) or dropped (insert),
never an exception to the caller; see :mod:`naiad_cache_redis.availability`.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Callable

import redis

from naiad.errors import invalid_arg
from naiad.types import ResponseCache
from naiad_cache_redis.availability import Availability
from naiad_cache_redis.client import make_client
from naiad_cache_redis.settings import CACHE_NAME, RedisSettings

log = logging.getLogger("naiad.cache.redis")


class RedisResponseCache(ResponseCache):
    """``--cache-config redis,...``: a :class:`naiad.types.ResponseCache` on a Redis server."""

    # Each call waits on the network: the core calls it away from the HTTP event loop.
    blocking = True

    def __init__(self, settings: RedisSettings, *, client: redis.Redis | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self._client = make_client(settings) if client is None else client
        self._prefix = settings.key_prefix.encode()
        self.availability = Availability(settings.address, settings.retry_interval_s, log,
                                         clock=clock)

    def redis_key(self, key: bytes) -> bytes:
        """The Redis key that holds the entry for the core's ``key``."""
        return self._prefix + key

    def check(self) -> None:
        """Ask Redis once, at start-up. Settings Redis refuses (credentials, ``db``, a TLS
        certificate that does not verify) raise INVALID_ARG; a Redis that does not answer
        is logged and the server starts anyway, missing until it answers."""
        try:
            self._client.ping()
        except redis.AuthenticationError as exc:
            raise invalid_arg(f"--cache-config {CACHE_NAME}: redis at {self.settings.address} "
                              f"refused the credentials (user, password): {exc}") from exc
        except redis.ResponseError as exc:
            raise invalid_arg(f"--cache-config {CACHE_NAME}: redis at {self.settings.address} "
                              f"refused the settings (db={self.settings.db}?): {exc}") from exc
        except redis.RedisError as exc:
            if _tls_refused(exc):
                raise invalid_arg(f"--cache-config {CACHE_NAME}: the TLS handshake with redis "
                                  f"at {self.settings.address} failed (tls_enabled, cert, key, "
                                  f"cacert, cacert_dir, sni): {exc}") from exc
            self.availability.failed("connection check at start-up", exc)
        else:
            log.info("response cache: redis at %s db %d, keys prefixed '%s'",
                     self.settings.address, self.settings.db, self.settings.key_prefix)

    def lookup(self, key: bytes) -> bytes | None:
        if not self.availability.should_try():
            return None
        try:
            value = self._client.get(self._prefix + key)
        except Exception as exc:  # whatever goes wrong, the request runs its model
            self.availability.failed("lookup", exc)
            return None
        self.availability.succeeded()
        return value  # type: ignore[return-value]

    def insert(self, key: bytes, value: bytes) -> None:
        if not self.availability.should_try():
            return
        try:
            self._client.set(self._prefix + key, value)
        except Exception as exc:  # a dropped insert costs a later miss, nothing more
            self.availability.failed("insert", exc)
            return
        self.availability.succeeded()

    def close(self) -> None:
        self._client.close()
        self._client.connection_pool.disconnect()


def _tls_refused(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) is a failed TLS handshake or certificate check."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, ssl.SSLError | ssl.CertificateError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
