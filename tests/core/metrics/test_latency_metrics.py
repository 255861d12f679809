"""Latency histograms, summaries, batch cut reasons and cache lines, end to end: the real
tritonclient (HTTP and gRPC) against real naiad server processes, read back from the
metrics port as Prometheus parses it.

Each ``--metrics-config`` key is checked by what it changes in the exposition; the same
keys are compared line set by line set with Triton 2.51 in
tests/compat/test_compat_metrics_config.py.
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException
from zoo import ADD_SUB_CONFIG, ADD_SUB_PY, IDENTITY_PY, SLOW_PY, identity_config, write_model

from naiad.metrics.config import DEFAULT_BATCH_SIZE_BUCKETS, DEFAULT_LATENCY_BUCKETS_MS
from naiad.scheduling.batch_policy import CutReason
from naiad.testing import ServerProcess, naiad_server

REQUEST = "naiad_inference_request_duration_ms"
QUEUE = "naiad_inference_queue_duration_ms"
INFER = "naiad_inference_compute_infer_duration_ms"
BATCH = "naiad_inference_exec_batch_size"
CUTS = "naiad_batch_cut_total"
CACHE = ("--cache-config", "local,size=1048576")
# identity_batch is sent this many requests of ROWS rows each
N = 7
ROWS = 3


def _batched(name: str, batching: str) -> str:
    return identity_config(name, "TYPE_FP32", 8) + f"dynamic_batching {{ {batching} }}\n"


def _repository(repo):
    write_model(repo, "add_sub", ADD_SUB_CONFIG + "response_cache { enable: true }\n",
                ADD_SUB_PY)
    write_model(repo, "identity_batch", identity_config("identity_batch", "TYPE_FP32", 8),
                IDENTITY_PY)
    write_model(repo, "batch_nodelay", _batched("batch_nodelay", ""), IDENTITY_PY)
    write_model(repo, "batch_delay",
                _batched("batch_delay", "max_queue_delay_microseconds: 1000"), IDENTITY_PY)
    write_model(repo, "batch_preferred", _batched(
        "batch_preferred", "preferred_batch_size: [ 2 ] max_queue_delay_microseconds: "
                           "30000000"), IDENTITY_PY)
    # one instance busy for 1 s; a request queued for 0.1 s is rejected
    write_model(repo, "batch_timeout", _batched(
        "batch_timeout", "default_queue_policy { timeout_action: REJECT "
                         "default_timeout_microseconds: 100000 }"), SLOW_PY)
    return repo


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def scrape(server: ServerProcess) -> dict[str, dict[tuple, float]]:
    """family (its ``# TYPE`` name) -> {(sample name, sorted labels): value}, the names as
    printed. prometheus_client parses the text first: it must be valid."""
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics",
                                timeout=10) as answer:
        text = answer.read().decode()
    list(text_string_to_metric_families(text))
    families: dict[str, dict[tuple, float]] = {}
    current: dict[tuple, float] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            current = families.setdefault(line.split()[2], {})
        elif line and not line.startswith("#"):
            match = _SAMPLE.match(line)
            assert match, line
            name, labels, number = match.groups()
            current[(name, tuple(sorted(_LABEL.findall(labels or ""))))] = float(number)
    return families


def value(families, family: str, sample: str, **labels: str) -> float:
    return families[family][(sample, tuple(sorted(labels.items())))]


def buckets(families, family: str, model: str) -> list[tuple[float, float]]:
    """(le, cumulative count) of one version's histogram, in bound order."""
    found = [(float(dict(key)["le"]), count) for (name, key), count in families[family].items()
             if name == f"{family}_bucket" and dict(key)["model"] == model]
    return sorted(found)


def _identity(client, module, model: str, rows: int = ROWS):
    tensor = module.InferInput("INPUT0", [rows, 4], "FP32")
    tensor.set_data_from_numpy(np.ones((rows, 4), np.float32))
    return client.infer(model, [tensor])


def _add_sub(client) -> None:
    tensors = [httpclient.InferInput(name, [4], "FP32") for name in ("INPUT0", "INPUT1")]
    for tensor in tensors:
        tensor.set_data_from_numpy(np.arange(4, dtype=np.float32))
    client.infer("add_sub", tensors)


def _traffic(server: ServerProcess) -> None:
    """The same requests for every server of this module."""
    with httpclient.InferenceServerClient(server.http_url, concurrency=2) as http, \
            grpcclient.InferenceServerClient(server.grpc_url) as grpc:
        for i in range(N):
            _identity(*((http, httpclient) if i % 2 else (grpc, grpcclient)),
                      "identity_batch")
        for _ in range(4):
            _add_sub(http)  # one miss, then three hits
        for _ in range(3):
            _identity(http, httpclient, "batch_nodelay", rows=1)
            _identity(grpc, grpcclient, "batch_delay", rows=1)
        # two at once: the first waits (30 s delay) until the second makes the preferred 2
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda _: _identity(
                httpclient.InferenceServerClient(server.http_url), httpclient,
                "batch_preferred", rows=1), range(2)))


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory):
    return _repository(tmp_path_factory.mktemp("latency_metrics"))


