"""The redis-py client the cache talks through: one bounded, blocking connection pool.

redis-py's :class:`redis.Redis` over a :class:`redis.BlockingConnectionPool` is thread-safe:
each call borrows a connection (waiting at most ``wait_timeout`` for one), and a connection
that failed is dropped and reopened by the next call, so the client recovers by itself when
Redis comes back. Retries are off: a failed call is a cache miss at once, never a second wait.
"""

from __future__ import annotations

from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.connection import SSLConnection
from redis.retry import Retry

from naiad.errors import invalid_arg
from naiad_cache_redis.settings import CACHE_NAME, RedisSettings, TlsSettings

# What ``CLIENT LIST`` on the Redis server shows for naiad's connections.
CLIENT_NAME = "naiad"


class ServerNameSSLConnection(SSLConnection):
    """A TLS connection that sends ``server_name`` (Triton's ``sni``) as the SNI and checks
    the certificate against it, instead of the host it connects to (an IP, a service name).

    redis-py names the server after ``host`` in its TLS handshake; the handshake is the one
    place that reads it, so the name is swapped in for its duration.
    """

    def __init__(self, *, server_name: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.server_name = server_name

    def _wrap_socket_with_ssl(self, sock: Any) -> Any:
        connect_host, self.host = self.host, self.server_name
        try:
            return super()._wrap_socket_with_ssl(sock)
        finally:
            self.host = connect_host


def _tls_kwargs(tls: TlsSettings) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "connection_class": SSLConnection,
        "ssl_certfile": tls.cert,
        "ssl_keyfile": tls.key,
        "ssl_ca_certs": tls.cacert,
        "ssl_ca_path": tls.cacert_dir,
        "ssl_cert_reqs": "required",
        "ssl_check_hostname": True,
    }
    if tls.sni is not None:
        if not hasattr(SSLConnection, "_wrap_socket_with_ssl"):
            raise invalid_arg(f"--cache-config {CACHE_NAME},sni={tls.sni}: the installed "
                              f"redis-py ({redis.__version__}) cannot set the TLS server name")
        kwargs["connection_class"] = ServerNameSSLConnection
        kwargs["server_name"] = tls.sni
    return kwargs


def make_client(settings: RedisSettings) -> redis.Redis:
    """A client for ``settings``; it connects lazily, on its first call."""
    kwargs: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "db": settings.db,
        "username": settings.user,
        "password": settings.password,
        "socket_connect_timeout": settings.connect_timeout_s,
        "socket_timeout": settings.socket_timeout_s,
        "retry": Retry(NoBackoff(), 0),
        "client_name": CLIENT_NAME,
    }
    if settings.tls is not None:
        kwargs.update(_tls_kwargs(settings.tls))
    pool = redis.BlockingConnectionPool(
        max_connections=settings.pool_size, timeout=settings.wait_timeout_s, **kwargs)
    return redis.Redis(connection_pool=pool)
