"""Python models' custom metrics in the server: ``pb_utils.MetricFamily`` over the model
version's registry view (``ModelContext.metrics``, :mod:`naiad.metrics.custom_metrics`).

:class:`DirectMetrics` is the metrics backend of ``stub/naiad_stub_metrics.py`` that calls
the registry directly: in-process models use it (set for their instance's thread), and the
handler of an isolated worker's messages (``isolated/metrics.py``) does its work with it.
Errors carry Triton's wording, naming the instance.
"""

from __future__ import annotations

from typing import Any

from naiad.metrics.custom_metrics import Metric, MetricError, MetricFamily, MetricKind, ModelMetrics
from naiad_backend_python.stub import naiad_stub_metrics as stub_metrics

_KINDS = {kind.value: kind for kind in MetricKind}


class DirectMetrics(stub_metrics.MetricsBackend):
    """Families and metrics of one instance, made in its model version's view. Handles are
    the registry's :class:`~naiad.metrics.custom_metrics.MetricFamily` and
    :class:`~naiad.metrics.custom_metrics.Metric` objects."""

    def __init__(self, metrics: ModelMetrics | None, instance_name: str) -> None:
        self.metrics = metrics
        self.instance_name = instance_name

    def _failure(self, message: str) -> stub_metrics.MetricsFailure:
        return stub_metrics.MetricsFailure(stub_metrics.server_message(self.instance_name,
                                                                       message))

    def new_family(self, name: str, description: str, kind: str) -> MetricFamily:
        if self.metrics is None:
            raise self._failure("custom metrics need a server (the model runs outside one)")
        if kind not in _KINDS:
            raise self._failure("Unknown metric kind")
        try:
            return self.metrics.family(name, description, _KINDS[kind])
        except MetricError as exc:
            raise self._failure(str(exc)) from None

    def new_metric(self, family: MetricFamily, labels: dict[str, Any] | None,
                   buckets: list[float] | None) -> Metric:
        try:
            return family.metric(labels, buckets)
        except MetricError as exc:
            raise self._failure(str(exc)) from None

    def update(self, metric: Metric, action: str, value: float) -> None:
        try:
            if action == "increment":
                metric.increment(value)
            elif action == "set":
                metric.set(value)
            elif action == "observe":
                metric.observe(value)
            else:
                raise MetricError(f"Unknown metric operation '{action}'")
        except MetricError as exc:
            raise self._failure(str(exc)) from None

    def value(self, metric: Metric) -> float:
        try:
            return metric.value()
        except MetricError as exc:
            raise self._failure(str(exc)) from None

    def delete_family(self, family: MetricFamily) -> None:
        family.delete()
