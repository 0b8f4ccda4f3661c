"""The HTML report as a reader sees it: the matrix says what its cells show
and leaves out what is all skips; each failure's plots have axes, ticks,
labels, a legend where they mix marks, and a caption; a failing full-Jacobian
check is drawn as a picture of its Jacobian."""

from __future__ import annotations

import html
import json
import re

from gradverify import _io
from gradverify._sweep import reports

from ._helpers import LONG_LINE, matrix_report


def _figures(page: str) -> dict[str, str]:
    """Each figure of the page by its SVG's class."""
    return {
        re.search(r'<svg class="([\w-]+)"', fig).group(1): fig
        for fig in re.findall(r'<figure class="plot[^"]*">(.*?)</figure>', page, re.S)
    }


def _cells(page: str) -> dict[str, str]:
    """Each matrix cell's inner HTML by its case id."""
    return dict(re.findall(r'<td class="\w+" title="([^"]+?): (?:passed|failed|skipped|error)[^"]*">(.*?)</td>', page))


def test_each_plot_has_ticks_axis_labels_and_a_caption(failing_report):
    page = (failing_report / "report.html").read_text()
    figures = _figures(page)
    assert set(figures) == {"worst", "fd-vs-step", "ad-vs-fd", "jacobian"}, page[:2000]
    for name in ("worst", "fd-vs-step", "ad-vs-fd"):
        fig = figures[name]
        ticks = re.findall(
            r'<text x="[\d.]+" y="[\d.]+" text-anchor="(?:middle|end)" font-size="10">([^<]+)</text>', fig
        )
        assert len(ticks) >= 3 and len(set(ticks)) == len(ticks), ticks  # labelled and distinct
        axis_labels = re.findall(r'font-size="11"[^>]*>([^<]+)</text>', fig)
        assert len(axis_labels) == 2 and all(axis_labels), (name, axis_labels)  # both axes labelled
        assert "<figcaption>" in fig and len(re.search(r"<figcaption>(.*?)</figcaption>", fig).group(1)) > 60
    step, ad = figures["fd-vs-step"], figures["ad-vs-fd"]
    assert "finite-difference step h" in step and "|FD(h) - JVP|" in step and "1e-2" in step  # (the failing mode)
    assert "input element" in ad and "d output / d input" in ad and "reverse mode (VJP): red dots" in ad


def test_the_bar_chart_labels_its_axes_with_the_element_and_who_computed_it(failing_report):
    worst = _figures((failing_report / "report.html").read_text())["worst"]
    f = json.loads((failing_report / "report.json").read_text())["cases"][0]["failure"]
    element = f"d output[{', '.join(map(str, f['output_index']))}] / d arg{f['argument']}"
    labels = re.findall(r'font-size="11"[^>]*>([^<]+)</text>', worst)
    assert labels[0] == "computed by" and labels[1].startswith(element), labels  # x, then y
    ticks = re.findall(r'text-anchor="middle" font-size="10">([^<]+)</text>', worst)
    assert ticks == list(f["values"]), ticks  # a bar per side, named


def test_the_row_plot_says_which_marks_are_jvp_and_vjp_and_where_each_argument_starts(failing_report):
    ad = _figures((failing_report / "report.html").read_text())["ad-vs-fd"]
    legend = re.findall(r'<text x="[\d.]+" y="[\d.]+" font-size="10">([^<]+)</text>', ad)
    assert legend == ["VJP", "JVP", "FD"], legend
    assert re.findall(r'font-style="italic">(arg\d)</text>', ad) == ["arg0", "arg1"]
    assert len(re.findall(r'stroke-dasharray="4 3"', ad)) == 1  # one boundary between two arguments


def test_a_failing_full_jacobian_check_is_drawn_as_its_jacobian(failing_report):
    """AD, FD and their difference side by side, the elements over the bound
    outlined in each; what the record carries for it."""
    page = (failing_report / "report.html").read_text()
    f = json.loads((failing_report / "report.json").read_text())["cases"][0]["failure"]
    jac = f["jacobian"]
    assert jac["pair"] == f["pair"] and jac["output_shape"] == [1, 1]
    assert [a["shape"] for a in jac["arguments"]] == [c["shape"] for c in f["counterexample"]]
    ad, fd = jac[f["pair"][0]], jac[f["pair"][1]]
    assert ad[0][0] == f["values"][f["pair"][0]] and abs(fd[0][0] - f["values"]["FD"]) < 1e-6
    assert [0, 0] in jac["over"]  # the failing element
    picture = _figures(page)["jacobian"]
    titles = re.findall(r'font-weight="bold">([^<]+)</text>', picture)
    assert titles == ["forward mode (JVP)", "finite differences (FD)", "JVP - FD"], titles
    outlined = re.findall(r'fill="none" stroke="#000" stroke-width="([\d.]+)"', picture)
    assert len(outlined) == 3 * len(jac["over"]) and outlined.count("2.5") == 3  # the worst, thickest in each
    said = html.unescape(picture)
    assert f"the {len(jac['over'])} element(s) where |JVP - FD| exceeds the check's bound" in said


def test_each_cell_of_the_matrix_shows_its_time_and_its_error_over_bound():
    page = reports.to_html(matrix_report())
    cells = _cells(page)
    assert cells["bias_act:relu[torch,fused,float64]"].endswith("pass<small>1.23 s</small><small>0.012</small>")
    failed = cells["bias_act:swish[torch,fused,float64]"]  # the failure's own ratio, 0.43 / 2e-9
    assert failed.endswith("FAIL</a><small>0.50 s</small><small>2.1e+08</small>"), failed
    assert html.escape(reports.MATRIX_LEGEND) in page and '<div class="scroll"><table id="matrix">' in page


def test_a_column_of_skips_alone_is_left_out_and_explained_once():
    page = reports.to_html(matrix_report())
    head = page[page.index('<table id="matrix">') : page.index("<tbody>")]
    assert re.findall(r"<th[^>]*>(\w+)</th>", head)[:4] == ["target", "numpy", "torch", "jax"]
    assert not any(k.startswith("bias_act:relu[numpy,reference") for k in _cells(page))  # numpy's reference: out
    assert "bias_act:relu[numpy,fused,float32]" in _cells(page)  # (numpy's fused float32 ran)
    left = page[page.index('<div id="left-out">') :]
    assert left.count("numpy has no AD") == 1 and left.count("numpy has no bfloat16") == 1
    assert "numpy/reference/float32, numpy/reference/float64, numpy/reference/bfloat16: numpy has no AD" in left
    assert page.count("numpy has no AD") == 1  # (said once, not per cell)


def test_long_lines_wrap_in_the_page_rather_than_run_off_it():
    page = reports.to_html(matrix_report())
    assert LONG_LINE in page
    assert "pre{background:#f6f6f6;padding:.6em;white-space:pre-wrap}" in _io.PAGE_CSS
    assert "overflow-wrap:break-word" in _io.PAGE_CSS  # (a word longer than its line breaks)
