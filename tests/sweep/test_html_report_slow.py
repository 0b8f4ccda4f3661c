"""The HTML report as a reader sees it in a real headless browser (Debian's
chromium): the page is drawn, and the screenshot shows the plots' own colours."""

from __future__ import annotations

from collections import Counter

import pytest

from .._helpers import screenshot

pytestmark = pytest.mark.slow


def test_a_headless_browser_draws_the_page_with_its_plots(failing_report, tmp_path):
    pixels = screenshot(failing_report / "report.html", tmp_path)
    colours = Counter(pixels)
    white = colours[(255, 255, 255)] / len(pixels)
    assert white < 0.97 and len(colours) > 50, (white, len(colours))  # not a blank page

    # the plots' marks, antialiased: pixels where AD's colour (red: VJP, green: JVP, the failing mode here)
    # or FD's blue dominates
    red = sum(n for (r, g, b), n in colours.items() if r > g + 80 and r > b + 80)
    green = sum(n for (r, g, b), n in colours.items() if g > r + 60 and g > b + 60)  # (#393)
    blue = sum(n for (r, g, b), n in colours.items() if g > r + 15 and b > g + 30)  # (#36c, not a link's #00e)
    failed = sum(n for c, n in colours.items() if all(abs(a - t) <= 8 for a, t in zip(c, (0xFF, 0xBB, 0xBB))))
    assert red + green > 100 and blue > 30 and failed > 300, (red, green, blue, failed)  # (the FAIL cell: #fbb)
