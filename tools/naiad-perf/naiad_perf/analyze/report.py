"""The output folder: report.html (self-contained: inline SVG charts and CSS, no script, no
network), results.csv (one row per candidate, ranked), measurements.csv (one row per
candidate and concurrency level) and best/config.pbtxt (the winner's full configuration in
protobuf text format, which naiad and Triton load as it is).
"""

from __future__ import annotations

import csv
import datetime
import html
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from naiad_perf.analyze.candidates import describe
from naiad_perf.analyze.runner import AnalyzeSettings, Outcome
from naiad_perf.analyze.scoring import Verdict, pareto_front

# Series colours, in rank order (the winner first); the pareto front has its own colour.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#bcbd22", "#7f7f7f", "#aec7e8", "#ffbb78", "#98df8a")
PARETO_COLOUR = "#d62728"
MEMORY_COLOUR = "#4c78a8"
CHART_WIDTH, CHART_HEIGHT = 760, 420
CONSTRAINT_ZOOM = 2.0  # the p99 line is drawn when at most this times the highest latency
MARGIN = {"left": 64, "right": 20, "top": 20, "bottom": 48}


def colour(rank_index: int) -> str:
    return PALETTE[rank_index % len(PALETTE)]


def write_outputs(folder: Path, outcome: Outcome, settings: AnalyzeSettings) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    write_results_csv(folder / "results.csv", outcome)
    write_measurements_csv(folder / "measurements.csv", outcome)
    if outcome.winner is not None:
        (folder / "best").mkdir(exist_ok=True)
        (folder / "best" / "config.pbtxt").write_text(
            config_pbtxt(outcome.winner.result.config))
    (folder / "report.html").write_text(render_html(outcome, settings))


def config_pbtxt(config: dict[str, Any]) -> str:
    """A configuration (the JSON the server serves) as config.pbtxt text."""
    from google.protobuf import json_format, text_format
    from tritonclient.grpc import model_config_pb2

    message = json_format.ParseDict(config, model_config_pb2.ModelConfig(),
                                    ignore_unknown_fields=True)
    return text_format.MessageToString(message)


# --- CSV ------------------------------------------------------------------------------------

def _dimension_names(outcome: Outcome) -> list[str]:
    return [d.name for d in outcome.space.dimensions]


def write_results_csv(path: Path, outcome: Outcome) -> None:
    names = _dimension_names(outcome)
    with open(path, "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["rank", "config", *names, "concurrency", "throughput_infer_per_s",
                         "p99_ms", "p95_ms", "p90_ms", "p50_ms", "avg_ms", "memory_mb",
                         "meets_constraints", "violations", "is_default"])
        default_key = outcome.default.key if outcome.default else None
        for rank_index, verdict in enumerate(outcome.ranked, 1):
            best = verdict.best
            figures: list[Any] = ([best.concurrency, f"{best.throughput:.2f}",
                                   f"{best.p99_ms:.3f}", f"{best.p95_ms:.3f}",
                                   f"{best.p90_ms:.3f}", f"{best.p50_ms:.3f}",
                                   f"{best.avg_ms:.3f}"] if best else [""] * 7)
            candidate = verdict.result.candidate
            writer.writerow([rank_index, verdict.key, *(candidate.get(n, "") for n in names),
                             *figures, _number(verdict.result.memory_mb),
                             int(verdict.feasible), "; ".join(verdict.violations),
                             int(verdict.key == default_key)])


def write_measurements_csv(path: Path, outcome: Outcome) -> None:
    with open(path, "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["config", "concurrency", "throughput_infer_per_s", "p99_ms", "p95_ms",
                         "p90_ms", "p50_ms", "avg_ms", "server_queue_us", "server_compute_us",
                         "errors", "stable", "memory_mb"])
        for verdict in outcome.ranked:
            for p in verdict.result.points:
                writer.writerow([verdict.key, p.concurrency, f"{p.throughput:.2f}",
                                 f"{p.p99_ms:.3f}", f"{p.p95_ms:.3f}", f"{p.p90_ms:.3f}",
                                 f"{p.p50_ms:.3f}", f"{p.avg_ms:.3f}",
                                 f"{p.server_queue_us:.1f}", f"{p.server_compute_us:.1f}",
                                 p.errors, int(p.stable), _number(verdict.result.memory_mb)])


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"


# --- SVG ------------------------------------------------------------------------------------

