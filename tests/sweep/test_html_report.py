"""The HTML report as a reader sees it: its plots have axes, ticks, labels
and a caption, and a real headless browser (Debian's chromium) draws the
page - the screenshot is checked for the plots' own colours."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from gradverify._sweep import reports
from gradverify.cli import main

from ._helpers import png_pixels


@pytest.fixture(scope="module")
def failing_report(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report")
    code = main(["check", "example:seed-bug", "--backend", "numpy", "--report", str(out), "--format", "html,json"])
    assert code == 1
    return out


def _svgs(page: str) -> list[str]:
    return re.findall(r"<svg .*?</svg>", page, re.S)


def test_each_plot_has_ticks_axis_labels_and_a_caption(failing_report):
    page = (failing_report / "report.html").read_text()
    figures = re.findall(r'<figure class="plot">(.*?)</figure>', page, re.S)
    assert len(figures) == 2, page[:2000]
    for fig in figures:
        ticks = re.findall(
            r'<text x="[\d.]+" y="[\d.]+" text-anchor="(?:middle|end)" font-size="10">([^<]+)</text>', fig
        )
        assert len(ticks) >= 3 and len(set(ticks)) == len(ticks), ticks  # labelled and distinct
        assert "<figcaption>" in fig and len(re.search(r"<figcaption>(.*?)</figcaption>", fig).group(1)) > 60
    step, ad = figures
    assert "finite-difference step h" in step and "|FD(h) - AD|" in step and "1e-2" in step
    assert "input element" in ad and "d output / d input" in ad and "AD (red dots)" in ad


def test_no_axis_is_degenerate_when_every_value_is_the_same():
    flat = reports._svg_fd_vs_step([[10.0**-k, 0.5, 0.25] for k in range(1, 9)])  # levels off: one value
    one = reports._svg_ad_vs_fd([{"argument": 0, "index": [0], "AD": -1.0, "FD": -1.0}])
    for svg in (flat, one):
        assert "nan" not in svg.lower() and "inf" not in svg.lower()
        ys = [float(v) for v in re.findall(r'<circle cx="[\d.]+" cy="([\d.-]+)"', svg)]
        assert ys and all(12 <= y <= 216 for y in ys)  # inside the plot area, not on an edge of a zero-width axis
        assert len(re.findall(r'font-size="10">', svg)) >= 2


@pytest.mark.slow
def test_a_headless_browser_draws_the_page_with_its_plots(failing_report, tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        if os.environ.get("GRADVERIFY_REQUIRE_BROWSER"):
            pytest.fail("chromium is not installed, and GRADVERIFY_REQUIRE_BROWSER is set (.ci/run installs it)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    shot = tmp_path / "page.png"
    done = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1000,700",
            f"--screenshot={shot}",
            (failing_report / "report.html").as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    pixels = png_pixels(shot.read_bytes())
    colours = Counter(pixels)
    white = colours[(255, 255, 255)] / len(pixels)
    assert white < 0.97 and len(colours) > 50, (white, len(colours))  # not a blank page

    # the plots' marks, antialiased: pixels where red (AD, |FD - AD|) or blue (FD's rings) dominates
    red = sum(n for (r, g, b), n in colours.items() if r > g + 80 and r > b + 80)
    blue = sum(n for (r, g, b), n in colours.items() if g > r + 15 and b > g + 30)  # (#36c, not a link's #00e)
    failed = sum(n for c, n in colours.items() if all(abs(a - t) <= 8 for a, t in zip(c, (0xFF, 0xBB, 0xBB))))
    assert red > 100 and blue > 30 and failed > 300, (red, blue, failed)  # (the FAIL cell: #fbb)
