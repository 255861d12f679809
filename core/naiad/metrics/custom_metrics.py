"""Custom metrics: counters, gauges and histograms a model defines, on the metrics port.

Triton lets Python models define metric families (``pb_utils.MetricFamily``); naiad keeps
them here, in one registry per server (:class:`CustomMetrics`), and renders them on ``GET
/metrics`` next to its own. A backend sees the registry through its model version's view,
``ModelContext.metrics`` (a :class:`ModelMetrics`): every family made through a view is
deleted with the view when the version unloads, so a model's metrics leave with it.

As in Triton (whose prometheus registry merges families by name), families are shared by
name across models and instances: a second family of the same name and kind is the same
family (the first description stays), and two metrics of one family with the same labels
are the same metric. A family is rendered while it has metrics, and removed when the last
handle to it is deleted. Errors are :class:`MetricError` with Triton's messages.

Every call is thread-safe: updates take one lock for a moment; rendering copies the values
under it and formats them outside it.
"""

from __future__ import annotations

import enum
import re
import threading
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from naiad.metrics.histogram import Histogram, HistogramSnapshot, check_bounds

# What a plugin may use (docs/plugin-author-guide.md): the view ``ModelContext.metrics`` and
# what it hands out. The registry and its rendering are the server's own.
__all__ = ["Metric", "MetricError", "MetricFamily", "MetricKind", "ModelMetrics"]

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
#: Families of the server's own metrics start with these: a model's family of such a name
#: would be printed as a second family of that name, which Prometheus refuses.
SERVER_PREFIXES = ("nv_inference_", "nv_cpu_", "nv_gpu_", "nv_energy_", "nv_pinned_memory_",
                   "nv_cache_", "naiad_")


class MetricKind(enum.Enum):
    """A family's kind; the value is its Prometheus ``# TYPE``."""

    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"

    @property
    def triton_name(self) -> str:
        """How Triton names the kind in its messages."""
        return f"TRITONSERVER_METRIC_KIND_{self.name}"


class MetricError(ValueError):
    """A custom metric call that cannot be done; the message is Triton's."""


def unsupported(kind: MetricKind, operation: str) -> str:
    """Triton's message for an operation a kind does not have (Set, Increment, Observe,
    Value)."""
    return f"{kind.triton_name} does not support {operation}"


NEGATIVE_INCREMENT = ("TRITONSERVER_METRIC_KIND_COUNTER can only be incremented "
                      "monotonically by non-negative values.")
#: Triton's messages for a metric whose family was deleted, by operation.
INVALIDATED = {
    "increment": "Could not increment metric value. Metric has been invalidated.",
    "set": "Could not set metric value. Metric has been invalidated.",
    "observe": "Could not set metric value. Metric has been invalidated.",
    "value": "Could not get metric value. Metric has been invalidated.",
}


class _Cell:
    """One metric (a family and a set of labels): a value or a histogram, and how many
    :class:`Metric` handles hold it."""

    __slots__ = ("histogram", "labels", "refs", "value")

    def __init__(self, labels: tuple[tuple[str, str], ...], histogram: Histogram | None
                 ) -> None:
        self.labels = labels
        self.value = 0.0
        self.histogram = histogram
        self.refs = 0


class _Family:
    __slots__ = ("cells", "description", "handles", "kind", "name")

    def __init__(self, name: str, description: str, kind: MetricKind) -> None:
        self.name = name
        self.description = description
        self.kind = kind
        self.cells: dict[tuple[tuple[str, str], ...], _Cell] = {}
        self.handles = 0


class FamilySnapshot(NamedTuple):
    """One family at one moment, for rendering: ``samples`` holds (labels, value) for a
    counter or gauge, (labels, :class:`HistogramSnapshot`) for a histogram; labels sorted
    by name."""

    name: str
    description: str
    kind: MetricKind
    samples: list[tuple[tuple[tuple[str, str], ...], float | HistogramSnapshot]]