def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values covering [low, high]."""
    if high <= low:
        high = low + 1.0
    raw = (high - low) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    start = (low // step) * step
    ticks, value = [], start
    while value <= high + step * 1e-9 and len(ticks) < 50:
        ticks.append(round(value, 10))
        value += step
    if ticks[-1] < high:
        ticks.append(round(value, 10))
    return ticks


class Scale:
    """Data coordinates to pixels along one axis."""

    def __init__(self, low: float, high: float, pixel_low: float, pixel_high: float) -> None:
        self.ticks = nice_ticks(low, high)
        self.low, self.high = self.ticks[0], self.ticks[-1]
        self.pixel_low, self.pixel_high = pixel_low, pixel_high

    def __call__(self, value: float) -> float:
        span = (self.high - self.low) or 1.0
        return self.pixel_low + (value - self.low) / span * (self.pixel_high - self.pixel_low)


def _fmt(value: float) -> str:
    return f"{value:g}" if abs(value) < 1e5 else f"{value:.3g}"


def _axes(x: Scale, y: Scale, x_label: str, y_label: str) -> list[str]:
    left, bottom = MARGIN["left"], CHART_HEIGHT - MARGIN["bottom"]
    right, top = CHART_WIDTH - MARGIN["right"], MARGIN["top"]
    parts = [f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" '
             'fill="#ffffff" stroke="#999999"/>']
    for tick in x.ticks:
        px = x(tick)
        parts.append(f'<line x1="{px:.1f}" y1="{top}" x2="{px:.1f}" y2="{bottom}" '
                     'stroke="#eeeeee"/>')
        parts.append(f'<text x="{px:.1f}" y="{bottom + 16}" text-anchor="middle">'
                     f'{_fmt(tick)}</text>')
    for tick in y.ticks:
        py = y(tick)
        parts.append(f'<line x1="{left}" y1="{py:.1f}" x2="{right}" y2="{py:.1f}" '
                     'stroke="#eeeeee"/>')
        parts.append(f'<text x="{left - 6}" y="{py + 4:.1f}" text-anchor="end">'
                     f'{_fmt(tick)}</text>')
    parts.append(f'<text x="{(left + right) / 2}" y="{CHART_HEIGHT - 8}" '
                 f'text-anchor="middle">{html.escape(x_label)}</text>')
    parts.append(f'<text x="14" y="{(top + bottom) / 2}" text-anchor="middle" '
                 f'transform="rotate(-90 14 {(top + bottom) / 2})">{html.escape(y_label)}</text>')
    return parts


def latency_chart(ranked: Sequence[Verdict], max_p99_ms: float | None) -> str:
    """Throughput (x) against p99 latency (y): one line per configuration through its
    concurrency levels, its best point as a larger mark, the pareto front over every point
    drawn on top, the p99 constraint as a dashed line."""
    measured = [v for v in ranked if v.result.points]
    points = [(p.throughput, p.p99_ms) for v in measured for p in v.result.points]
    if not points:
        return '<p class="empty">no configuration was measured</p>'
    top_latency = max(lat for _, lat in points)
    # The constraint line is drawn when it lies near the data; far above, it would squash
    # every curve against the axis (the heading names it instead).
    if max_p99_ms is not None and max_p99_ms <= top_latency * CONSTRAINT_ZOOM:
        top_latency = max(top_latency, max_p99_ms)
    else:
        max_p99_ms = None
    x = Scale(0.0, max(t for t, _ in points) * 1.05, MARGIN["left"],
              CHART_WIDTH - MARGIN["right"])
    y = Scale(0.0, top_latency * 1.05, CHART_HEIGHT - MARGIN["bottom"], MARGIN["top"])
    parts = _axes(x, y, "throughput (infer/s)", "p99 latency (ms)")
    if max_p99_ms is not None:
        parts.append(f'<line class="constraint" x1="{MARGIN["left"]}" y1="{y(max_p99_ms):.1f}" '
                     f'x2="{CHART_WIDTH - MARGIN["right"]}" y2="{y(max_p99_ms):.1f}" '
                     f'stroke="#555555" stroke-dasharray="6 4"><title>--max-latency-p99 '
                     f'{max_p99_ms:g} ms</title></line>')
    for index in reversed(range(len(measured))):  # the winner drawn last, on top
        verdict = measured[index]
        stroke = colour(ranked.index(verdict))
        ordered = sorted(verdict.result.points, key=lambda p: p.concurrency)
        line = " ".join(f"{x(p.throughput):.1f},{y(p.p99_ms):.1f}" for p in ordered)
        label = html.escape(describe(verdict.result.candidate))
        parts.append(f'<g class="config" data-key="{html.escape(verdict.key)}">')
        parts.append(f'<polyline class="curve" points="{line}" fill="none" stroke="{stroke}" '
                     'stroke-width="2"/>')
        for p in ordered:
            parts.append(f'<circle class="point" cx="{x(p.throughput):.1f}" '
                         f'cy="{y(p.p99_ms):.1f}" r="3" fill="{stroke}"><title>{label} '
                         f'c={p.concurrency}: {p.throughput:.1f} infer/s, p99 {p.p99_ms:.2f} ms'
                         '</title></circle>')
        best = verdict.best or ordered[-1]
        parts.append(f'<circle class="config-mark" cx="{x(best.throughput):.1f}" '
                     f'cy="{y(best.p99_ms):.1f}" r="7" fill="{stroke}" stroke="#000000" '
                     f'stroke-width="1"><title>{label}: best point c={best.concurrency}'
                     '</title></circle>')
        parts.append("</g>")
    front = pareto_front(points)
    line = " ".join(f"{x(points[i][0]):.1f},{y(points[i][1]):.1f}" for i in front)
    parts.append(f'<polyline class="pareto" points="{line}" fill="none" '
                 f'stroke="{PARETO_COLOUR}" stroke-width="4" stroke-opacity="0.8"/>')
    for i in front:
        parts.append(f'<circle class="pareto-point" cx="{x(points[i][0]):.1f}" '
                     f'cy="{y(points[i][1]):.1f}" r="10" fill="none" stroke="{PARETO_COLOUR}" '
                     'stroke-width="3"/>')
    return _svg("latency-chart", parts, CHART_HEIGHT)


def memory_chart(ranked: Sequence[Verdict]) -> str:
    """One horizontal bar per configuration: its server's peak resident memory."""
    rows = [v for v in ranked if v.result.memory_mb is not None]
    if not rows:
        return ('<p class="empty">memory was not measured (a remote server this machine '
                'cannot inspect: use local mode or --server-pid)</p>')
    bar, gap, label_width = 18, 8, 240
    height = MARGIN["top"] + len(rows) * (bar + gap) + MARGIN["bottom"]
    left, right = label_width, CHART_WIDTH - MARGIN["right"]
    x = Scale(0.0, max(v.result.memory_mb or 0.0 for v in rows) * 1.05, left, right)
    parts = [f'<rect x="{left}" y="{MARGIN["top"]}" width="{right - left}" '
             f'height="{height - MARGIN["top"] - MARGIN["bottom"]}" fill="#ffffff" '
             'stroke="#999999"/>']
    bottom = height - MARGIN["bottom"]
    for tick in x.ticks:
        parts.append(f'<line x1="{x(tick):.1f}" y1="{MARGIN["top"]}" x2="{x(tick):.1f}" '
                     f'y2="{bottom}" stroke="#eeeeee"/>')
        parts.append(f'<text x="{x(tick):.1f}" y="{bottom + 16}" text-anchor="middle">'
                     f'{_fmt(tick)}</text>')
    for row, verdict in enumerate(rows):
        top = MARGIN["top"] + gap / 2 + row * (bar + gap)
        memory = verdict.result.memory_mb or 0.0
        label = html.escape(describe(verdict.result.candidate))
        parts.append(f'<text x="{left - 6}" y="{top + bar - 5:.1f}" text-anchor="end">'
                     f'{label}</text>')
        parts.append(f'<rect class="memory-bar" data-key="{html.escape(verdict.key)}" '
                     f'x="{left}" y="{top:.1f}" width="{x(memory) - left:.1f}" height="{bar}" '
                     f'fill="{MEMORY_COLOUR}"><title>{label}: {memory:.0f} MB</title></rect>')
        parts.append(f'<rect x="{left - 4 - 0}" y="{top:.1f}" width="4" height="{bar}" '
                     f'fill="{colour(ranked.index(verdict))}"/>')
    parts.append(f'<text x="{(left + right) / 2}" y="{height - 8}" text-anchor="middle">'
                 'peak resident memory of the server and its workers (MB)</text>')
    return _svg("memory-chart", parts, height)


