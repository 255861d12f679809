"""The redis cache end to end: two real ``naiad serve`` processes (two replicas) with
``--cache-config redis,...`` on one real redis-server, the official clients over HTTP and
gRPC, and the examples' add_sub with ``response_cache { enable: true }``."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from redis_server import RedisServer

from naiad.testing import ServerProcess, naiad_server

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "model_repository"
SECONDS = 1.0
# A safety net for waiting on an insert that lands after its response was sent.
STORE_TIMEOUT_S = 30 * SECONDS


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cached")
    shutil.copytree(EXAMPLES / "add_sub", root / "add_sub",
                    ignore=shutil.ignore_patterns("__pycache__"))
    config = root / "add_sub" / "config.pbtxt"
    config.write_text(config.read_text() + "\nresponse_cache { enable: true }\n")
    return root


def cached_server(repo: Path, redis_server: RedisServer) -> Iterator[ServerProcess]:
    # Triton's spelling, one setting per flag. retry_interval=0: after Redis failed, every
    # request asks it again, so the outage test sees each request meet the outage.
    with naiad_server("--model-repository", str(repo),
                      "--cache-config", "redis,host=127.0.0.1",
                      "--cache-config", f"redis,port={redis_server.port}",
                      "--cache-config", "redis,retry_interval=0") as process:
        yield process


@pytest.fixture(scope="module")
def replica_a(repo: Path, redis_server: RedisServer) -> Iterator[ServerProcess]:
    yield from cached_server(repo, redis_server)


@pytest.fixture(scope="module")
def replica_b(repo: Path, redis_server: RedisServer) -> Iterator[ServerProcess]:
    yield from cached_server(repo, redis_server)


def stats(server: ServerProcess) -> dict[str, int]:
    client = httpclient.InferenceServerClient(server.http_url)
    found = client.get_inference_statistics("add_sub")["model_stats"][0]
    return {"executions": found["execution_count"],
            "hits": found["inference_stats"]["cache_hit"]["count"],
            "misses": found["inference_stats"]["cache_miss"]["count"],
            "successes": found["inference_stats"]["success"]["count"]}


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {key: after[key] - before[key] for key in before}


def infer(server: ServerProcess, protocol: str, a: list[float]) -> None:
    """add_sub on ``a`` and ones; checks both outputs."""
    module = httpclient if protocol == "http" else grpcclient
    url = server.http_url if protocol == "http" else server.grpc_url
    inputs = [module.InferInput("INPUT0", [4], "FP32"), module.InferInput("INPUT1", [4], "FP32")]
    inputs[0].set_data_from_numpy(np.array(a, dtype=np.float32))
    inputs[1].set_data_from_numpy(np.ones(4, dtype=np.float32))
    result = module.InferenceServerClient(url).infer("add_sub", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.array(a) + 1)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.array(a) - 1)


def wait_for_entries(redis_server: RedisServer, count: int) -> None:
    """Wait until Redis holds ``count`` naiad entries (the server inserts after it answered)."""
    client = redis_server.client()
    deadline = time.monotonic() + STORE_TIMEOUT_S
    while len(client.keys("naiad:*")) < count:
        assert time.monotonic() < deadline, f"Redis never held {count} entries"
        time.sleep(0.01)


def entries(redis_server: RedisServer) -> int:
    return len(redis_server.client().keys("naiad:*"))


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_repeated_request_is_a_hit(replica_a: ServerProcess, redis_server: RedisServer,
                                     protocol: str) -> None:
    a = [1, 2, 3, 4] if protocol == "http" else [5, 6, 7, 8]
    stored = entries(redis_server)
    before = stats(replica_a)
    infer(replica_a, protocol, a)
    wait_for_entries(redis_server, stored + 1)
    infer(replica_a, protocol, a)
    assert delta(before, stats(replica_a)) == {"executions": 1, "hits": 1, "misses": 1,
                                               "successes": 2}


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_two_replicas_share_hits(replica_a: ServerProcess, replica_b: ServerProcess,
                                 redis_server: RedisServer, protocol: str) -> None:
    a = [10, 11, 12, 13] if protocol == "http" else [14, 15, 16, 17]
    stored = entries(redis_server)
    infer(replica_a, protocol, a)
    wait_for_entries(redis_server, stored + 1)
    before = stats(replica_b)
    infer(replica_b, protocol, a)  # replica b never ran this request
    assert delta(before, stats(replica_b)) == {"executions": 0, "hits": 1, "misses": 0,
                                               "successes": 1}


def test_redis_stopped_mid_run_then_back(replica_a: ServerProcess, replica_b: ServerProcess,
                                         redis_server: RedisServer) -> None:
    infer(replica_b, "http", [20, 0, 0, 0])  # both replicas are up before Redis stops
    redis_server.stop()
    try:
        before = stats(replica_a)
        for protocol in ("http", "grpc"):
            for _ in range(2):  # the same request: no entry can be stored, so no hits
                infer(replica_a, protocol, [21, 22, 23, 24])
        assert delta(before, stats(replica_a)) == {"executions": 4, "hits": 0, "misses": 4,
                                                   "successes": 4}
        warnings = [line for line in replica_a.log().splitlines()
                    if f"redis at 127.0.0.1:{redis_server.port} did not answer" in line]
        assert len(warnings) == 1, warnings  # rate-limited: one line for eight failed calls
    finally:
        redis_server.start()  # the same port, empty (no persistence)
    before = stats(replica_a)
    infer(replica_a, "grpc", [21, 22, 23, 24])
    wait_for_entries(redis_server, 1)
    infer(replica_a, "http", [21, 22, 23, 24])
    assert delta(before, stats(replica_a)) == {"executions": 1, "hits": 1, "misses": 1,
                                               "successes": 2}
    assert "answers again" in replica_a.log()
