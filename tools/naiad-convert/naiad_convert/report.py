"""report.json (every figure a run found) and report.html (self-contained: inline SVG, CSS,
no script, no network): one mark per format in the throughput chart (a bar for a format that
passed, a cross for one skipped or failed, with its reason), throughput against batch size
per correct format, and the table of checks and timings."""

from __future__ import annotations

import datetime
import html
import json
import math
from pathlib import Path
from typing import Any

from naiad_convert.jsonable import finite
from naiad_convert.pipeline import ConvertSettings, Outcome
from naiad_convert.state import PASSED, FormatResult

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b")
FAILED_COLOUR = "#d62728"
SKIPPED_COLOUR = "#7f7f7f"
WIDTH = 760
BAR_HEIGHT, BAR_GAP = 26, 10
LINE_HEIGHT = 320
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 150, 30, 20, 44


def report_data(outcome: Outcome, settings: ConvertSettings) -> dict[str, Any]:
    return finite({
        "generated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "source": settings.source,
        "source_kind": outcome.source.kind,
        "model_name": settings.model_name,
        "inputs": [s.to_json() for s in outcome.inputs],
        "outputs": [s.to_json() for s in outcome.outputs],
        "max_batch_size": settings.export.max_batch_size,
        "export": settings.export.to_json(),
        "tolerance": dict(settings.tolerance.__dict__),
        "timing": dict(settings.timing.__dict__, batch_sizes=list(settings.timing.batch_sizes)),
        "served_timing": settings.serve is not None,
        "formats": [r.to_json() for r in outcome.results],
        "winner": outcome.winner.name if outcome.winner else None,
        "preferred_batch_size": outcome.preferred_batch_size,
        "repository": str(outcome.repository) if outcome.repository else None,
        "duration_s": outcome.duration_s,
    })


def write_report(folder: Path, outcome: Outcome, settings: ConvertSettings) -> dict[str, Any]:
    data = report_data(outcome, settings)
    (folder / "report.json").write_text(json.dumps(data, indent=1))
    (folder / "report.html").write_text(render_html(data))
    return data


def _colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def _best(result: dict[str, Any]) -> float:
    return FormatResult.from_json(result).best_throughput()


def throughput_chart(formats: list[dict[str, Any]], winner: str | None) -> str:
    """One row per format: a bar (passed) or a cross (skipped, failed) with its status."""
    height = MARGIN_TOP + len(formats) * (BAR_HEIGHT + BAR_GAP) + MARGIN_BOTTOM
    plot_w = WIDTH - MARGIN_LEFT - MARGIN_RIGHT
    top = max((_best(f) for f in formats), default=0.0) or 1.0
    parts = [f'<svg class="chart" id="throughput" width="{WIDTH}" height="{height}" '
             f'xmlns="http://www.w3.org/2000/svg">']
    passed_index = 0
    for i, fmt in enumerate(formats):
        y = MARGIN_TOP + i * (BAR_HEIGHT + BAR_GAP)
        name = html.escape(fmt["name"])
        parts.append(f'<text x="{MARGIN_LEFT - 8}" y="{y + BAR_HEIGHT * 0.7}" '
                     f'text-anchor="end">{name}</text>')
        if fmt["status"] == PASSED:
            value = _best(fmt)
            width = max(plot_w * value / top, 2)
            crown = " (chosen)" if fmt["name"] == winner else ""
            parts.append(
                f'<rect class="format-mark" data-format="{name}" data-status="passed" '
                f'x="{MARGIN_LEFT}" y="{y}" width="{width:.1f}" height="{BAR_HEIGHT}" '
                f'fill="{_colour(passed_index)}"><title>{name}: {value:.1f} infer/s'
                f'</title></rect>')
            label = f"{value:.1f} infer/s{crown}"
            if width > plot_w * 0.6:  # a long bar carries its label inside
                parts.append(f'<text x="{MARGIN_LEFT + width - 6:.1f}" y="{y + BAR_HEIGHT * 0.7}" '
                             f'text-anchor="end" fill="#fff">{label}</text>')
            else:
                parts.append(f'<text x="{MARGIN_LEFT + width + 6:.1f}" '
                             f'y="{y + BAR_HEIGHT * 0.7}">{label}</text>')
            passed_index += 1
        else:
            colour = SKIPPED_COLOUR if fmt["status"] == "skipped" else FAILED_COLOUR
            cx, cy, r = MARGIN_LEFT + 10, y + BAR_HEIGHT / 2, BAR_HEIGHT / 3
            parts.append(
                f'<path class="format-mark" data-format="{name}" '
                f'data-status="{html.escape(fmt["status"])}" d="M{cx - r},{cy - r} '
                f'L{cx + r},{cy + r} M{cx - r},{cy + r} L{cx + r},{cy - r}" stroke="{colour}" '
                f'stroke-width="4"><title>{html.escape(fmt["reason"])}</title></path>')
            parts.append(f'<text x="{cx + 18}" y="{y + BAR_HEIGHT * 0.7}" fill="{colour}">'
                         f'{html.escape(fmt["status"])}</text>')
    axis_y = height - MARGIN_BOTTOM + 16
    parts.append(f'<text x="{MARGIN_LEFT}" y="{axis_y}">best throughput, inferences/s '
                 f'({"served by naiad" if any(f.get("served") for f in formats) else "in process"})'
                 '</text></svg>')
    return "".join(parts)


