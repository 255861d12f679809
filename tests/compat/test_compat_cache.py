"""Differential tests of the response cache: the same traffic to Triton and to naiad, both
started with ``--cache-config local,size=1048576``, and the same statistics and metric
lines.

Repository ``tests/compat/cache_repository``: ``add_sub_cached`` and ``strings_cached`` (the
compat suite's add_sub and strings with ``response_cache { enable: true }``) and the plain
``add_sub``. The traffic names no requested outputs: there naiad keys them and Triton does
not (docs/compatibility.md, "Deliberate differences").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from compat_helpers import (
    assert_same,
    eventually,
    http_request,
    infer_result_data,
    normalize_stats,
    on_both,
    parse_metrics,
)

pytestmark = pytest.mark.compat

httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")

COMPAT_MODEL_REPOSITORY = Path(__file__).resolve().parent / "cache_repository"
COMPAT_SERVER_ARGS = ["--cache-config", "local,size=1048576"]
MODELS = ("add_sub", "add_sub_cached", "strings_cached")
COMPAT_EXPECT_READY = MODELS
CACHE_PER_MODEL = ("nv_cache_num_hits_per_model", "nv_cache_num_misses_per_model")
CACHE_DURATIONS = ("nv_cache_hit_duration_per_model", "nv_cache_miss_duration_per_model")


def add_sub(module: Any, server: Any, model: str, a: list[float]) -> Any:
    url = server.http_url if module is httpclient else server.grpc_url
    inputs = [module.InferInput("INPUT0", [4], "FP32"), module.InferInput("INPUT1", [4], "FP32")]
    inputs[0].set_data_from_numpy(np.array(a, dtype=np.float32))
    inputs[1].set_data_from_numpy(np.full(4, 0.5, dtype=np.float32))
    result = module.InferenceServerClient(url).infer(model, inputs)
    return infer_result_data(result, ["OUTPUT0", "OUTPUT1"])


def strings(module: Any, server: Any, items: list[bytes]) -> Any:
    url = server.http_url if module is httpclient else server.grpc_url
    tensor = module.InferInput("INPUT0", [len(items)], "BYTES")
    tensor.set_data_from_numpy(np.array(items, dtype=object))
    result = module.InferenceServerClient(url).infer("strings_cached", [tensor])
    return infer_result_data(result, ["OUTPUT0"])


def traffic(server: Any) -> list[Any]:
    """Hits and misses over both protocols, in one order."""
    answers = []
    for module in (httpclient, grpcclient):
        for model in ("add_sub_cached", "add_sub"):
            for a in ([1, 2, 3, 4], [1, 2, 3, 4], [9, 9, 9, 9], [1, 2, 3, 4]):
                answers.append(add_sub(module, server, model, a))
        for items in ([b"a", b"bc"], [b"a", b"bc"], [b"ab", b"c"]):
            answers.append(strings(module, server, items))
    return answers


@pytest.fixture(scope="module")
def sent(servers: Any) -> None:
    """The traffic, once, to both servers; every answer the same."""
    t, n = on_both(traffic, servers.triton, servers.naiad)
    assert_same(t, n, "answers to the cached traffic")


def test_statistics_count_hits_and_misses_as_triton(servers: Any, sent: None) -> None:
    def check() -> None:
        for model in MODELS:
            path = f"/v2/models/{model}/stats"
            t, n = on_both(lambda s, path=path: http_request(s.http_port, "GET", path),
                           servers.triton, servers.naiad)
            assert (t.status, n.status) == (200, 200), f"{path}: {t!r} {n!r}"
            assert_same(normalize_stats(t.json()), normalize_stats(n.json()), f"GET {path}")

    eventually(check)


def test_the_cached_model_really_was_answered_from_the_cache(servers: Any, sent: None) -> None:
    doc = http_request(servers.naiad.http_port, "GET", "/v2/models/add_sub_cached/stats").json()
    stats = doc["model_stats"][0]
    # 8 requests (4 per protocol), 2 distinct inputs: the first of each misses
    assert stats["inference_stats"]["cache_hit"]["count"] == 6
    assert stats["execution_count"] == 2


def test_cache_metric_lines_equal_tritons(servers: Any, sent: None) -> None:
    def fetch(server: Any) -> dict[str, Any]:
        res = http_request(server.metrics_port, "GET", "/metrics")
        assert res.status == 200, res
        return {name: fam for name, fam in parse_metrics(res.body.decode()).items()
                if name.startswith("nv_cache_")}

    def check() -> None:
        tf, nf = on_both(fetch, servers.triton, servers.naiad)
        assert sorted(nf) == sorted(tf), "nv_cache_* families differ"
        for name, fam in tf.items():
            other = nf[name]
            assert (other.help, other.type) == (fam.help, fam.type), name
            if name in (*CACHE_PER_MODEL, *CACHE_DURATIONS):
                assert set(other.samples) == set(fam.samples), f"{name}: label sets"
            if name in CACHE_PER_MODEL:
                assert other.samples == fam.samples, f"{name}: values"

    eventually(check, timeout=4.0, interval=0.5)
