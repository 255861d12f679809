"""Prometheus text exposition, written as Triton's prometheus-cpp writes it.

Values print with 16 significant digits (``%.16g``: ``0.3``, ``1e+20``,
``1.234567890123457e+16``), ``Nan``, ``+Inf`` and ``-Inf``; labels are sorted by name,
a histogram's ``le`` label last; a histogram prints ``_count``, ``_sum``, then one
``_bucket`` line per bound and ``le="+Inf"``; a summary ``_count``, ``_sum``, then one line
per quantile (its ``quantile`` label last). Label values are escaped (``\\``, ``"``,
newline) as the format requires; so is HELP text, which Triton 2.51 prints raw (a newline
in a description breaks its output).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from naiad.metrics.histogram import HistogramSnapshot

Labels = Iterable[tuple[str, str]]


def family_header(lines: list[str], name: str, help_text: str, kind: str) -> None:
    """The ``# HELP`` and ``# TYPE`` lines of a family."""
    escaped = help_text.replace("\\", "\\\\").replace("\n", "\\n")
    lines.append(f"# HELP {name} {escaped}")
    lines.append(f"# TYPE {name} {kind}")


def format_value(value: float) -> str:
    """A sample value as prometheus-cpp prints it."""
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "Nan"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:.16g}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def format_labels(labels: Labels) -> str:
    """``{a="x",b="y"}`` (in the order given), or "" for no labels."""
    inner = ",".join(f'{name}="{_escape(value)}"' for name, value in labels)
    return f"{{{inner}}}" if inner else ""


def sample(lines: list[str], name: str, labels: Labels, value: float) -> None:
    lines.append(f"{name}{format_labels(labels)} {format_value(value)}")


def histogram(lines: list[str], name: str, labels: Labels, snapshot: HistogramSnapshot
              ) -> None:
    """The lines of one histogram: ``_count``, ``_sum`` and the cumulative buckets."""
    labels = list(labels)
    rendered = format_labels(labels)
    lines.append(f"{name}_count{rendered} {snapshot.count}")
    lines.append(f"{name}_sum{rendered} {format_value(snapshot.sum)}")
    bounds = [format_value(bound) for bound in snapshot.bounds] + ["+Inf"]
    for bound, count in zip(bounds, snapshot.cumulative, strict=True):
        lines.append(f"{name}_bucket{format_labels([*labels, ('le', bound)])} {count}")


def summary(lines: list[str], name: str, labels: Labels, quantiles: Sequence[float],
            values: Sequence[float], count: int, total: float) -> None:
    """The lines of one summary: ``_count``, ``_sum`` and the value at each quantile."""
    labels = list(labels)
    rendered = format_labels(labels)
    lines.append(f"{name}_count{rendered} {count}")
    lines.append(f"{name}_sum{rendered} {format_value(total)}")
    for quantile, value in zip(quantiles, values, strict=True):
        lines.append(f"{name}{format_labels([*labels, ('quantile', format_value(quantile))])}"
                     f" {format_value(value)}")
