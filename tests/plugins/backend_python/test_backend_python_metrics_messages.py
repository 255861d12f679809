"""The isolated mode's custom metric messages, both ends without a worker: the server's
handler (isolated/metrics.py) fed plain dicts, and the worker's adapter
(stub/naiad_stub_metrics.WorkerMetrics) talking to that handler through a fake link."""

from __future__ import annotations

import gc

import pytest

from naiad.metrics.custom_metrics import CustomMetrics
from naiad_backend_python.isolated.metrics import MetricsHandler
from naiad_backend_python.stub import naiad_stub_metrics as stub_metrics
from naiad_backend_python.stub import triton_python_backend_utils as pb_utils


def test_the_handler_answers_questions_and_applies_updates():
    registry = CustomMetrics()
    handler = MetricsHandler(registry.for_model("m", 1), "m_0_0")
    family = handler.handle({"op": "metric", "action": "family", "name": "f",
                             "description": "F", "kind": "counter", "call": 1})
    assert family == {"family": 1, "instance": "m_0_0"}
    metric = handler.handle({"action": "metric", "family": 1, "labels": {"a": "b"},
                             "buckets": None, "call": 2})
    assert metric == {"metric": 2}
    assert handler.handle({"action": "increment", "metric": 2, "value": 2.5}) is None
    assert handler.handle({"action": "value", "metric": 2, "call": 3}) == {"value": 2.5}
    assert handler.handle({"action": "set", "metric": 2, "value": 1.0, "call": 4}) == {
        "error": "Failed to process the request for model 'm_0_0', message: "
                 "TRITONSERVER_METRIC_KIND_COUNTER does not support Set"}
    handler.handle({"action": "delete", "family": 1})
    assert registry.snapshot() == []
    assert "error" in handler.handle({"action": "value", "metric": 2, "call": 5})
    assert "error" in handler.handle({"action": "bogus", "call": 6})
    assert "error" in handler.handle({"action": "metric", "family": "x", "call": 7})


class FakeLink:
    """naiad_stub_calls.ServerLink's request/post, delivered to a handler at once."""

    def __init__(self, handler: MetricsHandler) -> None:
        self.handler = handler
        self.posted: list[dict] = []
        self.calls = 0

    def request(self, header: dict) -> dict:
        self.calls += 1
        return self.handler.handle(dict(header, call=self.calls)) or {}

    def post(self, header: dict) -> None:
        self.posted.append(header)
        self.handler.handle(header)


@pytest.fixture
def worker_side():
    registry = CustomMetrics()
    link = FakeLink(MetricsHandler(registry.for_model("m", 1), "m_0_0"))
    stub_metrics.use(stub_metrics.WorkerMetrics(link))
    yield registry, link
    stub_metrics.use(None)


def test_pb_utils_over_the_worker_link(worker_side):
    registry, link = worker_side
    family = pb_utils.MetricFamily("g", "G", pb_utils.MetricFamily.GAUGE)
    gauge = family.Metric(labels={"k": "v"})
    gauge.set(4)
    gauge.increment(-1.5)
    assert gauge.value() == 2.5
    # updates are sent without waiting; kind misuse is refused before anything is sent
    assert [m["action"] for m in link.posted] == ["set", "increment"]
    with pytest.raises(pb_utils.TritonModelException) as raised:
        gauge.observe(1)
    assert str(raised.value) == ("Failed to observe metric value: Failed to process the "
                                 "request for model 'm_0_0', message: "
                                 "TRITONSERVER_METRIC_KIND_GAUGE does not support Observe")
    assert len(link.posted) == 2
    with pytest.raises(pb_utils.TritonModelException, match=r"^Error when creating "
                                                            r"MetricFamily: Failed to process"):
        pb_utils.MetricFamily("g", "G", pb_utils.MetricFamily.COUNTER)
    del family
    gc.collect()
    with pytest.raises(pb_utils.TritonModelException, match="has been deleted"):
        gauge.set(1)  # and the deletion it found waiting was sent
    assert link.posted[-1]["action"] == "delete"
    assert registry.snapshot() == []


def test_stub_and_core_word_kind_errors_alike():
    from naiad.metrics.custom_metrics import NEGATIVE_INCREMENT
    assert stub_metrics.NEGATIVE_INCREMENT == NEGATIVE_INCREMENT
    assert stub_metrics.KIND_NAMES[stub_metrics.MetricKind.HISTOGRAM] == "histogram"