@pytest.fixture(scope="module")
def default_server(repo) -> Iterator[ServerProcess]:
    """A server with the default metrics settings and a response cache, after _traffic."""
    with naiad_server("--model-repository", str(repo), *CACHE) as server:
        _traffic(server)
        yield server


@pytest.fixture(scope="module")
def default(default_server) -> dict:
    return scrape(default_server)


@pytest.fixture(scope="module")
def configured(repo) -> Iterator[dict]:
    """Every key away from its default, after the same traffic."""
    with naiad_server("--model-repository", str(repo), *CACHE,
                      "--metrics-config", "counter_latencies=false",
                      "--metrics-config", "summary_latencies=true",
                      "--metrics-config", "summary_quantiles=0.25:0.01,0.75:0.01",
                      "--metrics-config", "summary_max_age=600",
                      "--metrics-config", "naiad_latency_buckets_ms=1,10,100",
                      "--metrics-config", "naiad_batch_size_buckets=2,4") as server:
        _traffic(server)
        yield scrape(server)


def test_histograms_count_every_successful_request(default):
    success = value(default, "nv_inference_request_success", "nv_inference_request_success",
                    model="identity_batch", version="1")
    assert success == N
    for family in (REQUEST, QUEUE, INFER):
        labels = {"model": "identity_batch", "version": "1"}
        assert value(default, family, f"{family}_count", **labels) == N
        cumulative = buckets(default, family, "identity_batch")
        assert [le for le, _ in cumulative] == [*DEFAULT_LATENCY_BUCKETS_MS, float("inf")]
        counts = [count for _, count in cumulative]
        assert counts == sorted(counts) and counts[-1] == N  # cumulative, +Inf is _count
        assert value(default, family, f"{family}_sum", **labels) > 0


def test_the_batch_size_histogram_counts_executions_by_their_inferences(default):
    labels = {"model": "identity_batch", "version": "1"}
    assert value(default, BATCH, f"{BATCH}_count", **labels) == value(
        default, "nv_inference_exec_count", "nv_inference_exec_count", **labels) == N
    assert value(default, BATCH, f"{BATCH}_sum", **labels) == N * ROWS
    cumulative = dict(buckets(default, BATCH, "identity_batch"))
    assert list(cumulative) == [*map(float, DEFAULT_BATCH_SIZE_BUCKETS), float("inf")]
    assert (cumulative[2.0], cumulative[4.0]) == (0, N)  # every batch held 3 rows


def test_cache_hits_are_requests_without_compute(default):
    labels = {"model": "add_sub", "version": "1"}
    assert value(default, REQUEST, f"{REQUEST}_count", **labels) == 4
    assert value(default, QUEUE, f"{QUEUE}_count", **labels) == 4
    assert value(default, INFER, f"{INFER}_count", **labels) == 1
    assert value(default, "nv_cache_num_hits_per_model", "nv_cache_num_hits_per_model",
                 **labels) == 3
    assert value(default, "nv_cache_num_misses_per_model", "nv_cache_num_misses_per_model",
                 **labels) == 1
    for family in ("nv_cache_hit_duration_per_model", "nv_cache_miss_duration_per_model"):
        assert set(default[family]) == {(family, tuple(sorted(labels.items())))}
    # the cache plugin's own figures (naiad.types.CacheUsage)
    assert value(default, "nv_cache_num_hits", "nv_cache_num_hits") == 3
    assert value(default, "nv_cache_num_entries", "nv_cache_num_entries") == 1
    assert 0 < value(default, "nv_cache_util", "nv_cache_util") < 1


def test_batch_cut_reasons_are_counted_for_dynamically_batched_models(default):
    cuts = {(dict(key)["model"], dict(key)["reason"]): count
            for (_, key), count in default[CUTS].items()}
    models = {"batch_nodelay", "batch_delay", "batch_preferred", "batch_timeout"}
    assert {model for model, _ in cuts} == models  # not for identity_batch, add_sub
    assert {reason for _, reason in cuts} == {reason.label for reason in CutReason}
    assert cuts[("batch_nodelay", "queue_empty")] == 3
    assert cuts[("batch_delay", "delay_expired")] == 3
    assert cuts[("batch_preferred", "preferred_size")] == 1
    for model in models:  # every execution was one cut, for one reason
        executions = value(default, "nv_inference_exec_count", "nv_inference_exec_count",
                           model=model, version="1")
        assert sum(count for (m, _), count in cuts.items() if m == model) == executions


