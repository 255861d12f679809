"""Recording latency and batch-size distributions, and reading ``--metrics-config``.

Bucket recording (naiad.metrics.histogram.BucketCounts), what a model version records
(naiad.metrics.latency_histograms through naiad.metrics.stats), the summary's text, and
every key's parsing (naiad.metrics.config) through the command line's own check.
"""

from __future__ import annotations

import math

import pytest

from naiad.cli import _check, _options, build_parser
from naiad.metrics import prometheus_text
from naiad.metrics.config import (
    DEFAULT_LATENCY_BUCKETS_MS,
    DEFAULT_QUANTILES,
    KEYS,
    MetricsConfig,
    parse_metrics_config,
)
from naiad.metrics.histogram import UNSORTED_BOUNDS, BucketCounts
from naiad.metrics.latency_histograms import distributions_for
from naiad.metrics.stats import ModelStats

MS = 1_000_000  # ns


# --- bucket recording ---------------------------------------------------------------------

def test_a_value_on_a_bound_counts_in_that_bucket():
    counts = BucketCounts([10, 20, 30])
    for value in (0, 10, 11, 20, 30, 31, 10**9):
        counts.add(value)
    snapshot = counts.snapshot(counts.copy())
    # le=10: 0 and 10; le=20: + 11, 20; le=30: + 30; +Inf: + 31, 1e9
    assert snapshot.cumulative == (2, 4, 5, 7)
    assert snapshot.count == 7 and snapshot.sum == sum((0, 10, 11, 20, 30, 31, 10**9))


def test_nanosecond_counts_show_in_milliseconds():
    counts = BucketCounts([500_000, 1 * MS], shown_bounds=[0.5, 1], unit=MS)
    counts.add(250_000)
    counts.add(1 * MS)
    snapshot = counts.snapshot(counts.copy())
    assert snapshot.bounds == (0.5, 1)
    assert snapshot.cumulative == (1, 2, 2)
    assert snapshot.sum == 1.25


def test_bounds_must_increase():
    with pytest.raises(ValueError, match=UNSORTED_BOUNDS):
        BucketCounts([1, 1, 2])


# --- what a version records ---------------------------------------------------------------

def _stats(config: MetricsConfig, cached: bool = False) -> ModelStats:
    return ModelStats("m", 1, distributions=distributions_for(config, cached))


