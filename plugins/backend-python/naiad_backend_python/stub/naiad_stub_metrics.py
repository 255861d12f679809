"""Custom metrics for Python models: ``pb_utils.MetricFamily`` and its ``Metric``, as in
Triton 2.51 (names, arguments, misuse errors and their messages).

The metrics themselves live in the server's registry (``naiad.metrics.custom_metrics``). This
module reaches it through a :class:`MetricsBackend`: inside the server (in-process models)
one that calls the registry directly, set for the instance's thread with :func:`use`; in a
worker process one that sends messages over the worker's link to the server
(:class:`WorkerMetrics`, used when no thread has its own). Misuse that depends only on a
metric's kind is refused here, before anything is sent, so updates can be sent without
waiting for an answer.

As in Triton, a family's metrics live as long as the family object: when the model drops its
last reference to a ``MetricFamily``, the family's metrics are deleted (their ``Metric``
objects then raise), and so are all of a model's families when it unloads.

Only the standard library: this runs in the model's own Python (3.9 or newer).
"""

from __future__ import annotations

import collections
import enum
import sys
import threading
import weakref
from typing import Any, Deque, Dict, List, Optional, Tuple

from naiad_stub_errors import TritonModelException


class MetricKind(enum.IntEnum):
    """``pb_utils.MetricFamily.COUNTER``, ``GAUGE`` and ``HISTOGRAM``."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2


#: How a kind travels (its Prometheus type name) and how Triton names it in messages.
KIND_NAMES = {MetricKind.COUNTER: "counter", MetricKind.GAUGE: "gauge",
              MetricKind.HISTOGRAM: "histogram"}
_TRITON_KIND = {kind: f"TRITONSERVER_METRIC_KIND_{kind.name}" for kind in MetricKind}
NEGATIVE_INCREMENT = ("TRITONSERVER_METRIC_KIND_COUNTER can only be incremented "
                      "monotonically by non-negative values.")
FAMILY_DELETED = ("Invalid metric operation as the corresponding 'MetricFamily' has been "
                  "deleted. The 'MetricFamily' object should be deleted AFTER its "
                  "corresponding 'Metric' objects have been deleted.")
# The operation's words in Triton's "Failed to ... metric value" messages.
_VERBS = {"increment": "increment", "set": "set", "observe": "observe", "value": "get"}
# Which operation each kind has, and Triton's word for it.
_ALLOWED = {
    "increment": ({MetricKind.COUNTER, MetricKind.GAUGE}, "Increment"),
    "set": ({MetricKind.GAUGE}, "Set"),
    "observe": ({MetricKind.HISTOGRAM}, "Observe"),
    "value": ({MetricKind.COUNTER, MetricKind.GAUGE}, "Value"),
}


class MetricsFailure(Exception):
    """The server refused a metric operation; the message is Triton's, as the server words
    it (``Failed to process the request for model '<instance>', message: ...``)."""


def server_message(instance_name: str, message: str) -> str:
    """Triton's wording of an error its server side raised for an instance's call."""
    return f"Failed to process the request for model '{instance_name}', message: {message}"


class MetricsBackend:
    """Where a model's metric families live (the server's registry). Handles are whatever
    the backend returns; every method raises :class:`MetricsFailure` when the server
    refuses."""

    #: the model instance whose families these are (it names the model in errors)
    instance_name = ""

    def new_family(self, name: str, description: str, kind: str) -> Any:
        """A family (``kind``: "counter", "gauge" or "histogram"); its handle."""
        raise NotImplementedError

    def new_metric(self, family: Any, labels: Optional[Dict[str, Any]],
                   buckets: Optional[List[float]]) -> Any:
        """The metric of ``family`` with ``labels``; its handle."""
        raise NotImplementedError

    def update(self, metric: Any, action: str, value: float) -> None:
        """``action``: "increment", "set" or "observe" (already checked for the kind)."""
        raise NotImplementedError

    def value(self, metric: Any) -> float:
        raise NotImplementedError

    def delete_family(self, family: Any) -> None:
        """Delete a family handle and its metrics (never raises)."""
        raise NotImplementedError


class WorkerMetrics(MetricsBackend):
    """A worker's backend: messages ``{"op": "metric", "action": ...}`` over its link to the
    server (``naiad_stub_calls.ServerLink``). Creating and reading ask and wait for the
    answer; updates and deletions are sent without waiting (the socket keeps their order).

    ``family`` (name, description, kind) -> ``{"family": id, "instance": name}``;
    ``metric`` (family, labels, buckets) -> ``{"metric": id}``; ``value`` (metric) ->
    ``{"value": v}``; any of them -> ``{"error": message}`` instead. ``increment``, ``set``,
    ``observe`` (metric, value) and ``delete`` (family) have no answer."""

    def __init__(self, link: Any) -> None:
        self.link = link

    def _ask(self, header: Dict[str, Any]) -> Dict[str, Any]:
        answer = self.link.request(dict(header, op="metric"))
        error = answer.get("error")
        if error is not None:
            raise MetricsFailure(error)
        return answer

    def new_family(self, name: str, description: str, kind: str) -> Any:
        answer = self._ask({"action": "family", "name": name, "description": description,
                            "kind": kind})
        self.instance_name = answer.get("instance", self.instance_name)
        return answer["family"]

    def new_metric(self, family: Any, labels: Optional[Dict[str, Any]],
                   buckets: Optional[List[float]]) -> Any:
        return self._ask({"action": "metric", "family": family, "labels": labels,
                          "buckets": buckets})["metric"]

    def update(self, metric: Any, action: str, value: float) -> None:
        self.link.post({"op": "metric", "action": action, "metric": metric, "value": value})

    def value(self, metric: Any) -> float:
        return float(self._ask({"action": "value", "metric": metric})["value"])

    def delete_family(self, family: Any) -> None:
        try:
            self.link.post({"op": "metric", "action": "delete", "family": family})
        except Exception:  # the server is gone: so are the metrics
            pass


# --- which backend a model uses ---------------------------------------------------------

_local = threading.local()
_worker_backend: Optional[MetricsBackend] = None


def use(backend: Optional[MetricsBackend]) -> None:
    """Make ``backend`` the one this thread's model creates its families with (in-process
    instances call it on their thread before the model initializes)."""
    _local.backend = backend


def current() -> MetricsBackend:
    """This thread's backend; in a worker process, the worker's link to the server."""
    backend = getattr(_local, "backend", None)
    if backend is not None:
        return backend
    global _worker_backend
    if _worker_backend is None:
        calls = sys.modules.get("naiad_stub_calls")  # only a worker process has it
        link = getattr(calls, "link", None)
        if link is None:
            raise TritonModelException(
                "Custom metrics are available while a model runs in the server: no model "
                "instance runs on this thread (create metric families in initialize or "
                "execute)")
        _worker_backend = WorkerMetrics(link)
    return _worker_backend


# Families whose objects were collected, waiting to be deleted. Deleting from the garbage
# collector could run in the middle of a send (or with the registry's lock held) on the same
# thread; the next metric call of the process deletes them instead.
_dropped: Deque[Tuple[MetricsBackend, Any]] = collections.deque()


def _delete_dropped() -> None:
    while _dropped:
        try:
            backend, family = _dropped.popleft()
        except IndexError:  # another thread took the last one
            return
        backend.delete_family(family)


class _FamilyState:
    """What a family's metrics share with it: whether it was deleted (they must not keep
    the family object alive, or it would never be collected)."""

    __slots__ = ("deleted",)

    def __init__(self) -> None:
        self.deleted = False


def _drop(state: _FamilyState, backend: MetricsBackend, handle: Any) -> None:
    state.deleted = True
    _dropped.append((backend, handle))


def _check_number(method: str, metric: Metric, value: Any) -> float:
    """``value`` as a float, or the TypeError Triton's binding raises."""
    if not isinstance(value, (str, bytes)):
        try:
            return float(value)
        except (TypeError, ValueError):
            pass
    raise TypeError(f"{method}(): incompatible function arguments. The following argument "
                    f"types are supported:\n    1. (self: triton_python_backend_utils.Metric, "
                    f"arg0: float) -> {'float' if method == 'value' else 'None'}\n\n"
                    f"Invoked with: {metric!r}, {value!r}")


