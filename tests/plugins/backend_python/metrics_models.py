"""Python models of the custom metrics tests (test_backend_python_metrics*.py): one that
keeps a counter, a gauge and a histogram, and one that tries every misuse and answers with
what it raised."""

from __future__ import annotations

from pathlib import Path

# Two instances: both make the same families and metrics, so they share them.
METERED_CONFIG = """
name: "metered"
backend: "python"
max_batch_size: 0
input [ { name: "VALUE" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "SEEN" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
parameters { key: "EXECUTION_MODE" value: { string_value: "%s" } }
parameters { key: "METRICS_AT" value: { string_value: "%s" } }
"""

METERED_PY = '''
"""Counts requests (test_requests_total), keeps the last VALUE (test_last_value) and
observes every VALUE (test_value_distribution, buckets 1, 5, 10). SEEN: the count so far."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


def _metrics_at(args):
    """Where the model makes its families: "initialize" (as models do) or "execute" (its
    first one)."""
    parameters = json.loads(args["model_config"]).get("parameters", {})
    return parameters.get("METRICS_AT", {}).get("string_value", "initialize")


class TritonPythonModel:
    def initialize(self, args):
        self.args = args
        self.made = False
        if _metrics_at(args) == "initialize":
            self.make_metrics()

    def make_metrics(self):
        args = self.args
        self.made = True
        labels = {"model": args["model_name"], "version": args["model_version"]}
        # A family object must live as long as its metrics (as in Triton).
        self.requests_family = pb_utils.MetricFamily(
            "test_requests_total", "Requests the model executed",
            pb_utils.MetricFamily.COUNTER)
        self.requests = self.requests_family.Metric(labels=labels)
        self.gauge_family = pb_utils.MetricFamily(
            "test_last_value", "The last VALUE\\\\seen", pb_utils.MetricFamily.GAUGE)
        self.last = self.gauge_family.Metric(labels=dict(labels, note='say "hi"'))
        self.hist_family = pb_utils.MetricFamily(
            name="test_value_distribution", description="VALUEs",
            kind=pb_utils.MetricFamily.HISTOGRAM)
        self.values = self.hist_family.Metric(labels=labels, buckets=[1.0, 5.0, 10.0])
        self.count_family = pb_utils.MetricFamily(
            "test_requests_total", "Another description: the first one stays",
            pb_utils.MetricFamily.COUNTER)
        self.unlabelled = self.count_family.Metric()

    def execute(self, requests):
        if not self.made:
            self.make_metrics()
        responses = []
        for request in requests:
            value = float(pb_utils.get_input_tensor_by_name(request, "VALUE").as_numpy()[0])
            self.requests.increment(1)
            self.unlabelled.increment(0.5)
            self.last.set(value)
            self.values.observe(value)
            seen = self.requests.value()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("SEEN", np.array([seen], dtype=np.float32))]))
        return responses
'''

MISUSE_CONFIG = """
name: "misuse"
backend: "python"
max_batch_size: 0
input [ { name: "CASE" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "RAISED" data_type: TYPE_STRING dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "EXECUTION_MODE" value: { string_value: "%s" } }
parameters { key: "METRICS_AT" value: { string_value: "%s" } }
"""

MISUSE_PY = '''
"""Runs the misuse named by CASE; RAISED: "ExceptionType: message", or "OK <result>"."""

import gc
import json

import numpy as np
import triton_python_backend_utils as pb_utils

MF = pb_utils.MetricFamily


def _metrics_at(args):
    """Where the model makes its families: "initialize" (as models do) or "execute" (its
    first one)."""
    parameters = json.loads(args["model_config"]).get("parameters", {})
    return parameters.get("METRICS_AT", {}).get("string_value", "initialize")


def dropped_family(model):
    family = MF("misuse_dropped", "Dropped", MF.GAUGE)
    metric = family.Metric(labels={"x": "1"})
    metric.set(1)
    del family
    gc.collect()
    return metric.value()


CASES = {
    "counter_set": lambda m: m.counter.set(1),
    "counter_negative": lambda m: m.counter.increment(-1),
    "counter_observe": lambda m: m.counter.observe(1),
    "gauge_observe": lambda m: m.gauge.observe(1),
    "histogram_increment": lambda m: m.histogram.increment(1),
    "histogram_set": lambda m: m.histogram.set(1),
    "histogram_value": lambda m: m.histogram.value(),
    "missing_buckets": lambda m: m.histogram_family.Metric(labels={"k": "v"}),
    "unexpected_buckets": lambda m: m.counter_family.Metric(buckets=[1.0]),
    "buckets_not_list": lambda m: m.histogram_family.Metric(buckets=(1.0, 2.0)),
    "labels_not_dict": lambda m: m.counter_family.Metric(labels=["a"]),
    "unsorted_buckets": lambda m: m.histogram_family.Metric(buckets=[1.0, 1.0, 2.0]),
    "bad_name": lambda m: MF("bad-name", "x", MF.COUNTER),
    "bad_label": lambda m: m.counter_family.Metric(labels={"bad-label": "1"}),
    "label_value_int": lambda m: m.counter_family.Metric(labels={"a": 1}),
    "other_kind": lambda m: MF("misuse_counter", "A counter", MF.GAUGE),
    "kind_int": lambda m: MF("misuse_int", "x", 1),
    "value_str": lambda m: m.gauge.set("1"),
    "dropped_family": dropped_family,
    "gauge_ok": lambda m: (m.gauge.set(-2.5), m.gauge.increment(3), m.gauge.value())[-1],
}


class TritonPythonModel:
    def initialize(self, args):
        self.made = False
        if _metrics_at(args) == "initialize":
            self.make_metrics()

    def make_metrics(self):
        self.made = True
        self.counter_family = MF("misuse_counter", "A counter", MF.COUNTER)
        self.counter = self.counter_family.Metric()
        self.gauge_family = MF("misuse_gauge", "A gauge", MF.GAUGE)
        self.gauge = self.gauge_family.Metric()
        self.histogram_family = MF("misuse_histogram", "A histogram", MF.HISTOGRAM)
        self.histogram = self.histogram_family.Metric(buckets=[1.0])

    def execute(self, requests):
        if not self.made:
            self.make_metrics()
        responses = []
        for request in requests:
            case = pb_utils.get_input_tensor_by_name(request, "CASE").as_numpy()[0].decode()
            try:
                raised = "OK " + repr(CASES[case](self))
            except Exception as exc:
                raised = f"{type(exc).__name__}: {exc}"
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("RAISED", np.array([raised.encode()], dtype=object))]))
        return responses
'''

