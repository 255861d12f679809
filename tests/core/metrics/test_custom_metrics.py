"""The custom metrics registry (naiad.metrics.custom_metrics), the histogram type and the text they
render as: families shared by name, metrics by labels, Triton's errors, lines as Triton's
prometheus-cpp prints them (observed with tritonserver 2.51, tests/compat/TRITON_OBSERVED.md)."""

from __future__ import annotations

import threading

import pytest
from prometheus_client.parser import text_string_to_metric_families

from naiad.metrics import prometheus_text
from naiad.metrics.custom_metrics import CustomMetrics, MetricError, MetricKind
from naiad.metrics.endpoint import _custom
from naiad.metrics.histogram import Histogram


def rendered(registry: CustomMetrics) -> list[str]:
    lines: list[str] = []
    _custom(lines, registry)
    return lines


def test_lines_match_tritons():
    registry = CustomMetrics()
    view = registry.for_model("m", 1)
    counter = view.family("p_counter", "A counter", MetricKind.COUNTER)
    labelled = counter.metric({"b": "y", "a": "x"})
    labelled.increment(1.5)
    labelled.increment(2)
    counter.metric().increment(123456789)
    escaped = counter.metric({"a": 'q"uo\\te\nnl', "b": ""})
    escaped.increment(0.1)
    escaped.increment(0.2)
    gauge = view.family("p_big", "Big values", MetricKind.GAUGE)
    for index, value in enumerate([1e20, 1 / 3, 12345678901234567.0, 1e-7, -0.0,
                                   float("inf"), float("nan"), -5]):
        gauge.metric({"i": str(index)}).set(value)
    histogram = view.family("p_hist", "A histogram", MetricKind.HISTOGRAM)
    observed = histogram.metric({"k": "v"}, [0.1, 1, 2.5, 10])
    for value in (0.05, 0.1, 0.5, 3, 100, 7):
        observed.observe(value)
    histogram.metric(None, [1e-3, 1e20]).observe(-1)
    assert rendered(registry) == [
        "# HELP p_counter A counter",
        "# TYPE p_counter counter",
        'p_counter{a="x",b="y"} 3.5',
        "p_counter 123456789",
        'p_counter{a="q\\"uo\\\\te\\nnl",b=""} 0.3',
        "# HELP p_big Big values",
        "# TYPE p_big gauge",
        'p_big{i="0"} 1e+20',
        'p_big{i="1"} 0.3333333333333333',
        'p_big{i="2"} 1.234567890123457e+16',
        'p_big{i="3"} 1e-07',
        'p_big{i="4"} -0',
        'p_big{i="5"} +Inf',
        'p_big{i="6"} Nan',
        'p_big{i="7"} -5',
        "# HELP p_hist A histogram",
        "# TYPE p_hist histogram",
        'p_hist_count{k="v"} 6',
        'p_hist_sum{k="v"} 110.65',
        'p_hist_bucket{k="v",le="0.1"} 2',
        'p_hist_bucket{k="v",le="1"} 3',
        'p_hist_bucket{k="v",le="2.5"} 3',
        'p_hist_bucket{k="v",le="10"} 5',
        'p_hist_bucket{k="v",le="+Inf"} 6',
        "p_hist_count 1",
        "p_hist_sum -1",
        'p_hist_bucket{le="0.001"} 1',
        'p_hist_bucket{le="1e+20"} 1',
        'p_hist_bucket{le="+Inf"} 1',
    ]
    # ... and prometheus' own parser reads them
    parsed = {f.name: f for f in text_string_to_metric_families("\n".join(
        rendered(registry)) + "\n")}
    assert parsed["p_hist"].type == "histogram" and parsed["p_counter"].type == "counter"


def test_a_help_text_with_a_newline_stays_one_line():
    registry = CustomMetrics()
    registry.for_model("m", 1).family("p_desc", "line1\nline2 back\\slash",
                                      MetricKind.GAUGE).metric()
    assert rendered(registry)[0] == "# HELP p_desc line1\\nline2 back\\\\slash"


def test_families_are_shared_by_name_and_metrics_by_labels():
    registry = CustomMetrics()
    one, two = registry.for_model("a", 1), registry.for_model("b", 1)
    first = one.family("shared", "first", MetricKind.COUNTER).metric({"x": "1"})
    second_family = two.family("shared", "second", MetricKind.COUNTER)
    second = second_family.metric({"x": "1"})
    first.increment(2)
    second.increment(3)
    assert first.value() == second.value() == 5
    assert rendered(registry)[0] == "# HELP shared first"  # the first description stays
    with pytest.raises(MetricError, match=r"^Family name already exists with different type$"):
        two.family("shared", "x", MetricKind.GAUGE)
    one.close()  # the metric stays: the other model still holds it
    assert second.value() == 5 and rendered(registry)[2] == 'shared{x="1"} 5'
    with pytest.raises(MetricError, match="invalidated"):
        first.increment(1)
    two.close()
    assert rendered(registry) == [] and registry.snapshot() == []
    # gone with its last holder: the name may now have another kind
    registry.for_model("c", 1).family("shared", "now a gauge", MetricKind.GAUGE)