class MetricFamily:
    """A family of metrics: ``MetricFamily(name, description, kind)`` with ``kind``
    ``MetricFamily.COUNTER``, ``GAUGE`` or ``HISTOGRAM``. A second family of the same name
    and kind (in any model) is the same family; another kind is an error."""

    COUNTER = MetricKind.COUNTER
    GAUGE = MetricKind.GAUGE
    HISTOGRAM = MetricKind.HISTOGRAM

    def __init__(self, name: str, description: str, kind: MetricKind) -> None:
        if not (isinstance(name, str) and isinstance(description, str)
                and isinstance(kind, MetricKind)):
            raise TypeError(
                "__init__(): incompatible constructor arguments. The following argument types "
                "are supported:\n    1. triton_python_backend_utils.MetricFamily(name: str, "
                "description: str, kind: triton_python_backend_utils.MetricKind)\n\n"
                f"Invoked with: {name!r}, {description!r}, {kind!r}")
        backend = current()
        _delete_dropped()
        try:
            handle = backend.new_family(name, description, KIND_NAMES[kind])
        except MetricsFailure as exc:
            raise TritonModelException(
                f"Error when creating MetricFamily: {exc}") from None
        self._name = name
        self._kind = kind
        self._backend = backend
        self._handle = handle
        self._state = _FamilyState()
        finalizer = weakref.finalize(self, _drop, self._state, backend, handle)
        finalizer.atexit = False  # a process that ends takes its metrics with it

    def Metric(self, labels: Optional[Dict[str, str]] = None,  # Triton's name
               buckets: Optional[List[float]] = None) -> _Metric:
        """The metric with ``labels`` (a dict of str, or None for none); ``buckets``: a
        histogram's bucket upper bounds, a list (histograms only, and required there)."""
        if labels is not None and not isinstance(labels, dict):
            raise TritonModelException(
                "Failed to create metric. Labels must be a dictionary.")
        if buckets is not None:
            if not isinstance(buckets, list):
                raise TritonModelException(
                    "Failed to create metric. Buckets must be a list.")
            if self._kind != MetricKind.HISTOGRAM:
                raise TritonModelException(
                    "Failed to create metric. Unexpected buckets found.")
            buckets = [float(bound) for bound in buckets]
        elif self._kind == MetricKind.HISTOGRAM:
            raise TritonModelException(
                "Failed to create metric. Missing required buckets.")
        if self._state.deleted:  # only after the model's own finalize: it holds no reference
            raise TritonModelException(f"Error when creating Metric: {FAMILY_DELETED}")
        _delete_dropped()
        try:
            handle = self._backend.new_metric(self._handle, labels, buckets)
        except MetricsFailure as exc:
            raise TritonModelException(f"Error when creating Metric: {exc}") from None
        return Metric(self._backend, handle, self._kind, self._state)


