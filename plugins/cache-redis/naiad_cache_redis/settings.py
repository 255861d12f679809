"""``--cache-config redis,KEY=VALUE``: Triton's redis cache keys, parsed and checked once.

The keys, their units (milliseconds) and the environment variables for the credentials are
those of Triton's redis cache (triton-inference-server/redis_cache): ``host``, ``port``,
``user``, ``password``, ``db``, ``connect_timeout``, ``socket_timeout``, ``pool_size``,
``wait_timeout``, ``tls_enabled``, ``cert``, ``key``, ``cacert``, ``cacert_dir``, ``sni``.
naiad adds ``key_prefix`` and ``retry_interval``. Where a default differs from Triton's,
README.md says why. An unknown key or a bad value is refused at start-up with a message that
names the key and what it expects; nothing given is ever ignored.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from naiad.errors import InferenceServerError, invalid_arg
from naiad.settings import boolean, integer, read, refuse

CACHE_NAME = "redis"

MILLISECONDS = 1 / 1000  # in seconds

# Triton's environment variables for the credentials; a key given on the command line wins.
USERNAME_ENV = "TRITONCACHE_REDIS_USERNAME"
PASSWORD_ENV = "TRITONCACHE_REDIS_PASSWORD"

# Defaults. Triton waits forever for a connection and a reply (0); naiad never lets the
# cache stall an inference, so both are bounded.
DEFAULT_CONNECT_TIMEOUT_MS = 1000
DEFAULT_SOCKET_TIMEOUT_MS = 1000
DEFAULT_WAIT_TIMEOUT_MS = 1000  # Triton's (its code; its README still says 100)
# Triton: 1. naiad asks a remote cache from 4 threads at once (BLOCKING_CACHE_THREADS in
# naiad/response_cache.py); one connection would make them queue behind each other.
DEFAULT_POOL_SIZE = 4
DEFAULT_RETRY_INTERVAL_MS = 1000
DEFAULT_KEY_PREFIX = "naiad:"
DEFAULT_DB = 0

_TLS_FILE_KEYS = ("cert", "key", "cacert", "cacert_dir", "sni")
KNOWN_KEYS = frozenset({
    "host", "port", "user", "password", "db", "connect_timeout", "socket_timeout",
    "pool_size", "wait_timeout", "tls_enabled", *_TLS_FILE_KEYS, "key_prefix",
    "retry_interval",
})

# "host=10.0.0.5,port=6380" given as one flag: the value swallowed the next setting.
_JOINED = re.compile(r",\s*[A-Za-z_]+=")


@dataclass(frozen=True)
class TlsSettings:
    """TLS to Redis (``tls_enabled=true``); file paths are checked to exist at start-up."""

    cert: str | None = None  # client certificate (mutual TLS), PEM
    key: str | None = None  # its private key, PEM
    cacert: str | None = None  # CA bundle that signs the server's certificate
    cacert_dir: str | None = None  # a directory of hashed CA certificates (c_rehash)
    sni: str | None = None  # the server name sent and checked instead of ``host``


@dataclass(frozen=True)
class RedisSettings:
    """Everything the redis cache was configured with; timeouts in seconds, None = forever."""

    host: str
    port: int
    user: str | None = None
    password: str | None = None
    db: int = DEFAULT_DB
    connect_timeout_s: float | None = DEFAULT_CONNECT_TIMEOUT_MS * MILLISECONDS
    socket_timeout_s: float | None = DEFAULT_SOCKET_TIMEOUT_MS * MILLISECONDS
    wait_timeout_s: float | None = DEFAULT_WAIT_TIMEOUT_MS * MILLISECONDS
    pool_size: int = DEFAULT_POOL_SIZE
    retry_interval_s: float = DEFAULT_RETRY_INTERVAL_MS * MILLISECONDS
    key_prefix: str = DEFAULT_KEY_PREFIX
    tls: TlsSettings | None = None

    @property
    def address(self) -> str:
        """``host:port`` for log lines (never the credentials)."""
        return f"{self.host}:{self.port}"


#: where every redis setting is given, as messages name it
WHERE = f"--cache-config {CACHE_NAME},"


def _refuse(key: str, value: str, expected: str) -> InferenceServerError:
    return refuse(key, value, expected, WHERE)


def _timeout(settings: Mapping[str, str], key: str, default_ms: int) -> float | None:
    """A timeout in milliseconds, as seconds; 0 means wait forever (None), as in Triton."""
    ms = read(settings, key, default_ms, integer, minimum=0,
              unit="milliseconds (0 waits forever)", where=WHERE)
    return None if ms == 0 else ms * MILLISECONDS


def _text(settings: Mapping[str, str], key: str) -> str | None:
    if key not in settings:
        return None
    value = settings[key]
    if not value:
        raise _refuse(key, value, "a non-empty string")
    return value


def _existing(settings: Mapping[str, str], key: str, *, directory: bool) -> str | None:
    path = _text(settings, key)
    if path is None:
        return None
    found = Path(path)
    if not (found.is_dir() if directory else found.is_file()):
        raise _refuse(key, path, "an existing directory" if directory else "an existing file")
    if not os.access(found, os.R_OK):
        raise _refuse(key, path, "a path the server can read")
    return path


def _tls(settings: Mapping[str, str]) -> TlsSettings | None:
    given = [key for key in _TLS_FILE_KEYS if key in settings]
    if not read(settings, "tls_enabled", False, boolean, where=WHERE):
        if given:
            # Triton reads them only with tls_enabled present; naiad never ignores a setting.
            raise invalid_arg(f"--cache-config {CACHE_NAME},{given[0]}=...: TLS settings need "
                              f"--cache-config {CACHE_NAME},tls_enabled=true")
        return None
    tls = TlsSettings(
        cert=_existing(settings, "cert", directory=False),
        key=_existing(settings, "key", directory=False),
        cacert=_existing(settings, "cacert", directory=False),
        cacert_dir=_existing(settings, "cacert_dir", directory=True),
        sni=_text(settings, "sni"),
    )
    if tls.key is not None and tls.cert is None:
        raise invalid_arg(f"--cache-config {CACHE_NAME},key={tls.key}: a client key needs "
                          f"its certificate (--cache-config {CACHE_NAME},cert=PATH)")
    return tls


def parse_settings(settings: Mapping[str, str],
                   environ: Mapping[str, str] | None = None) -> RedisSettings:
    """The checked settings of ``--cache-config redis,...``; ``environ`` supplies Triton's
    credential variables (``os.environ`` when None). Raises INVALID_ARG naming the key."""
    environ = os.environ if environ is None else environ
    unknown = sorted(set(settings) - KNOWN_KEYS)
    if unknown:
        raise invalid_arg(f"--cache-config {CACHE_NAME},{unknown[0]}=...: unknown setting "
                          f"'{unknown[0]}' of the redis cache; known: "
                          f"{', '.join(sorted(KNOWN_KEYS))}")
    for key, value in settings.items():
        if key != "password" and _JOINED.search(value):
            # tritonserver reads one setting per flag, and so does naiad.
            raise invalid_arg(f"--cache-config {CACHE_NAME},{key}={value}: one setting per "
                              f"flag, e.g. --cache-config {CACHE_NAME},host=redis "
                              f"--cache-config {CACHE_NAME},port=6379")
    if "host" not in settings or "port" not in settings:
        raise invalid_arg(f"the redis cache needs at least 'host' and 'port', e.g. "
                          f"--cache-config {CACHE_NAME},host=redis "
                          f"--cache-config {CACHE_NAME},port=6379")
    host = _text(settings, "host")
    assert host is not None
    return RedisSettings(
        host=host,
        port=integer("port", settings["port"], minimum=1, maximum=65535, where=WHERE),
        user=_text(settings, "user") or environ.get(USERNAME_ENV) or None,
        password=_text(settings, "password") or environ.get(PASSWORD_ENV) or None,
        db=read(settings, "db", DEFAULT_DB, integer, minimum=0, where=WHERE),
        connect_timeout_s=_timeout(settings, "connect_timeout", DEFAULT_CONNECT_TIMEOUT_MS),
        socket_timeout_s=_timeout(settings, "socket_timeout", DEFAULT_SOCKET_TIMEOUT_MS),
        wait_timeout_s=_timeout(settings, "wait_timeout", DEFAULT_WAIT_TIMEOUT_MS),
        pool_size=read(settings, "pool_size", DEFAULT_POOL_SIZE, integer, minimum=1,
                       where=WHERE),
        retry_interval_s=read(settings, "retry_interval", DEFAULT_RETRY_INTERVAL_MS, integer,
                              minimum=0, unit="milliseconds", where=WHERE) * MILLISECONDS,
        key_prefix=settings.get("key_prefix", DEFAULT_KEY_PREFIX),
        tls=_tls(settings),
    )