def _svg(name: str, parts: list[str], height: int) -> str:
    body = "\n".join(parts)
    return (f'<svg class="chart" id="{name}" xmlns="http://www.w3.org/2000/svg" '
            f'width="{CHART_WIDTH}" height="{height}" viewBox="0 0 {CHART_WIDTH} {height}" '
            f'font-family="sans-serif" font-size="12">\n{body}\n</svg>')


# --- HTML -----------------------------------------------------------------------------------

STYLE = """
body { font-family: sans-serif; margin: 16px 24px; color: #222; background: #fff; }
h1 { font-size: 20px; margin: 0 0 6px; } h2 { font-size: 16px; margin: 18px 0 6px; }
.summary { margin: 6px 0; } .notes { color: #555; font-size: 13px; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: right; }
td.name, th.name { text-align: left; } tr.fail td { color: #888; }
td.name { min-width: 16em; overflow-wrap: anywhere; }
.wide { max-width: 100%; overflow-x: auto; }
.swatch { display: inline-block; width: 12px; height: 12px; vertical-align: middle; }
pre { background: #f6f6f6; padding: 8px; font-size: 12px; white-space: pre-wrap; }
"""


def _summary(outcome: Outcome, settings: AnalyzeSettings) -> str:
    winner, default = outcome.winner, outcome.default
    if winner is None or winner.best is None:
        return "<p class='summary'>No configuration could be measured.</p>"
    text = (f"Best: <b>{html.escape(describe(winner.result.candidate))}</b>: "
            f"{winner.best.throughput:.1f} infer/s, p99 {winner.best.p99_ms:.2f} ms at "
            f"concurrency {winner.best.concurrency}")
    if not winner.feasible:
        text += " (no configuration met the constraints: this one comes closest)"
    if default is not None and default.best is not None and default is not winner:
        gain = winner.best.throughput / max(default.best.throughput, 1e-9) - 1
        text += (f"; the model's own configuration: {default.best.throughput:.1f} infer/s, "
                 f"p99 {default.best.p99_ms:.2f} ms ({gain:+.0%} throughput)")
    elif default is winner:
        text += " (the model's own configuration is the best found)"
    return f"<p class='summary'>{text}.</p>"