class Metric:
    """One metric of a family (made by ``MetricFamily.Metric``): ``increment(value)``
    (counters, gauges), ``set(value)`` (gauges), ``observe(value)`` (histograms),
    ``value()`` (counters, gauges)."""

    __slots__ = ("__weakref__", "_backend", "_handle", "_kind", "_state")

    def __init__(self, backend: MetricsBackend, handle: Any, kind: MetricKind,
                 state: _FamilyState) -> None:
        self._backend = backend
        self._handle = handle
        self._kind = kind
        self._state = state

    def increment(self, value: float) -> None:
        value = _check_number("increment", self, value)
        self._check("increment")
        if self._kind == MetricKind.COUNTER and value < 0.0:
            raise self._failure("increment", NEGATIVE_INCREMENT)
        self._update("increment", value)

    def set(self, value: float) -> None:
        value = _check_number("set", self, value)
        self._check("set")
        self._update("set", value)

    def observe(self, value: float) -> None:
        value = _check_number("observe", self, value)
        self._check("observe")
        self._update("observe", value)

    def value(self) -> float:
        self._check("value")
        try:
            return self._backend.value(self._handle)
        except MetricsFailure as exc:
            raise TritonModelException(
                f"Failed to get metric value: {exc}") from None

    def _update(self, action: str, value: float) -> None:
        try:
            self._backend.update(self._handle, action, value)
        except MetricsFailure as exc:
            raise TritonModelException(
                f"Failed to {_VERBS[action]} metric value: {exc}") from None

    def _check(self, operation: str) -> None:
        if _dropped:
            _delete_dropped()
        if self._state.deleted:
            raise TritonModelException(
                f"Failed to {_VERBS[operation]} metric value: {FAMILY_DELETED}")
        kinds, word = _ALLOWED[operation]
        if self._kind not in kinds:
            raise self._failure(operation,
                                f"{_TRITON_KIND[self._kind]} does not support {word}")

    def _failure(self, operation: str, message: str) -> Exception:
        return TritonModelException(
            f"Failed to {_VERBS[operation]} metric value: "
            f"{server_message(self._backend.instance_name, message)}")


_Metric = Metric  # for MetricFamily.Metric's annotation (there ``Metric`` is the method)
