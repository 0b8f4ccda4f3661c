"""The failure plots alone: no axis is degenerate, the per-element plot says
which marks are which mode and parts the arguments, the Jacobian's picture
outlines exactly the elements it is given and draws what is not finite grey."""

from __future__ import annotations

import html
import math
import re

from gradverify._sweep import figures


def _plot_area(svg: str) -> tuple[float, float]:
    """The top and bottom (pixels) of a plot's framed area."""
    y, h = (
        float(v) for v in re.search(r'<rect x="[\d.]+" y="([\d.]+)" width="[\d.]+" height="([\d.]+)"', svg).groups()
    )
    return y, y + h


def test_no_axis_is_degenerate_when_every_value_is_the_same():
    flat = figures.svg_fd_vs_step([[10.0**-k, 0.5, 0.25] for k in range(1, 9)])  # levels off: one value
    one = figures.svg_ad_vs_fd([{"argument": 0, "index": [0], "AD": -1.0, "JVP": -1.0, "FD": -1.0}])
    bar = figures.svg_worst({"values": {"VJP": 2.0, "FD": 2.0}})
    for svg in (flat, one, bar):
        assert "nan" not in svg.lower() and "inf" not in svg.lower()
        top, bottom = _plot_area(svg)
        svg = re.sub(r'<g class="legend">.*?</g>', "", svg)  # (the legend's marks stand above the plot area)
        ys = [float(v) for v in re.findall(r'<circle cx="[\d.]+" cy="([\d.-]+)" r="[\d.]+" fill', svg)]
        ys += [
            float(v) for v in re.findall(r'<rect x="[\d.]+" y="([\d.-]+)" width="[\d.]+" height="[\d.]+" fill="#', svg)
        ]
        assert all(top <= y <= bottom for y in ys), (top, bottom, ys)  # inside the plot area
        assert len(re.findall(r'font-size="10">', svg)) >= 2


def _rows(jvp=True):
    """A row of two arguments, x (2x3) and b (3): VJP right, JVP wrong on b."""
    rows = []
    for arg, shape in ((0, (2, 3)), (1, (3,))):
        for k in range(math.prod(shape)):
            index = [k // 3, k % 3] if arg == 0 else [k]
            rows.append({"argument": arg, "index": index, "AD": 0.1 * k, "FD": 0.1 * k,
                         "JVP": (0.1 * k + arg) if jvp else None})  # fmt: skip
    return rows


def test_the_row_plot_marks_each_mode_apart_and_parts_the_arguments():
    svg = figures.svg_ad_vs_fd(_rows())
    crosses = svg.count('stroke="#393" stroke-width="1.5"/>')
    rings = svg.count('r="5" fill="none" stroke="#36c"/>')
    dots = svg.count('r="2.5" fill="#c33"/>')
    assert (crosses, rings, dots) == (9 + 1, 9 + 1, 9 + 1)  # one per element, and the legend's
    assert re.findall(r'font-style="italic">(arg\d)</text>', svg) == ["arg0", "arg1"]
    edge = re.findall(r'<line x1="([\d.]+)"[^>]*stroke-dasharray', svg)
    cols = [float(v) for v in re.findall(r'<path d="M([\d.]+)', svg)[1:]]  # the crosses' left ends, by element
    assert len(edge) == 1 and cols[5] < float(edge[0]) < cols[6]  # between x's last element and b's first
    ticks = re.findall(r'text-anchor="middle" font-size="10">([^<]+)</text>', svg)
    assert ticks[0] == "0,0" and "0" in ticks  # each element's index within its own argument
    assert "forward mode (JVP): green crosses" in svg


def test_without_forward_mode_the_row_plot_says_so():
    svg = figures.svg_ad_vs_fd(_rows(jvp=False))
    assert 'stroke="#393"' not in svg and "Forward mode could not run here" in svg
    assert re.findall(r'<text x="[\d.]+" y="[\d.]+" font-size="10">([^<]+)</text>', svg) == ["VJP", "FD"]


def test_the_jacobian_outlines_the_elements_it_is_given_and_greys_what_is_not_finite():
    m, n = 12, 16
    ad = [[0.1 * (i - j) for j in range(n)] for i in range(m)]
    fd = [row[:] for row in ad]
    over = [[1, 2], [4, 12], [11, 15]]
    for i, j in over:
        fd[i][j] += 1.0
    ad[0][0] = "nan"  # (as JSON keeps it)
    jac = {"pair": ["VJP", "FD"], "output_shape": [3, 4], "over": over, "VJP": ad, "FD": fd,
           "arguments": [{"argument": 0, "shape": [3, 4]}, {"argument": 1, "shape": [4]}]}  # fmt: skip
    failure = {"argument": 1, "input_index": [0], "output_index": [1, 0], "bound": 1e-9}  # row 4, column 12
    svg = figures.svg_jacobian(jac, failure)
    outlined = re.findall(
        r'<rect x="([\d.]+)" y="([\d.]+)" [^>]*fill="none" stroke="#000" stroke-width="([\d.]+)"', svg
    )
    assert len(outlined) == 3 * len(over) and sum(w == "2.5" for _, _, w in outlined) == 3
    cells = {(x, y) for x, y, _ in outlined}
    drawn = re.findall(r'<rect x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" height="[\d.]+" fill="#', svg)
    assert cells <= {(x, y) for x, y, _ in drawn}  # each outline sits on a cell
    assert svg.count('fill="#999"') == 2  # the NaN: in the VJP map and in the difference
    assert "nan" not in svg.lower().replace("the jacobian", "")
    assert sorted(re.findall(r'font-style="italic">(arg\d)</text>', svg)) == ["arg0"] * 3 + ["arg1"] * 3
    svg = html.unescape(svg)
    assert "3 element(s) where |VJP - FD| exceeds the check's bound" in svg and "d output[1, 0] / d arg1[0]" in svg
    assert "arg0 [3x4] in columns 0-11; arg1 [4] in columns 12-15" in svg