# What each misuse raises: Triton 2.51's exception and message (tests/compat/
# TRITON_OBSERVED.md), with naiad's instance name; "observe" on a counter or gauge and
# "value" of a histogram crash or hang Triton 2.51's server: naiad raises Triton's core
# message for them.
_SERVER = "Failed to process the request for model 'misuse_0_0', message: "
MISUSE_RAISES = {
    "counter_set": "TritonModelException: Failed to set metric value: " + _SERVER
                   + "TRITONSERVER_METRIC_KIND_COUNTER does not support Set",
    "counter_negative": "TritonModelException: Failed to increment metric value: " + _SERVER
                        + "TRITONSERVER_METRIC_KIND_COUNTER can only be incremented "
                          "monotonically by non-negative values.",
    "counter_observe": "TritonModelException: Failed to observe metric value: " + _SERVER
                       + "TRITONSERVER_METRIC_KIND_COUNTER does not support Observe",
    "gauge_observe": "TritonModelException: Failed to observe metric value: " + _SERVER
                     + "TRITONSERVER_METRIC_KIND_GAUGE does not support Observe",
    "histogram_increment": "TritonModelException: Failed to increment metric value: "
                           + _SERVER + "TRITONSERVER_METRIC_KIND_HISTOGRAM does not support "
                                       "Increment",
    "histogram_set": "TritonModelException: Failed to set metric value: " + _SERVER
                     + "TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Set",
    "histogram_value": "TritonModelException: Failed to get metric value: " + _SERVER
                       + "TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Value",
    "missing_buckets": "TritonModelException: Failed to create metric. Missing required "
                       "buckets.",
    "unexpected_buckets": "TritonModelException: Failed to create metric. Unexpected buckets "
                          "found.",
    "buckets_not_list": "TritonModelException: Failed to create metric. Buckets must be a "
                        "list.",
    "labels_not_dict": "TritonModelException: Failed to create metric. Labels must be a "
                       "dictionary.",
    "unsorted_buckets": "TritonModelException: Error when creating Metric: " + _SERVER
                        + "Bucket Boundaries must be strictly sorted",
    "bad_name": "TritonModelException: Error when creating MetricFamily: " + _SERVER
                + "Invalid metric name",
    "bad_label": "TritonModelException: Error when creating Metric: " + _SERVER
                 + "Invalid label name",
    "label_value_int": "TritonModelException: Error when creating Metric: " + _SERVER
                       + "attempt to access JSON non-string as string",
    "other_kind": "TritonModelException: Error when creating MetricFamily: " + _SERVER
                  + "Family name already exists with different type",
    "dropped_family": "TritonModelException: Failed to get metric value: Invalid metric "
                      "operation as the corresponding 'MetricFamily' has been deleted. The "
                      "'MetricFamily' object should be deleted AFTER its corresponding "
                      "'Metric' objects have been deleted.",
    "gauge_ok": "OK 0.5",
}
# TypeErrors: Triton's binding names c_python_backend_utils; the start is the same.
MISUSE_TYPE_ERRORS = {
    "kind_int": "TypeError: __init__(): incompatible constructor arguments.",
    "value_str": "TypeError: set(): incompatible function arguments.",
}


def write_metrics_repository(root: Path, mode: str, metrics_at: str = "initialize") -> Path:
    """``metered`` and ``misuse`` in execution mode ``mode``, under ``root``; they make their
    families in ``metrics_at`` ("initialize" or "execute")."""
    repo = root / "models"
    for name, config, model in (("metered", METERED_CONFIG, METERED_PY),
                                ("misuse", MISUSE_CONFIG, MISUSE_PY)):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(config % (mode, metrics_at))
        (repo / name / "1" / "model.py").write_text(model)
    return repo
