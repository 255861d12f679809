"""The redis cache against a real redis-server: hits and misses, the key prefix, entries
shared by two caches (two replicas), passwords, db numbers, TLS, threads and close()."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from redis_server import RedisServer, make_tls_files

from naiad.errors import InferenceServerError, Status
from naiad.plugins import PluginManager
from naiad_cache_redis import RedisResponseCache, parse_settings
from naiad_cache_redis.client import CLIENT_NAME

KEY = bytes(range(32))  # the core's keys are 32-byte digests
VALUE = b"naiad-response-1\n" + os.urandom(4096)
NO_ENV: dict[str, str] = {}


def open_cache(settings: dict[str, str]) -> RedisResponseCache:
    """The cache as ``naiad serve`` gets it: through the entry point and its start-up check."""
    cache = PluginManager().cache("redis", settings)
    assert isinstance(cache, RedisResponseCache)
    return cache


def refused(settings: dict[str, str]) -> str:
    with pytest.raises(InferenceServerError) as caught:
        open_cache(settings)
    assert caught.value.status is Status.INVALID_ARG
    return caught.value.message


def test_miss_then_hit(redis_server: RedisServer) -> None:
    cache = open_cache(redis_server.settings())
    try:
        assert cache.blocking is True
        assert cache.lookup(KEY) is None
        cache.insert(KEY, VALUE)
        assert cache.lookup(KEY) == VALUE
        assert cache.lookup(KEY[::-1]) is None
        cache.insert(KEY, b"newer")
        assert cache.lookup(KEY) == b"newer"
    finally:
        cache.close()


def test_entries_carry_the_key_prefix(redis_server: RedisServer) -> None:
    default = open_cache(redis_server.settings())
    custom = open_cache(redis_server.settings(key_prefix="replica-set-b/"))
    try:
        default.insert(KEY, VALUE)
        custom.insert(KEY, b"other deployment")
        stored = sorted(redis_server.client().keys("*"))
        assert stored == [b"naiad:" + KEY, b"replica-set-b/" + KEY]
        assert default.redis_key(KEY) == b"naiad:" + KEY
        # Two deployments with different prefixes on one Redis never answer each other.
        assert default.lookup(KEY) == VALUE
        assert custom.lookup(KEY) == b"other deployment"
    finally:
        default.close()
        custom.close()


def test_two_caches_on_one_redis_share_hits(redis_server: RedisServer) -> None:
    """Two servers (replicas behind a load balancer) each hold their own cache object."""
    first = open_cache(redis_server.settings())
    second = open_cache(redis_server.settings())
    try:
        assert second.lookup(KEY) is None
        first.insert(KEY, VALUE)
        assert second.lookup(KEY) == VALUE
        second.insert(KEY[::-1], b"from the second")
        assert first.lookup(KEY[::-1]) == b"from the second"
    finally:
        first.close()
        second.close()


def test_password(tmp_path: Path) -> None:
    server = RedisServer(tmp_path, ["--requirepass", "s3cret"], password="s3cret").start()
    try:
        cache = open_cache(server.settings(password="s3cret"))
        cache.insert(KEY, VALUE)
        assert cache.lookup(KEY) == VALUE
        cache.close()
        # Triton's environment variable, for a password kept out of the command line.
        from_env = RedisResponseCache(parse_settings(
            server.settings(), {"TRITONCACHE_REDIS_PASSWORD": "s3cret"}))
        from_env.check()
        assert from_env.lookup(KEY) == VALUE
        from_env.close()

        wrong = refused(server.settings(password="wrong"))
        assert "refused the credentials (user, password)" in wrong
        assert f"127.0.0.1:{server.port}" in wrong
        assert "refused the credentials" in refused(server.settings())
    finally:
        server.stop()


def test_user_and_password_of_an_acl_user(tmp_path: Path) -> None:
    # A user allowed only the cache's own commands and keys, and no default user.
    server = RedisServer(tmp_path, ["--user", "cacher", "on", ">pw", "~naiad:*", "+@connection",
                                    "+get", "+set", "--user", "default", "off"]).start()
    try:
        cache = open_cache(server.settings(user="cacher", password="pw"))
        cache.insert(KEY, VALUE)
        assert cache.lookup(KEY) == VALUE
        cache.close()
        assert "refused the credentials" in refused(server.settings(user="cacher",
                                                                    password="nope"))
    finally:
        server.stop()


def test_db(redis_server: RedisServer) -> None:
    cache = open_cache(redis_server.settings(db="3"))
    try:
        cache.insert(KEY, VALUE)
        assert redis_server.client(db=3).get(b"naiad:" + KEY) == VALUE
        assert redis_server.client(db=0).keys("*") == []
        assert cache.lookup(KEY) == VALUE
    finally:
        cache.close()
    message = refused(redis_server.settings(db="99"))
    assert "refused the settings (db=99?)" in message


def test_concurrent_threads_share_a_small_pool(redis_server: RedisServer) -> None:
    cache = open_cache(redis_server.settings(pool_size="2"))

    def round_trip(number: int) -> bool:
        key = number.to_bytes(32, "little")
        value = VALUE + number.to_bytes(4, "little")
        cache.insert(key, value)
        return cache.lookup(key) == value

    try:
        with ThreadPoolExecutor(8) as threads:
            assert all(threads.map(round_trip, range(400)))
        assert len(redis_server.client().keys("naiad:*")) == 400
    finally:
        cache.close()


def naiad_connections(server: RedisServer) -> list[dict[str, str]]:
    return [c for c in server.client().client_list() if c.get("name") == CLIENT_NAME]


def test_close_hands_the_connections_back(redis_server: RedisServer) -> None:
    cache = open_cache(redis_server.settings())
    cache.insert(KEY, VALUE)
    assert cache.lookup(KEY) == VALUE
    assert len(naiad_connections(redis_server)) == 1
    cache.close()
    assert naiad_connections(redis_server) == []


@pytest.fixture
def tls_server(tmp_path: Path) -> tuple[RedisServer, dict[str, Path]]:
    files = make_tls_files(tmp_path / "tls", "redis.test")
    server = RedisServer(
        tmp_path,
        ["--tls-cert-file", str(files["server.crt"]), "--tls-key-file", str(files["server.key"]),
         "--tls-ca-cert-file", str(files["ca.crt"]), "--tls-auth-clients", "yes"],
        tls={"ssl_ca_certs": str(files["ca.crt"]), "ssl_certfile": str(files["client.crt"]),
             "ssl_keyfile": str(files["client.key"]), "ssl_check_hostname": False},
    ).start()
    yield server, files
    server.stop()


def test_tls_with_client_certificate_and_server_name(
        tls_server: tuple[RedisServer, dict[str, Path]]) -> None:
    server, files = tls_server
    tls = {"tls_enabled": "true", "cacert": str(files["ca.crt"]),
           "cert": str(files["client.crt"]), "key": str(files["client.key"])}
    # The server's certificate names redis.test, not 127.0.0.1: sni names the server.
    cache = open_cache(server.settings(**tls, sni="redis.test"))
    try:
        cache.insert(KEY, VALUE)
        assert cache.lookup(KEY) == VALUE
        assert server.client().get(b"naiad:" + KEY) == VALUE
    finally:
        cache.close()
    by_directory = {k: v for k, v in tls.items() if k != "cacert"}
    cache = open_cache(server.settings(**by_directory, cacert_dir=str(files["ca_dir"]),
                                       sni="redis.test"))
    try:
        assert cache.lookup(KEY) == VALUE
    finally:
        cache.close()

    assert "certificate is not valid for '127.0.0.1'" in refused(server.settings(**tls))
    assert "not valid for 'other.test'" in refused(server.settings(**tls, sni="other.test"))
    no_client_certificate = {k: v for k, v in tls.items() if k not in ("cert", "key")}
    assert "the TLS handshake with redis" in refused(
        server.settings(**no_client_certificate, sni="redis.test"))