def batch_chart(formats: list[dict[str, Any]]) -> str:
    """In-process throughput against batch size, one line per correct format."""
    timed = [f for f in formats if f["status"] == PASSED and f["timings"]]
    if not timed:
        return ""
    sizes = sorted({t["batch_size"] for f in timed for t in f["timings"]})
    top = max(t["throughput"] for f in timed for t in f["timings"]) or 1.0
    plot_w = WIDTH - MARGIN_LEFT - MARGIN_RIGHT
    plot_h = LINE_HEIGHT - MARGIN_TOP - MARGIN_BOTTOM
    span = math.log2(max(sizes)) or 1.0

    def x(size: int) -> float:
        return MARGIN_LEFT + plot_w * (math.log2(size) / span if len(sizes) > 1 else 0.5)

    def y(value: float) -> float:
        return MARGIN_TOP + plot_h * (1 - value / top)

    parts = [f'<svg class="chart" id="batches" width="{WIDTH}" height="{LINE_HEIGHT}" '
             f'xmlns="http://www.w3.org/2000/svg">',
             f'<line x1="{MARGIN_LEFT}" y1="{MARGIN_TOP + plot_h}" x2="{WIDTH - MARGIN_RIGHT}" '
             f'y2="{MARGIN_TOP + plot_h}" stroke="#333"/>',
             f'<line x1="{MARGIN_LEFT}" y1="{MARGIN_TOP}" x2="{MARGIN_LEFT}" '
             f'y2="{MARGIN_TOP + plot_h}" stroke="#333"/>',
             f'<text x="{MARGIN_LEFT - 8}" y="{MARGIN_TOP + 10}" text-anchor="end">'
             f'{top:.0f}</text>']
    for size in sizes:
        parts.append(f'<text x="{x(size):.1f}" y="{MARGIN_TOP + plot_h + 16}" '
                     f'text-anchor="middle">{size}</text>')
    for i, fmt in enumerate(timed):
        points = [(x(t["batch_size"]), y(t["throughput"])) for t in fmt["timings"]]
        path = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
        parts.append(f'<polyline class="curve" data-format="{html.escape(fmt["name"])}" '
                     f'points="{path}" fill="none" stroke="{_colour(i)}" stroke-width="2"/>')
        for px, py in points:
            parts.append(f'<circle class="point" cx="{px:.1f}" cy="{py:.1f}" r="4" '
                         f'fill="{_colour(i)}"/>')
        lx, ly = points[-1]
        parts.append(f'<text x="{lx - 4:.1f}" y="{ly - 8:.1f}" text-anchor="end" '
                     f'fill="{_colour(i)}">{html.escape(fmt["name"])}</text>')
    parts.append(f'<text x="{MARGIN_LEFT + plot_w / 2}" y="{LINE_HEIGHT - 8}" '
                 'text-anchor="middle">batch size (in process); inferences/s</text></svg>')
    return "".join(parts)


