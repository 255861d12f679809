"""naiad convert's report.html drawn by a real headless Chromium (Debian's ``chromium``): one
mark per format (a bar for each that passed, a cross for the skipped TensorRT), a curve per
correct format, and the screenshot shows the marks' colours."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from convert_helpers import report
from naiad_convert.report import PALETTE, SKIPPED_COLOUR

Image = pytest.importorskip("PIL.Image", reason="Pillow reads the screenshot")

SECONDS = 1.0
CHROMIUM_TIMEOUT = 120 * SECONDS  # a guard against a hang: a page takes a few seconds
WINDOW = (1000, 900)
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


def colour_pixels(image, colour: str) -> int:
    target = np.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)])
    pixels = np.asarray(image, dtype=np.int16)
    return int(np.all(np.abs(pixels - target) <= 8, axis=-1).sum())


def test_the_dom_has_one_mark_per_format(cnn_run, tmp_path):
    data = report(cnn_run)
    dom = run_chromium(tmp_path, "--dump-dom", (cnn_run / "report.html").as_uri()).stdout
    marks = re.findall(r'class="format-mark" data-format="([^"]+)" data-status="([^"]+)"', dom)
    assert sorted(marks) == sorted((f["name"], f["status"]) for f in data["formats"])
    assert len(marks) == 5
    passed = [f for f in data["formats"] if f["status"] == "passed"]
    assert len(re.findall(r'class="curve"', dom)) == len(passed) == 4
    assert len(re.findall(r'class="point"', dom)) == 2 * len(passed)  # batch sizes 1 and 4
    assert len(re.findall(r'<tr class="format-row', dom)) == 5
    assert "torch-export (chosen)" in dom


def test_the_screenshot_shows_the_marks(cnn_run, tmp_path):
    shot = tmp_path / "report.png"
    run_chromium(tmp_path, f"--screenshot={shot}", (cnn_run / "report.html").as_uri())
    shutil.copyfile(shot, cnn_run / "report.png")  # to look at when it fails
    with Image.open(shot) as image:
        rgb = image.convert("RGB")
        for colour in (*PALETTE[:4], SKIPPED_COLOUR):
            assert colour_pixels(rgb, colour) >= MIN_PIXELS, colour
