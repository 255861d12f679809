"""The server's side of a worker's custom metric messages (``{"op": "metric", ...}``, sent
by ``stub/naiad_stub_metrics.WorkerMetrics``), for one instance.

The worker names families and metrics by the numbers this handler gave them; the handler
keeps the registry's handles (made through :class:`~naiad_backend_python.metrics.
DirectMetrics`, so both execution modes word errors alike). It runs where the worker's
messages are read (the server's event loop): every action is a dictionary lookup and a
registry call under a lock held for a moment.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any

from naiad.metrics.custom_metrics import ModelMetrics
from naiad_backend_python.metrics import DirectMetrics
from naiad_backend_python.stub.naiad_stub_metrics import MetricsFailure

log = logging.getLogger("naiad.backend.python")

_UPDATES = frozenset(("increment", "set", "observe"))


class MetricsHandler:
    """Answers one instance's metric messages against its model version's registry view
    (``ModelContext.metrics``); :meth:`handle` is the channel's handler for ``"metric"``."""

    def __init__(self, metrics: ModelMetrics | None, instance_name: str) -> None:
        self.direct = DirectMetrics(metrics, instance_name)
        self._numbers = itertools.count(1)
        self._families: dict[int, Any] = {}
        self._metrics: dict[int, Any] = {}
        # family number -> the numbers of the metrics made through it
        self._members: dict[int, list[int]] = {}

    def handle(self, message: dict) -> dict | None:
        """The answer to ``message`` (None for those that have none)."""
        action = message.get("action")
        try:
            if action in _UPDATES:
                self.direct.update(self._metric(message), str(action),
                                   float(message["value"]))
                return None
            if action == "value":
                return {"value": self.direct.value(self._metric(message))}
            if action == "family":
                return self._new_family(message)
            if action == "metric":
                return self._new_metric(message)
            if action == "delete":
                self._delete(message.get("family"))
                return None
            raise MetricsFailure(f"unknown metric action {action!r}")
        except (MetricsFailure, KeyError, TypeError, ValueError) as exc:
            text = str(exc) if isinstance(exc, MetricsFailure) else f"bad metric message: {exc}"
            if message.get("call") is None:  # nobody waits for an answer: say it here
                log.warning("instance '%s': custom metric %s failed: %s",
                            self.direct.instance_name, action, text)
            return {"error": text}

    def _new_family(self, message: dict) -> dict:
        family = self.direct.new_family(str(message["name"]), str(message["description"]),
                                        str(message["kind"]))
        number = next(self._numbers)
        self._families[number] = family
        self._members[number] = []
        return {"family": number, "instance": self.direct.instance_name}

    def _new_metric(self, message: dict) -> dict:
        family_number = message["family"]
        family = self._families.get(family_number)
        if family is None:
            raise MetricsFailure(f"no metric family {family_number} (deleted?)")
        metric = self.direct.new_metric(family, message.get("labels"), message.get("buckets"))
        number = next(self._numbers)
        self._metrics[number] = metric
        self._members[family_number].append(number)
        return {"metric": number}

    def _metric(self, message: dict) -> Any:
        metric = self._metrics.get(message.get("metric"))  # type: ignore[arg-type]
        if metric is None:
            raise MetricsFailure(f"no metric {message.get('metric')} (its family was deleted?)")
        return metric

    def _delete(self, number: Any) -> None:
        family = self._families.pop(number, None)
        if family is None:
            return
        for member in self._members.pop(number, ()):
            self._metrics.pop(member, None)
        self.direct.delete_family(family)
