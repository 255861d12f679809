"""``--cache-config redis,KEY=VALUE``: Triton's keys, their units and defaults, and every bad
value refused at start-up with the key and what it expects."""

from __future__ import annotations

from pathlib import Path

import pytest

from naiad.errors import InferenceServerError, Status
from naiad.plugins import PluginManager
from naiad_cache_redis.settings import (
    DEFAULT_CONNECT_TIMEOUT_MS,
    DEFAULT_KEY_PREFIX,
    DEFAULT_POOL_SIZE,
    DEFAULT_RETRY_INTERVAL_MS,
    DEFAULT_SOCKET_TIMEOUT_MS,
    DEFAULT_WAIT_TIMEOUT_MS,
    parse_settings,
)

ADDRESS = {"host": "redis.example", "port": "6379"}
NO_ENV: dict[str, str] = {}


def refused(settings: dict[str, str]) -> str:
    with pytest.raises(InferenceServerError) as caught:
        parse_settings(settings, NO_ENV)
    assert caught.value.status is Status.INVALID_ARG
    return caught.value.message


def test_defaults() -> None:
    parsed = parse_settings(ADDRESS, NO_ENV)
    assert (parsed.host, parsed.port, parsed.db) == ("redis.example", 6379, 0)
    assert parsed.user is None and parsed.password is None and parsed.tls is None
    assert parsed.connect_timeout_s == DEFAULT_CONNECT_TIMEOUT_MS / 1000
    assert parsed.socket_timeout_s == DEFAULT_SOCKET_TIMEOUT_MS / 1000
    assert parsed.wait_timeout_s == DEFAULT_WAIT_TIMEOUT_MS / 1000
    assert parsed.retry_interval_s == DEFAULT_RETRY_INTERVAL_MS / 1000
    assert parsed.pool_size == DEFAULT_POOL_SIZE
    assert parsed.key_prefix == DEFAULT_KEY_PREFIX == "naiad:"


def test_every_triton_key_is_read_in_its_unit() -> None:
    parsed = parse_settings({**ADDRESS, "user": "naiad", "password": "s3cret", "db": "2",
                             "connect_timeout": "250", "socket_timeout": "75",
                             "wait_timeout": "0", "pool_size": "3", "key_prefix": "prod:",
                             "retry_interval": "500"}, NO_ENV)
    assert (parsed.user, parsed.password, parsed.db) == ("naiad", "s3cret", 2)
    assert parsed.connect_timeout_s == 0.25
    assert parsed.socket_timeout_s == 0.075
    assert parsed.wait_timeout_s is None  # 0 waits forever, as in Triton
    assert parsed.pool_size == 3
    assert parsed.key_prefix == "prod:"
    assert parsed.retry_interval_s == 0.5


def test_credentials_from_tritons_environment_variables() -> None:
    env = {"TRITONCACHE_REDIS_USERNAME": "envuser", "TRITONCACHE_REDIS_PASSWORD": "envpass"}
    parsed = parse_settings(ADDRESS, env)
    assert (parsed.user, parsed.password) == ("envuser", "envpass")
    given = parse_settings({**ADDRESS, "user": "cli", "password": "clipass"}, env)
    assert (given.user, given.password) == ("cli", "clipass")


def test_tls_settings(tmp_path: Path) -> None:
    for name in ("client.crt", "client.key", "ca.crt"):
        (tmp_path / name).write_text("PEM")
    parsed = parse_settings({**ADDRESS, "tls_enabled": "true",
                             "cert": str(tmp_path / "client.crt"),
                             "key": str(tmp_path / "client.key"),
                             "cacert": str(tmp_path / "ca.crt"), "cacert_dir": str(tmp_path),
                             "sni": "redis.internal"}, NO_ENV)
    assert parsed.tls is not None
    assert parsed.tls.cert == str(tmp_path / "client.crt")
    assert parsed.tls.cacert_dir == str(tmp_path)
    assert parsed.tls.sni == "redis.internal"
    assert parse_settings({**ADDRESS, "tls_enabled": "false"}, NO_ENV).tls is None


@pytest.mark.parametrize(("settings", "expected"), [
    ({"host": "h"}, "needs at least 'host' and 'port'"),
    ({"port": "6379"}, "needs at least 'host' and 'port'"),
    ({"host": "10.0.0.5,port=6380"}, "host=10.0.0.5,port=6380: one setting per flag, e.g. "
                                     "--cache-config redis,host=redis "
                                     "--cache-config redis,port=6379"),
    ({**ADDRESS, "hostname": "x"}, "unknown setting 'hostname'"),
    ({**ADDRESS, "username": "x"}, "unknown setting 'username'"),
    ({"host": "h", "port": "redis"}, "port=redis: expected a whole number from 1 to 65535"),
    ({"host": "h", "port": "70000"}, "port=70000: expected a whole number from 1 to 65535"),
    ({"host": "", "port": "6379"}, "host=: expected a non-empty string"),
    ({**ADDRESS, "db": "-1"}, "db=-1: expected a whole number, at least 0"),
    ({**ADDRESS, "connect_timeout": "-5"},
     "connect_timeout=-5: expected a whole number of milliseconds (0 waits forever), at "
     "least 0"),
    ({**ADDRESS, "socket_timeout": "1.5"},
     "socket_timeout=1.5: expected a whole number of milliseconds"),
    ({**ADDRESS, "wait_timeout": "soon"},
     "wait_timeout=soon: expected a whole number of milliseconds"),
    ({**ADDRESS, "retry_interval": "-1"},
     "retry_interval=-1: expected a whole number of milliseconds, at least 0"),
    ({**ADDRESS, "pool_size": "0"}, "pool_size=0: expected a whole number, at least 1"),
    ({**ADDRESS, "tls_enabled": "maybe"}, "tls_enabled=maybe: expected true or false"),
    ({**ADDRESS, "sni": "redis.internal"}, "sni=...: TLS settings need "
                                           "--cache-config redis,tls_enabled=true"),
    ({**ADDRESS, "tls_enabled": "true", "cacert": "/nonexistent/ca.crt"},
     "cacert=/nonexistent/ca.crt: expected an existing file"),
    ({**ADDRESS, "tls_enabled": "true", "cacert_dir": "/nonexistent"},
     "cacert_dir=/nonexistent: expected an existing directory"),
])
def test_bad_settings_are_refused_naming_the_key(settings: dict[str, str],
                                                  expected: str) -> None:
    message = refused(settings)
    assert expected in message
    assert message.startswith("--cache-config redis") or "the redis cache" in message


def test_a_client_key_needs_its_certificate(tmp_path: Path) -> None:
    (tmp_path / "client.key").write_text("PEM")
    message = refused({**ADDRESS, "tls_enabled": "true", "key": str(tmp_path / "client.key")})
    assert "a client key needs its certificate (--cache-config redis,cert=PATH)" in message


def test_the_entry_point_claims_redis_only_and_refuses_bad_settings() -> None:
    """Through naiad's own plugin manager: the entry point loads by name, passes on other
    names, and its errors reach the caller as INVALID_ARG."""
    manager = PluginManager()
    with pytest.raises(InferenceServerError) as caught:
        manager.cache("redis", {"host": "127.0.0.1", "port": "6379", "socket_timeout": "-1"})
    assert caught.value.status is Status.INVALID_ARG
    assert "socket_timeout=-1" in caught.value.message
    from naiad_cache_redis import plugin

    assert plugin.naiad_cache(name="local", settings={"size": "1024"}) is None