def test_a_histograms_first_buckets_stay():
    view = CustomMetrics().for_model("m", 1)
    family = view.family("h", "H", MetricKind.HISTOGRAM)
    family.metric({"k": "v"}, [1, 10]).observe(5)
    family.metric({"k": "v"}, [5, 50]).observe(7)
    (_, _, _, [(_, snapshot)]) = view.registry.snapshot()[0]
    assert snapshot.bounds == (1.0, 10.0) and snapshot.cumulative == (0, 2, 2)


@pytest.mark.parametrize(("kind", "call", "message"), [
    (MetricKind.COUNTER, lambda m: m.set(1),
     "TRITONSERVER_METRIC_KIND_COUNTER does not support Set"),
    (MetricKind.COUNTER, lambda m: m.increment(-1),
     "TRITONSERVER_METRIC_KIND_COUNTER can only be incremented monotonically by "
     "non-negative values."),
    (MetricKind.COUNTER, lambda m: m.observe(1),
     "TRITONSERVER_METRIC_KIND_COUNTER does not support Observe"),
    (MetricKind.GAUGE, lambda m: m.observe(1),
     "TRITONSERVER_METRIC_KIND_GAUGE does not support Observe"),
    (MetricKind.HISTOGRAM, lambda m: m.increment(1),
     "TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Increment"),
    (MetricKind.HISTOGRAM, lambda m: m.set(1),
     "TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Set"),
    (MetricKind.HISTOGRAM, lambda m: m.value(),
     "TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Value"),
])
def test_operations_a_kind_does_not_have(kind, call, message):
    family = CustomMetrics().for_model("m", 1).family("f", "F", kind)
    metric = family.metric(None, [1.0] if kind is MetricKind.HISTOGRAM else None)
    with pytest.raises(MetricError) as raised:
        call(metric)
    assert str(raised.value) == message


@pytest.mark.parametrize(("name", "labels", "buckets", "kind", "message"), [
    ("bad-name", None, None, MetricKind.COUNTER, "Invalid metric name"),
    ("", None, None, MetricKind.COUNTER, "Invalid metric name"),
    ("__reserved", None, None, MetricKind.COUNTER, "Invalid metric name"),
    ("nv_inference_count", None, None, MetricKind.COUNTER, "Invalid metric name: "),
    ("ok", {"bad-label": "1"}, None, MetricKind.COUNTER, "Invalid label name"),
    ("ok", {"__x": "1"}, None, MetricKind.COUNTER, "Invalid label name"),
    ("ok", {"1a": "1"}, None, MetricKind.COUNTER, "Invalid label name"),
    ("ok", {"le": "1"}, [1.0], MetricKind.HISTOGRAM, "Invalid label name"),
    ("ok", {"a": 1}, None, MetricKind.COUNTER, "attempt to access JSON non-string as string"),
    ("ok", None, [1, 1, 2], MetricKind.HISTOGRAM, "Bucket Boundaries must be strictly sorted"),
    ("ok", None, [2, 1], MetricKind.HISTOGRAM, "Bucket Boundaries must be strictly sorted"),
    ("ok", None, None, MetricKind.HISTOGRAM, "Bucket boundaries not found in Metric args."),
    ("ok", None, [1.0], MetricKind.GAUGE, "Unexpected args found in gauge Metric constructor."),
])
def test_bad_names_labels_and_buckets(name, labels, buckets, kind, message):
    view = CustomMetrics().for_model("m", 1)
    with pytest.raises(MetricError) as raised:
        view.family(name, "d", kind).metric(labels, buckets)
    assert str(raised.value).startswith(message)


def test_labels_may_differ_between_metrics_of_a_family():
    registry = CustomMetrics()
    family = registry.for_model("m", 1).family("f", "F", MetricKind.GAUGE)
    family.metric({"a": "1"}).set(1)
    family.metric({"zzz": "u\u00e9\u2603"}).set(2)
    assert rendered(registry)[2:] == ['f{a="1"} 1', 'f{zzz="u\u00e9\u2603"} 2']


def test_an_explicit_inf_bound_is_not_printed_twice():
    histogram = Histogram([1, float("inf")])
    histogram.observe(5)
    lines: list[str] = []
    prometheus_text.histogram(lines, "h", [], histogram.snapshot())
    assert lines == ["h_count 1", "h_sum 5", 'h_bucket{le="1"} 0', 'h_bucket{le="+Inf"} 1']


def test_a_histogram_counts_every_observation_of_many_threads():
    histogram = Histogram([10, 100])

    def observe() -> None:
        for value in range(1000):
            histogram.observe(value % 200)

    threads = [threading.Thread(target=observe) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    snapshot = histogram.snapshot()
    assert snapshot.count == 4000
    assert snapshot.cumulative == (4 * 5 * 11, 4 * 5 * 101, 4000)
    assert snapshot.sum == 4 * 5 * sum(range(200))
    histogram.observe(float("nan"))
    assert histogram.snapshot().cumulative[-2:] == (4 * 5 * 101, 4001)


def test_a_closed_view_makes_no_family():
    view = CustomMetrics().for_model("m", 3)
    view.close()
    with pytest.raises(MetricError, match="unloaded"):
        view.family("f", "F", MetricKind.COUNTER)