def test_a_queue_policy_timeout_is_a_rejected_failure(default_server):
    def send(_: int) -> str:
        with httpclient.InferenceServerClient(default_server.http_url) as client:
            try:
                _identity(client, httpclient, "batch_timeout", rows=1)
            except InferenceServerException as exc:
                return exc.status()
            return "ok"

    with ThreadPoolExecutor(3) as pool:
        outcomes = sorted(pool.map(send, range(3)))
    rejected = outcomes.count("503")
    assert rejected >= 1 and outcomes.count("ok") + rejected == 3, outcomes
    families = scrape(default_server)
    failures = {dict(key)["reason"]: count
                for (_, key), count in families["nv_inference_request_failure"].items()
                if dict(key)["model"] == "batch_timeout"}
    # as Triton 2.51 counts a queue timeout (checked against it: REJECTED, not BACKEND)
    assert failures == {"BACKEND": 0, "CANCELED": 0, "OTHER": 0, "REJECTED": rejected}


def test_no_summaries_by_default(default):
    assert not [name for name in default if "summary" in name]


def test_counter_latencies_false_removes_the_duration_and_cache_counters(default, configured):
    removed = {"nv_inference_request_duration_us", "nv_inference_queue_duration_us",
               "nv_inference_compute_input_duration_us",
               "nv_inference_compute_infer_duration_us",
               "nv_inference_compute_output_duration_us", "nv_cache_num_hits_per_model",
               "nv_cache_hit_duration_per_model", "nv_cache_num_misses_per_model",
               "nv_cache_miss_duration_per_model"}
    assert removed <= set(default)
    assert not removed & set(configured)
    # the counts keep counting (Triton 2.51 freezes them at 0 here: docs/metrics.md)
    assert value(configured, "nv_inference_request_success", "nv_inference_request_success",
                 model="identity_batch", version="1") == N


def test_summary_latencies_adds_tritons_summaries_with_the_configured_quantiles(configured):
    expected = {  # family -> models, as Triton 2.51 keeps them
        "nv_inference_request_summary_us": {"identity_batch"},  # not the cached add_sub
        "nv_inference_queue_summary_us": {"identity_batch", "add_sub"},
        "nv_inference_compute_input_summary_us": {"identity_batch", "add_sub"},
        "nv_inference_compute_infer_summary_us": {"identity_batch", "add_sub"},
        "nv_inference_compute_output_summary_us": {"identity_batch", "add_sub"},
        "nv_cache_hit_summary_per_model": {"add_sub"},
        "nv_cache_miss_summary_per_model": {"add_sub"},
    }
    for family, models in expected.items():
        samples = configured[family]
        assert {dict(key)["model"] for _, key in samples} >= models
        assert "add_sub" in models or all(dict(key)["model"] != "add_sub" for _, key in samples)
        quantiles = {dict(key)["quantile"] for name, key in samples if name == family}
        assert quantiles == {"0.25", "0.75"}
    labels = {"model": "add_sub", "version": "1"}
    for family, count in (("nv_inference_queue_summary_us", 4),
                          ("nv_cache_hit_summary_per_model", 3),
                          ("nv_cache_miss_summary_per_model", 1),
                          ("nv_inference_compute_infer_summary_us", 1)):
        assert value(configured, family, f"{family}_count", **labels) == count
    request = "nv_inference_request_summary_us"
    labels = {"model": "identity_batch", "version": "1"}
    assert value(configured, request, f"{request}_count", **labels) == N
    low = value(configured, request, request, **labels, quantile="0.25")
    high = value(configured, request, request, **labels, quantile="0.75")
    assert 0 <= low <= high <= value(configured, request, f"{request}_sum", **labels)


def test_configured_buckets_are_the_histograms_bounds(configured):
    assert [le for le, _ in buckets(configured, REQUEST, "identity_batch")] == [
        1, 10, 100, float("inf")]
    assert buckets(configured, BATCH, "identity_batch") == [
        (2, 0), (4, N), (float("inf"), N)]


def test_naiad_histograms_false_turns_them_off(repo):
    with naiad_server("--model-repository", str(repo),
                      "--metrics-config=naiad_histograms=false") as server:
        with httpclient.InferenceServerClient(server.http_url) as client:
            _identity(client, httpclient, "batch_nodelay", rows=1)
        families = scrape(server)
    assert not {REQUEST, QUEUE, INFER, BATCH} & set(families)
    assert value(families, CUTS, CUTS, model="batch_nodelay",
                 reason="queue_empty", version="1") == 1