def test_a_version_records_requests_executions_and_cache_hits():
    stats = _stats(MetricsConfig())
    stats.record_execution(3, 0, 2 * MS, 0)
    for total_ms in (1, 4, 30):
        stats.record_request(True, 1, total_ms * MS, MS // 2, 0, 2 * MS, 0)
    stats.record_request(False, 1, 99 * MS, 0, 0, 0, 0)  # a failure: a failure, no latency
    stats.record_cache_hit(MS // 10, MS // 20, MS // 50)
    snapshot = stats.distributions_snapshot()
    assert snapshot is not None and snapshot.summaries == {}
    request = snapshot.histograms["request"]
    assert request.count == 4 == stats.success.count  # the hit is a request too
    assert request.bounds == DEFAULT_LATENCY_BUCKETS_MS
    le = dict(zip(request.bounds, request.cumulative, strict=False))
    assert (le[0.1], le[1], le[2.5], le[5], le[25], le[50]) == (1, 2, 2, 3, 3, 4)
    assert math.isclose(request.sum, 1 + 4 + 30 + 0.1)
    assert snapshot.histograms["queue"].count == 4
    assert snapshot.histograms["compute_infer"].count == 3  # a hit runs no model
    batch = snapshot.histograms["batch_size"]
    assert (batch.count, batch.sum) == (1, 3)
    assert dict(zip(batch.bounds, batch.cumulative, strict=False))[2] == 0
    assert dict(zip(batch.bounds, batch.cumulative, strict=False))[4] == 1


def test_nothing_is_recorded_when_neither_histograms_nor_summaries_are_asked_for():
    stats = _stats(MetricsConfig(naiad_histograms=False))
    assert stats.distributions is None and stats.distributions_snapshot() is None
    stats.record_request(True, 1, MS, 0, 0, MS, 0)  # and recording still works
    assert stats.success.count == 1


def test_summaries_as_triton_keeps_them_with_and_without_a_cache():
    plain = _stats(MetricsConfig(naiad_histograms=False, summary_latencies=True))
    cached = _stats(MetricsConfig(summary_latencies=True), cached=True)
    for stats in (plain, cached):
        stats.record_request(True, 1, 1500_999, 200_000, 1_000, 1_000_000, 3_000)
    cached.record_cache_hit(50_000, 20_000, 7_000)
    cached.record_cache_miss(12_345)
    plain_summaries = plain.distributions_snapshot().summaries
    assert set(plain_summaries) == {"request", "queue", "compute_input", "compute_infer",
                                    "compute_output"}
    assert plain.distributions_snapshot().histograms == {}
    request = plain_summaries["request"]
    # whole microseconds, as Triton observes them
    assert (request.count, request.sum) == (1, 1500)
    assert request.quantiles((0.5,)) == [1500]
    summaries = cached.distributions_snapshot().summaries
    # Triton 2.51: no request summary for a cached model, cache summaries instead
    assert set(summaries) == {"queue", "compute_input", "compute_infer", "compute_output",
                              "cache_hit", "cache_miss"}
    assert (summaries["queue"].count, summaries["queue"].sum) == (2, 220)
    assert (summaries["cache_hit"].count, summaries["cache_hit"].sum) == (1, 7)
    assert (summaries["cache_miss"].count, summaries["cache_miss"].sum) == (1, 12)
    assert summaries["compute_infer"].count == 1


def test_batch_cuts_count_by_reason():
    stats = ModelStats("m", 1)
    for reason in ("queue_empty", "delay_expired", "queue_empty"):
        stats.record_batch_cut(reason)
    assert stats.batch_cuts == {"queue_empty": 2, "delay_expired": 1}


# --- the summary's text -------------------------------------------------------------------

def test_a_summary_prints_as_triton_prints_it():
    lines: list[str] = []
    prometheus_text.summary(lines, "nv_x_summary_us", [("model", "m"), ("version", "1")],
                            (0.5, 0.999), (55.0, math.nan), 161, 11110)
    assert lines == [
        'nv_x_summary_us_count{model="m",version="1"} 161',
        'nv_x_summary_us_sum{model="m",version="1"} 11110',
        'nv_x_summary_us{model="m",version="1",quantile="0.5"} 55',
        'nv_x_summary_us{model="m",version="1",quantile="0.999"} Nan',
    ]


# --- --metrics-config ---------------------------------------------------------------------

def test_the_defaults_are_tritons_and_naiads_histograms_are_on():
    config = parse_metrics_config([])
    assert config == MetricsConfig()
    assert (config.counter_latencies, config.summary_latencies,
            config.histogram_latencies, config.naiad_histograms) == (True, False, False, True)
    assert config.summary_quantiles == DEFAULT_QUANTILES
    assert config.summary_max_age_s == 60


def test_every_key_is_read():
    config = parse_metrics_config([
        "counter_latencies=false", "summary_latencies=true",
        "summary_quantiles=0.25:0.01,0.75:0.001", "summary_max_age=5",
        "naiad_summary_max_samples=100", "histogram_latencies=true", "naiad_histograms=false",
        "naiad_latency_buckets_ms=0.5,1,10", "naiad_batch_size_buckets=1,8,64",
    ])
    assert config == MetricsConfig(
        counter_latencies=False, summary_latencies=True,
        summary_quantiles=((0.25, 0.01), (0.75, 0.001)), summary_max_age_s=5,
        summary_max_samples=100, histogram_latencies=True, naiad_histograms=False,
        latency_buckets_ms=(0.5, 1, 10), batch_size_buckets=(1, 8, 64))
    assert len(KEYS) == 9


def test_the_last_value_of_a_key_wins():
    assert parse_metrics_config(["summary_latencies=true",
                                 "summary_latencies=false"]).summary_latencies is False


@pytest.mark.parametrize(("value", "message"), [
    ("nonsense=1", "nonsense: not a metrics setting naiad knows (it knows counter_latencies"),
    ("summary_latencies", "'summary_latencies': expected KEY=VALUE"),
    ("counter_latencies=nope", "counter_latencies=nope: expected true or false"),
    ("summary_quantiles=0.5", "summary_quantiles=0.5: expected QUANTILE:ERROR pairs"),
    ("summary_quantiles=1.5:0.1", "expected QUANTILE:ERROR pairs"),
    ("summary_quantiles=0.5:0.1,0.5:0.2", "a quantile is listed twice"),
    ("summary_max_age=0", "summary_max_age=0: expected a number of seconds greater than 0"),
    ("naiad_summary_max_samples=2", "expected a whole number of observations from 5"),
    ("naiad_latency_buckets_ms=1,1,2", "the bounds must increase strictly"),
    ("naiad_latency_buckets_ms=-1,2", "expected positive numbers separated by commas"),
    ("naiad_latency_buckets_ms=inf", "expected positive numbers separated by commas"),
    ("naiad_batch_size_buckets=1,2.5", "expected positive whole numbers"),
])
def test_a_bad_setting_stops_start_up_naming_the_key_and_the_expectation(value, message):
    args = build_parser().parse_args(["serve", "--model-repository", "r",
                                      f"--metrics-config={value}"])
    problems = _check(args)
    assert len(problems) == 1 and problems[0].startswith("--metrics-config ")
    assert message in problems[0]


def test_the_command_line_hands_the_settings_to_the_server():
    args = build_parser().parse_args([
        "serve", "--model-repository", "r", "--metrics-config", "summary_latencies=true",
        "--metrics-config=naiad_batch_size_buckets=1,2"])
    assert _check(args) == []
    options = _options(args)[0]
    assert options.load.metrics.summary_latencies is True
    assert options.load.metrics.batch_size_buckets == (1, 2)
