"""``--metrics-config`` against the real Triton 2.51: the same keys, the same traffic, the
same metric families, HELP and TYPE lines, label sets and counts.

Both servers serve ``tests/compat/cache_repository`` (``add_sub_cached`` with
``response_cache { enable: true }``, the plain ``add_sub``) with a response cache and every
Triton key away from its default at once: ``summary_latencies=true`` (summaries appear),
``summary_quantiles`` (their quantile labels), ``counter_latencies=false`` (the duration and
per-model cache counters go). The defaults are compared by test_compat_http.py and
test_compat_cache.py. naiad's own families (``naiad_*``) are the only ones Triton lacks;
Triton's pinned-memory gauges the only ones naiad lacks. Durations and quantile values
differ between any two runs and are not compared; counts are.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from compat_helpers import MetricFamily, eventually, http_request, on_both, parse_metrics

pytestmark = pytest.mark.compat

httpclient = pytest.importorskip("tritonclient.http")

COMPAT_MODEL_REPOSITORY = Path(__file__).resolve().parent / "cache_repository"
COMPAT_EXPECT_READY = ("add_sub", "add_sub_cached", "strings_cached")
QUANTILES = ("0.25", "0.75")
COMPAT_SERVER_ARGS = [
    "--cache-config", "local,size=1048576",
    "--metrics-config", "summary_latencies=true",
    "--metrics-config", f"summary_quantiles={QUANTILES[0]}:0.01,{QUANTILES[1]}:0.01",
    "--metrics-config", "counter_latencies=false",
]
CACHE_COUNTERS = {"nv_cache_num_hits_per_model", "nv_cache_hit_duration_per_model",
                  "nv_cache_num_misses_per_model", "nv_cache_miss_duration_per_model"}
PINNED = {"nv_pinned_memory_pool_total_bytes", "nv_pinned_memory_pool_used_bytes"}
HITS = 3  # add_sub_cached: one miss, then this many hits
PLAIN = 4  # add_sub requests


def traffic(server: Any) -> None:
    with httpclient.InferenceServerClient(server.http_url) as client:
        for model, count in (("add_sub_cached", 1 + HITS), ("add_sub", PLAIN)):
            for _ in range(count):
                tensors = [httpclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
                for tensor in tensors:
                    tensor.set_data_from_numpy(np.arange(4, dtype=np.float32))
                client.infer(model, tensors)


@pytest.fixture(scope="module")
def scraped(servers: Any) -> tuple[dict[str, MetricFamily], dict[str, MetricFamily]]:
    """Triton's and naiad's families after the same traffic, once Triton's server-wide
    cache gauges (updated every --metrics-interval-ms, 2 s) have caught up."""
    on_both(traffic, servers.triton, servers.naiad)
    found: list[dict[str, MetricFamily]] = []

    def fetch(server: Any) -> dict[str, MetricFamily]:
        res = http_request(server.metrics_port, "GET", "/metrics")
        assert res.status == 200, res
        return parse_metrics(res.body.decode())

    def settled() -> None:
        found[:] = on_both(fetch, servers.triton, servers.naiad)
        lookups = found[0]["nv_cache_num_lookups"].samples[()]
        assert lookups == 1 + HITS, f"Triton's cache gauges not updated yet: {lookups}"

    eventually(settled, timeout=15.0, interval=0.5)
    return found[0], found[1]


def test_the_same_families_with_the_same_help_type_and_labels(scraped, strict):
    tf, nf = scraped
    missing = set(tf) - set(nf) - (PINNED if strict else set())
    assert not missing, f"families missing in naiad: {sorted(missing)}"
    extra = set(nf) - set(tf)
    assert all(name.startswith("naiad_") for name in extra), sorted(extra)
    problems = []
    for name, family in tf.items():
        if name not in nf:
            continue
        other = nf[name]
        if (family.help, family.type) != (other.help, other.type):
            problems.append(f"{name}: triton {(family.help, family.type)} naiad "
                            f"{(other.help, other.type)}")
        theirs, ours = set(family.samples), set(other.samples)
        if name.startswith(("nv_inference_", "nv_cache_")) and theirs != ours:
            problems.append(f"{name}: only in triton {sorted(theirs - ours)}, only in naiad "
                            f"{sorted(ours - theirs)}")
    assert not problems, "\n".join(problems)


def test_each_key_shows_in_both(scraped):
    for families in scraped:
        # summary_latencies=true, with the configured quantiles; none for the request of a
        # cached model (Triton's rule)
        quantiles = {dict(labels)["quantile"]
                     for labels in families["nv_inference_queue_summary_us"].samples}
        assert quantiles == set(QUANTILES)
        assert {dict(labels)["model"]
                for labels in families["nv_inference_request_summary_us"].samples} == {
            "add_sub"}
        # counter_latencies=false: no duration counters, no per-model cache counters
        assert not [n for n in families if n.endswith("_duration_us") or n in CACHE_COUNTERS]


def test_the_same_counts(scraped):
    tf, nf = scraped
    # the summaries' _count lines (parse_metrics files them under their sample name) and
    # the cache's counts
    counted = [name for name in tf if ("summary" in name and name.endswith("_count"))
               or name.startswith("nv_cache_num_")]
    assert "nv_cache_hit_summary_per_model_count" in counted and "nv_cache_num_hits" in counted
    problems = [f"{name}{dict(labels)}: triton {value}, naiad {nf[name].samples.get(labels)}"
                for name in counted for labels, value in tf[name].samples.items()
                if name in nf and nf[name].samples.get(labels) != value]
    assert not problems, "\n".join(problems)
    labels = (("model", "add_sub_cached"), ("version", "1"))
    assert tf["nv_cache_hit_summary_per_model_count"].samples[labels] == HITS
    assert tf["nv_inference_queue_summary_us_count"].samples[labels] == 1 + HITS


def test_counter_latencies_false_keeps_counting_where_triton_stops(scraped, strict):
    """A deliberate difference (docs/metrics.md): with counter_latencies=false Triton 2.51
    no longer counts successes or inferences (every counter stays 0); naiad keeps counting
    and removes only the duration and cache counters, as Triton's documentation says."""
    if not strict:
        pytest.skip("a naiad-only check")
    tf, nf = scraped
    labels = (("model", "add_sub"), ("version", "1"))
    assert tf["nv_inference_request_success"].samples[labels] == 0
    assert nf["nv_inference_request_success"].samples[labels] == PLAIN
    assert nf["nv_inference_count"].samples[labels] == PLAIN