class CustomMetrics:
    """The server's custom metric families (one registry per server)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._families: dict[str, _Family] = {}

    def for_model(self, name: str, version: int) -> ModelMetrics:
        """A view for one model version: what ``ModelContext.metrics`` holds."""
        return ModelMetrics(self, name, version)

    def snapshot(self) -> list[FamilySnapshot]:
        """Every family that has metrics, in the order they were first made."""
        with self._lock:
            copied = [(family, [(cell.labels, cell.value, cell.histogram)
                                for cell in family.cells.values()])
                      for family in self._families.values() if family.cells]
        return [FamilySnapshot(family.name, family.description, family.kind,
                               [(labels, value if histogram is None else histogram.snapshot())
                                for labels, value, histogram in cells])
                for family, cells in copied]

    # --- used by the handles ------------------------------------------------------------

    def _add_family(self, name: str, description: str, kind: MetricKind) -> _Family:
        if (not isinstance(name, str) or not _METRIC_NAME.fullmatch(name)
                or name.startswith("__")):
            raise MetricError("Invalid metric name")
        if name.startswith(SERVER_PREFIXES):
            raise MetricError(f"Invalid metric name: '{name}' would mix with the server's own "
                              f"metrics (names starting with {', '.join(SERVER_PREFIXES)})")
        with self._lock:
            family = self._families.get(name)
            if family is None:
                family = self._families[name] = _Family(name, str(description), kind)
            elif family.kind is not kind:
                raise MetricError("Family name already exists with different type")
            family.handles += 1
            return family

    def _release_family(self, family: _Family, cells: list[_Cell]) -> None:
        with self._lock:
            for cell in cells:
                cell.refs -= 1
                if cell.refs == 0 and family.cells.get(cell.labels) is cell:
                    del family.cells[cell.labels]
            family.handles -= 1
            if family.handles == 0 and self._families.get(family.name) is family:
                del self._families[family.name]

    def _add_cell(self, family: _Family, labels: Mapping[str, str] | None,
                  buckets: Sequence[float] | None) -> _Cell:
        key = _label_key(family.kind, labels)
        if family.kind is MetricKind.HISTOGRAM:
            if buckets is None:
                raise MetricError("Bucket boundaries not found in Metric args.")
            try:
                bounds = check_bounds(buckets)
            except ValueError as exc:
                raise MetricError(str(exc)) from None
        elif buckets is not None:
            raise MetricError(f"Unexpected args found in {family.kind.value} Metric "
                              f"constructor.")
        with self._lock:
            cell = family.cells.get(key)
            if cell is None:
                # The buckets of the first metric with these labels stay (as in Triton).
                cell = family.cells[key] = _Cell(
                    key, Histogram(bounds) if family.kind is MetricKind.HISTOGRAM else None)
            cell.refs += 1
            return cell


def _label_key(kind: MetricKind, labels: Mapping[str, str] | None
               ) -> tuple[tuple[str, str], ...]:
    if labels is None:
        return ()
    if not isinstance(labels, Mapping):
        raise MetricError("Labels must be a dictionary.")
    for name, value in labels.items():
        if (not isinstance(name, str) or not _LABEL_NAME.fullmatch(name)
                or name.startswith("__")
                # a histogram prints its own "le" label on every bucket line
                or (kind is MetricKind.HISTOGRAM and name == "le")):
            raise MetricError("Invalid label name")
        if not isinstance(value, str):
            raise MetricError("attempt to access JSON non-string as string")  # Triton's text
    return tuple(sorted(labels.items()))


class ModelMetrics:
    """One model version's view of the registry (``ModelContext.metrics``). Families made
    through it are deleted by :meth:`close`, which the server calls when the version
    unloads (after its instances closed)."""

    def __init__(self, registry: CustomMetrics, model: str, version: int) -> None:
        self.registry = registry
        self.model = model
        self.version = version
        self._lock = threading.Lock()
        self._families: list[MetricFamily] = []
        self._closed = False

    def family(self, name: str, description: str, kind: MetricKind) -> MetricFamily:
        """Make (or join, when one of that name and kind exists) the family ``name``.
        Raises :class:`MetricError`."""
        if not isinstance(kind, MetricKind):
            raise MetricError(f"Unsupported kind passed to MetricFamily constructor: {kind!r}")
        with self._lock:
            if self._closed:
                raise MetricError(f"model '{self.model}' version {self.version} is unloaded: "
                                  f"it can make no metric family")
            handle = MetricFamily(self.registry, self.registry._add_family(name, description,
                                                                         kind))
            self._families.append(handle)
            return handle

    def close(self) -> None:
        """Delete every family made through this view (once; later calls do nothing)."""
        with self._lock:
            self._closed = True
            families, self._families = self._families, []
        for family in families:
            family.delete()


class MetricFamily:
    """A handle to a family; its metrics live until :meth:`delete` (or the view's close)."""

    __slots__ = ("_cells", "_family", "_lock", "_registry", "deleted")

    def __init__(self, registry: CustomMetrics, family: _Family) -> None:
        self._registry = registry
        self._family = family
        self._cells: list[_Cell] = []
        self._lock = threading.Lock()
        self.deleted = False

    @property
    def name(self) -> str:
        return self._family.name

    @property
    def kind(self) -> MetricKind:
        return self._family.kind

    def metric(self, labels: Mapping[str, str] | None = None,
               buckets: Sequence[float] | None = None) -> Metric:
        """The metric of this family with ``labels`` (made if it does not exist);
        ``buckets``: the upper bounds of a histogram's buckets (only for histograms).
        Raises :class:`MetricError`."""
        with self._lock:
            if self.deleted:
                raise MetricError("Could not create metric. Its MetricFamily has been deleted.")
            cell = self._registry._add_cell(self._family, labels, buckets)
            self._cells.append(cell)
        return Metric(self._registry._lock, self._family.kind, cell, self)

    def delete(self) -> None:
        """Delete the family's metrics made through this handle, and the family if no other
        handle holds it. Later calls do nothing; its metrics then raise on use."""
        with self._lock:
            if self.deleted:
                return
            self.deleted = True
            cells, self._cells = self._cells, []
        self._registry._release_family(self._family, cells)


class Metric:
    """One metric: a counter, a gauge or a histogram, by its family's kind."""

    __slots__ = ("_cell", "_family", "_lock", "kind")

    def __init__(self, lock: threading.Lock, kind: MetricKind, cell: _Cell,
                 family: MetricFamily) -> None:
        self._lock = lock
        self.kind = kind
        self._cell = cell
        self._family = family

    @property
    def labels(self) -> dict[str, str]:
        return dict(self._cell.labels)

    def increment(self, value: float) -> None:
        """Add ``value`` (a counter only accepts non-negative values; not for histograms)."""
        self._check("increment")
        kind = self.kind
        if kind is MetricKind.HISTOGRAM:
            raise MetricError(unsupported(kind, "Increment"))
        if kind is MetricKind.COUNTER and value < 0.0:
            raise MetricError(NEGATIVE_INCREMENT)
        with self._lock:
            self._cell.value += value

    def set(self, value: float) -> None:
        """Set a gauge to ``value``."""
        self._check("set")
        if self.kind is not MetricKind.GAUGE:
            raise MetricError(unsupported(self.kind, "Set"))
        with self._lock:
            self._cell.value = value

    def observe(self, value: float) -> None:
        """Count ``value`` in a histogram."""
        self._check("observe")
        histogram = self._cell.histogram
        if histogram is None:
            raise MetricError(unsupported(self.kind, "Observe"))
        histogram.observe(value)

    def value(self) -> float:
        """A counter's or gauge's value."""
        self._check("value")
        if self.kind is MetricKind.HISTOGRAM:
            raise MetricError(unsupported(self.kind, "Value"))
        return self._cell.value

    def _check(self, operation: str) -> None:
        if self._family.deleted:
            raise MetricError(INVALIDATED[operation])
