"""The HTML report as a reader sees it in a real headless browser (Debian's
chromium): the page is drawn, and the screenshot shows the plots' own colours."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections import Counter

import pytest

from ._helpers import png_pixels

pytestmark = pytest.mark.slow


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
