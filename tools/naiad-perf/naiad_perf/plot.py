"""--plot: latency (the chosen percentile, or the average) against throughput.

HTML is self-contained (an inline SVG, no script, no CDN: it opens offline); PNG needs
matplotlib, the ``plot`` extra (``pip install 'naiad-perf[plot]'``).
"""

from __future__ import annotations

import html
import importlib.util
from collections.abc import Sequence
from pathlib import Path

from naiad_perf.api import LoadSpec, Measurement
from naiad_perf.model import PerfError
from naiad_perf.report import chosen_latency, latency_name, number

WIDTH, HEIGHT, MARGIN = 720, 440, 64


def _ticks(top: float, count: int = 5) -> list[float]:
    return [top * i / count for i in range(count + 1)]


def svg(spec: LoadSpec, results: Sequence[Measurement]) -> str:
    """The chart as an SVG element: one circle per load level, joined in order."""
    points = [(m.throughput, chosen_latency(spec, m), m) for m in results]
    x_top = max((p[0] for p in points), default=1.0) * 1.1 or 1.0
    y_top = max((p[1] for p in points), default=1.0) * 1.1 or 1.0

    def x(v: float) -> float:
        return MARGIN + v / x_top * (WIDTH - 2 * MARGIN)

    def y(v: float) -> float:
        return HEIGHT - MARGIN - v / y_top * (HEIGHT - 2 * MARGIN)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
             f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">',
             f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
             f'<line x1="{MARGIN}" y1="{HEIGHT - MARGIN}" x2="{WIDTH - MARGIN}" '
             f'y2="{HEIGHT - MARGIN}" stroke="black"/>',
             f'<line x1="{MARGIN}" y1="{MARGIN}" x2="{MARGIN}" y2="{HEIGHT - MARGIN}" '
             f'stroke="black"/>']
    for t in _ticks(x_top):
        parts.append(f'<text x="{x(t):.1f}" y="{HEIGHT - MARGIN + 16}" '
                     f'text-anchor="middle">{t:.0f}</text>')
    for t in _ticks(y_top):
        parts.append(f'<text x="{MARGIN - 6}" y="{y(t) + 4:.1f}" text-anchor="end">'
                     f'{t / 1000:.2f}</text>')
        parts.append(f'<line x1="{MARGIN}" y1="{y(t):.1f}" x2="{WIDTH - MARGIN}" '
                     f'y2="{y(t):.1f}" stroke="#ddd"/>')
    parts.append(f'<text x="{WIDTH / 2}" y="{HEIGHT - 20}" text-anchor="middle">'
                 f'throughput (infer/sec)</text>')
    parts.append(f'<text x="18" y="{HEIGHT / 2}" text-anchor="middle" '
                 f'transform="rotate(-90 18 {HEIGHT / 2})">{latency_name(spec)} latency '
                 f'(ms)</text>')
    if points:
        path = " ".join(f"{x(px):.1f},{y(py):.1f}" for px, py, _ in points)
        parts.append(f'<polyline class="series" points="{path}" fill="none" '
                     f'stroke="#1f77b4" stroke-width="2"/>')
    for px, py, m in points:
        level = (f"concurrency {m.concurrency}" if m.concurrency is not None
                 else f"rate {number(m.request_rate or 0)}")
        parts.append(f'<circle class="point" cx="{x(px):.1f}" cy="{y(py):.1f}" r="4" '
                     f'fill="#1f77b4" data-throughput="{px:.3f}" data-latency-us="{py:.1f}">'
                     f'<title>{html.escape(level)}: {number(px)} infer/sec, '
                     f'{py:.0f} usec</title></circle>')
    parts.append("</svg>")
    return "\n".join(parts)


def write_html(path: Path, spec: LoadSpec, results: Sequence[Measurement]) -> None:
    title = html.escape(f"naiad perf: {spec.model} on {spec.url} ({spec.protocol})")
    rows = "".join(
        f"<tr><td>{m.concurrency if m.concurrency is not None else number(m.request_rate or 0)}"
        f"</td><td>{number(m.throughput)}</td><td>{chosen_latency(spec, m):.0f}</td></tr>"
        for m in results)
    level = "concurrency" if results and results[0].concurrency is not None else "request rate"
    path.write_text(
        f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title></head>"
        f"<body><h1>{title}</h1>\n{svg(spec, results)}\n<table border=\"1\"><tr>"
        f"<th>{level}</th><th>infer/sec</th><th>{latency_name(spec)} latency (usec)</th></tr>"
        f"{rows}</table></body></html>\n", encoding="utf-8")


def write_png(path: Path, spec: LoadSpec, results: Sequence[Measurement]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise PerfError(PNG_NEEDS) from exc
    figure, axes = plt.subplots(figsize=(7.2, 4.4))
    xs = [m.throughput for m in results]
    ys = [chosen_latency(spec, m) / 1000 for m in results]
    axes.plot(xs, ys, marker="o")
    axes.set_xlabel("throughput (infer/sec)")
    axes.set_ylabel(f"{latency_name(spec)} latency (ms)")
    axes.set_title(f"{spec.model} ({spec.protocol})")
    axes.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


PNG_NEEDS = ("--plot FILE.png needs matplotlib: pip install matplotlib (from a naiad checkout: "
             "pip install './tools/naiad-perf[plot]'), or write FILE.html, which needs nothing")


def check_plot(path: Path) -> None:
    """Refuse a --plot file that could not be written, before any measuring (a run can take
    minutes): not .png or .html, a PNG without matplotlib, a folder that does not exist."""
    suffix = path.suffix.lower()
    if suffix not in (".png", ".html", ".htm"):
        raise PerfError(f"--plot {path}: expected a .png or .html file")
    if suffix == ".png" and importlib.util.find_spec("matplotlib") is None:
        raise PerfError(PNG_NEEDS)
    if not path.parent.is_dir():
        raise PerfError(f"--plot {path}: the folder {path.parent} does not exist")


def write_plot(path: Path, spec: LoadSpec, results: Sequence[Measurement]) -> None:
    suffix = path.suffix.lower()
    if suffix in (".html", ".htm"):
        write_html(path, spec, results)
    elif suffix == ".png":
        write_png(path, spec, results)
    else:
        raise PerfError(f"--plot {path}: expected a .png or .html file")
