"""The HTML report as a reader sees it: its plots have axes, ticks, labels
and a caption, and no axis is degenerate when every value is the same."""

from __future__ import annotations

import re

from gradverify._sweep import reports


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
    flat = reports.svg_fd_vs_step([[10.0**-k, 0.5, 0.25] for k in range(1, 9)])  # levels off: one value
    one = reports.svg_ad_vs_fd([{"argument": 0, "index": [0], "AD": -1.0, "FD": -1.0}])
    for svg in (flat, one):
        assert "nan" not in svg.lower() and "inf" not in svg.lower()
        ys = [float(v) for v in re.findall(r'<circle cx="[\d.]+" cy="([\d.-]+)"', svg)]
        assert ys and all(12 <= y <= 216 for y in ys)  # inside the plot area, not on an edge of a zero-width axis
        assert len(re.findall(r'font-size="10">', svg)) >= 2
