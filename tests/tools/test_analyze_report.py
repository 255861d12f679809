"""naiad analyze's report.html drawn by a real headless Chromium (Debian's ``chromium``):
the DOM holds one mark per measured configuration, and the screenshot shows the charts'
colours where the charts are."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from analyze_fakes import MLP_CONFIG, FakeMeasure, FakeServer

from naiad_perf.analyze.checkpoint import Checkpoint
from naiad_perf.analyze.report import MEMORY_COLOUR, PALETTE, PARETO_COLOUR, write_outputs
from naiad_perf.analyze.runner import Analysis, AnalyzeSettings
from naiad_perf.analyze.scoring import Constraints
from naiad_perf.api import LoadSpec

Image = pytest.importorskip("PIL.Image", reason="Pillow reads the screenshot")

SECONDS = 1.0
CHROMIUM_TIMEOUT = 120 * SECONDS  # a guard against a hang: a page takes a few seconds
WINDOW = (1000, 1400)
PAGE_WIDTH = 1280  # a laptop's browser window: the report must not scroll sideways in it
# Where the charts lie in the window: the latency chart's plot area starts below the title
# and summary; the memory chart follows it.
LATENCY_CHART_ROWS = (100, 560)
MEMORY_CHART_ROWS = (560, 900)
MIN_PIXELS = 20  # pixels of a colour that make a drawn mark, not an anti-aliasing stray


def chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("Debian's chromium is not installed (scripts/test installs it when run as "
                "root with apt-get)")
    raise AssertionError("unreachable")


def run_chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [chromium(), "--headless", "--no-sandbox", "--disable-gpu",
               "--disable-background-networking", "--disable-component-update",
               "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
               f"--window-size={WINDOW[0]},{WINDOW[1]}", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=CHROMIUM_TIMEOUT,
                          check=True)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """A report of a run against a modelled server; each configuration given a memory."""
    folder = tmp_path_factory.mktemp("report")
    server = FakeServer(MLP_CONFIG)
    settings = AnalyzeSettings(spec=LoadSpec(url="127.0.0.1:1", model="mlp"),
                               concurrency=[1, 4, 16], max_candidates=6,
                               constraints=Constraints(max_latency_p99_ms=60))
    checkpoint = Checkpoint.open(folder, settings.fingerprint())
    outcome = Analysis(settings, server, checkpoint, memory_source="modelled",
                       measure_fn=FakeMeasure(server), progress=lambda line: None).run()
    for verdict in outcome.ranked:
        verdict.result.memory_mb = 100.0 + 50 * verdict.result.candidate["instance_count"]
    write_outputs(folder, outcome, settings)
    return folder / "report.html", len(outcome.ranked)


def colour_pixels(pixels, rows: tuple[int, int], colour: str, width: int) -> int:
    target = tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return sum(1 for y in range(*rows) for x in range(width)
               if all(abs(a - b) <= 8 for a, b in zip(pixels[x, y][:3], target, strict=True)))


def test_the_dom_has_one_mark_per_measured_configuration(report, tmp_path):
    page, measured = report
    dom = run_chromium(tmp_path, "--dump-dom", page.as_uri()).stdout
    assert len(re.findall(r'<svg class="chart"', dom)) == 2
    assert len(re.findall(r'class="config-mark"', dom)) == measured
    assert len(re.findall(r'class="memory-bar"', dom)) == measured
    assert len(re.findall(r'class="curve"', dom)) == measured
    assert len(re.findall(r'class="point"', dom)) == 3 * measured
    assert len(re.findall(r'class="pareto"', dom)) == 1
    assert len(re.findall(r'class="pareto-point"', dom)) >= 1
    assert len(re.findall(r"<tr class=", dom)) == measured


def test_the_screenshot_shows_the_charts(report, tmp_path):
    page, _ = report
    shot = tmp_path / "report.png"
    run_chromium(tmp_path, f"--screenshot={shot}", page.as_uri())
    with Image.open(shot) as image:
        rgb = image.convert("RGB")
        width = rgb.width
        pixels = rgb.load()
        assert colour_pixels(pixels, LATENCY_CHART_ROWS, PALETTE[0], width) >= MIN_PIXELS
        assert colour_pixels(pixels, LATENCY_CHART_ROWS, PARETO_COLOUR, width) >= MIN_PIXELS
        assert colour_pixels(pixels, MEMORY_CHART_ROWS, MEMORY_COLOUR, width) >= MIN_PIXELS
        # nothing of the charts above them, where the title is
        assert colour_pixels(pixels, (0, 40), PARETO_COLOUR, width) == 0


def test_the_page_fits_a_1280_pixel_window(report, tmp_path):
    """No horizontal scrolling at 1280 pixels, of the page or of the table's own box: the
    table's long constraint texts wrap."""
    page, _ = report
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace(
        "</body>", "<script>const box = document.querySelector('.wide');"
                   "document.body.setAttribute('data-scroll-width', Math.max("
                   "document.documentElement.scrollWidth, window.innerWidth + "
                   "box.scrollWidth - box.clientWidth));</script></body>"))
    dom = run_chromium(tmp_path, f"--window-size={PAGE_WIDTH},{WINDOW[1]}", "--dump-dom",
                       probe.as_uri()).stdout
    width = re.search(r'data-scroll-width="(\d+)"', dom)
    assert width and int(width.group(1)) <= PAGE_WIDTH, width and width.group(1)
