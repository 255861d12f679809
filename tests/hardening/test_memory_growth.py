"""Triton's qa/L0_memory_growth, ported: the resident memory of the server and its model
worker processes (read from /proc/<pid>/status) over N requests stays within a bound. The
same check run against ``leaky`` (tests/hardening/models/leaky: a model that keeps every
input) must trip, so the check is shown able to fail."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.http as httpclient
from hardening_support import ANSWER_TIMEOUT_S, hardening_repository, rss_bytes

from naiad.testing import naiad_server

MIB = 1024 * 1024
VALUES = 128 * 1024  # FP32 values per request: 512 KiB
WARM_UP = 20  # requests before the first measure (allocator arenas, lazy imports)
REQUESTS = 100  # requests between the two measures (the leak keeps 50 MiB of them)
LONG_REQUESTS = 3000
BOUND = 24 * MIB  # growth allowed over the requests


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = hardening_repository(tmp_path_factory.mktemp("memory-growth"), "leaky")
    with naiad_server("--model-repository", str(repo)) as process:
        yield process


def growth(server, model: str, requests: int) -> int:
    """Bytes of resident memory the server and its workers gained over ``requests``
    inferences on ``model`` (after WARM_UP of them); each answer is checked."""
    data = np.arange(VALUES, dtype=np.float32)
    tensor = httpclient.InferInput("INPUT0", [VALUES], "FP32")
    tensor.set_data_from_numpy(data)
    with httpclient.InferenceServerClient(server.http_url,
                                          network_timeout=ANSWER_TIMEOUT_S) as client:
        def run(count: int) -> None:
            for _ in range(count):
                answer = client.infer(model, [tensor]).as_numpy("OUTPUT0")
                assert answer[-1] == data[-1]

        run(WARM_UP)
        before = rss_bytes(server.process.pid)
        run(requests)
        return rss_bytes(server.process.pid) - before


def test_memory_stays_flat(server):
    gained = growth(server, "identity_fp32", REQUESTS)
    assert gained < BOUND, f"{gained / MIB:.1f} MiB over {REQUESTS} requests"


def test_the_check_trips_on_a_leaking_model(server):
    gained = growth(server, "leaky", REQUESTS)
    assert gained >= BOUND, f"only {gained / MIB:.1f} MiB: the check would miss this leak"


@pytest.mark.long
def test_memory_stays_flat_over_many_requests(server):
    gained = growth(server, "identity_fp32", LONG_REQUESTS)
    assert gained < BOUND, f"{gained / MIB:.1f} MiB over {LONG_REQUESTS} requests"