def _table(outcome: Outcome) -> str:
    names = _dimension_names(outcome)
    # long names (max_queue_delay_us) may break after an underscore, so the columns narrow
    head = "".join(f"<th>{html.escape(n).replace('_', '_<wbr>')}</th>" for n in names)
    rows = []
    for rank_index, verdict in enumerate(outcome.ranked):
        best, memory = verdict.best, verdict.result.memory_mb
        cells = "".join(f"<td>{verdict.result.candidate.get(n, '')}</td>" for n in names)
        figures = (f"<td>{best.concurrency}</td><td>{best.throughput:.1f}</td>"
                   f"<td>{best.p99_ms:.2f}</td><td>{best.p50_ms:.2f}</td>" if best
                   else "<td></td>" * 4)
        status = "meets" if verdict.feasible else html.escape("; ".join(verdict.violations))
        default = " (default)" if outcome.default is verdict else ""
        rows.append(
            f"<tr class='{'ok' if verdict.feasible else 'fail'}'><td>{rank_index + 1}</td>"
            f"<td><span class='swatch' style='background:{colour(rank_index)}'></span></td>"
            f"{cells}{figures}<td>{_number(memory)}</td>"
            f"<td class='name'>{status}{default}</td></tr>")
    # The constraints column wraps; a table with many dimensions scrolls in its own box
    # rather than pushing the page past the window.
    return ("<div class='wide'><table id='ranking'><tr><th>rank</th><th></th>" + head +
            "<th>concurrency</th><th>infer/s</th><th>p99 ms</th><th>p50 ms</th><th>MB</th>"
            "<th class='name'>constraints</th></tr>\n" + "\n".join(rows) + "</table></div>")


def render_html(outcome: Outcome, settings: AnalyzeSettings) -> str:
    constraints = settings.constraints
    limits = [f"p99 &le; {constraints.max_latency_p99_ms:g} ms"
              if constraints.max_latency_p99_ms is not None else "",
              f"throughput &ge; {constraints.min_throughput:g} infer/s"
              if constraints.min_throughput is not None else "",
              f"memory &le; {constraints.max_memory_mb:g} MB"
              if constraints.max_memory_mb is not None else ""]
    limits_text = ", ".join(part for part in limits if part) or "none"
    p99_note = ("" if constraints.max_latency_p99_ms is None else
                f"; dashed: p99 &le; {constraints.max_latency_p99_ms:g} ms, when in range")
    notes = "".join(f"<li>{html.escape(note)}</li>" for note in outcome.space.notes)
    skipped = outcome.log.skipped
    if skipped:
        notes += f"<li>{skipped} grid candidates left out by --max-candidates</li>"
    best_config = ""
    if outcome.winner is not None:
        best_config = (f"<h2>best/config.pbtxt</h2><pre>"
                       f"{html.escape(config_pbtxt(outcome.winner.result.config))}</pre>")
    spec = settings.spec
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>naiad analyze: {html.escape(spec.model)}</title><style>{STYLE}</style></head>
<body>
<h1>naiad analyze: {html.escape(spec.model)}</h1>
{_summary(outcome, settings)}
<h2>Throughput vs p99 latency per configuration (pareto front in red{p99_note})</h2>
{latency_chart(outcome.ranked, constraints.max_latency_p99_ms)}
<h2>Memory per configuration</h2>
{memory_chart(outcome.ranked)}
<h2>Ranked configurations</h2>
{_table(outcome)}
<p class="notes">{settings.mode} search, {len(outcome.ranked)} configurations measured at
concurrency {", ".join(map(str, settings.concurrency))}; objective
{html.escape(settings.objective.describe())}; constraints {limits_text}; server
{html.escape(spec.url)} over {html.escape(spec.protocol)}; memory:
{html.escape(outcome.memory_source)}; {stamp}.</p>
<ul class="notes">{notes}</ul>
{best_config}
</body></html>
"""