def _check_cell(fmt: dict[str, Any]) -> str:
    if not fmt["checks"]:
        return ""
    return "<br>".join(
        f'{html.escape(c["name"])}: abs {_num(c["max_abs_error"])}, rel {_num(c["max_rel_error"])}'
        for c in fmt["checks"])


def _warnings_cell(fmt: dict[str, Any]) -> str:
    return "".join(f'<br><span class="warning">{html.escape(w)}</span>'
                   for w in fmt.get("warnings", []))


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2g}"


def _timing_cell(fmt: dict[str, Any]) -> str:
    rows = [f'b{t["batch_size"]}: {t["throughput"]:.1f}/s, p50 {t["p50_ms"]:.3f} ms, '
            f'p99 {t["p99_ms"]:.3f} ms' for t in fmt["timings"]]
    rows += [f'served b{s["batch_size"]} c{s["concurrency"]}: {s["throughput"]:.1f}/s, '
             f'p99 {s["p99_ms"]:.2f} ms' for s in fmt.get("served", [])]
    if fmt.get("served_error"):
        rows.append("served: " + fmt["served_error"])
    return "<br>".join(html.escape(r) for r in rows)


def render_html(data: dict[str, Any]) -> str:
    formats = data["formats"]
    winner = data["winner"]
    rows = "".join(
        f'<tr class="format-row {html.escape(f["status"])}"><td>{html.escape(f["name"])}'
        f'{" (chosen)" if f["name"] == winner else ""}</td><td>{html.escape(f["status"])}</td>'
        f'<td>{html.escape(f["reason"])}{_warnings_cell(f)}</td><td>{_check_cell(f)}</td>'
        f'<td>{_timing_cell(f)}</td></tr>' for f in formats)
    summary = (f'chose <b>{html.escape(winner)}</b>, preferred batch size '
               f'{data["preferred_batch_size"]}; repository {html.escape(data["repository"])}'
               if winner else "<b>no format passed</b>: no repository was written")
    tensors = ", ".join(f'{html.escape(t["name"])} {t["datatype"]} {t["dims"]}'
                        for t in data["inputs"] + data["outputs"])
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>naiad convert: {html.escape(
        data["model_name"])}</title>
<style>
body {{ font-family: sans-serif; margin: 16px; color: #222; }}
h1 {{ font-size: 20px; margin: 0 0 8px; }}
p {{ margin: 4px 0; font-size: 13px; }}
svg text {{ font-size: 12px; font-family: sans-serif; }}
table {{ border-collapse: collapse; font-size: 12px; margin-top: 12px; }}
td, th {{ border: 1px solid #ccc; padding: 3px 6px; vertical-align: top; text-align: left; }}
.warning {{ color: #8c564b; }}
tr.passed td:nth-child(2) {{ color: #2ca02c; }}
tr.check-failed td:nth-child(2), tr.export-failed td:nth-child(2) {{ color: {FAILED_COLOUR}; }}
</style></head><body>
<h1>naiad convert: {html.escape(data["model_name"])}</h1>
<p>{html.escape(data["source"])} ({html.escape(data["source_kind"])}); {tensors};
max_batch_size {data["max_batch_size"]}; tolerance atol {data["tolerance"]["atol"]:g},
rtol {data["tolerance"]["rtol"]:g}</p>
<p>{summary}</p>
{throughput_chart(formats, winner)}
{batch_chart(formats)}
<table><tr><th>format</th><th>status</th><th>why</th><th>max errors</th><th>timings</th></tr>
{rows}</table>
<p>generated {html.escape(data["generated"])} in {data["duration_s"]:.1f} s</p>
</body></html>
"""
