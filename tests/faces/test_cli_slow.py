"""The gradverify command end to end, in subprocesses and on a terminal: a
failing sweep writes every report (each parsed back) and a script that
reproduces it; the console script imports a user's module; the HTML matrix
links its failures; the progress bar shows on a terminal only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ._helpers import main, run

pytestmark = pytest.mark.slow


def test_seed_bug_fails_with_exit_1_and_writes_every_report(capsys, tmp_path):
    code, out, _ = main(
        capsys, "check", "example:seed-bug", "--backend", "torch", "--report", str(tmp_path), "--max-examples", "20"
    )
    assert code == 1, out
    assert out.splitlines()[-1] == "0 passed, 1 failed"
    assert "FAIL  example:seed-bug [torch, fused, float64]" in out and "mismatch (VJP vs FD)" in out
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["schema"] == "gradverify-report/1" and data["totals"]["failed"] == 1
    (case,) = data["cases"]
    f = case["failure"]
    assert case["status"] == "failed" and f["kind"] == "mismatch"
    assert len(f["counterexample"]) == 2 and f["counterexample"][1]["values"] != [0.0]  # b != 0
    assert f["error"] > f["bound"] and set(f["values"]) <= {"JVP", "VJP", "FD"}
    # FD against the step: on a real bug the distance to AD levels off at the bug's size
    dist = [row[2] for row in f["fd_vs_step"]]
    assert len(dist) == 10 and min(dist) > 0.5 * f["error"]
    # AD against FD per input element of the failing output: x's and b's both off (the bug is in z's slope)
    per = f["ad_vs_fd"]
    assert [r["argument"] for r in per] == [0, 1] and all(abs(r["AD"] - r["FD"]) > 0.1 for r in per)
    # junit: parsed, one failure with gradverify's properties
    root = ET.parse(tmp_path / "junit.xml").getroot()
    suite = root.find("testsuite")
    assert suite.get("failures") == "1" and suite.get("tests") == "1"
    tc = suite.find("testcase")
    props = {p.get("name"): p.get("value") for p in tc.find("properties")}
    assert props["gradverify.seed"] == str(case["seed"]) and props["gradverify.counterexample"].endswith(".npz")
    assert tc.find("failure").get("type") == "mismatch"
    # markdown and html
    md = (tmp_path / "report.md").read_text()
    assert "**0 passed, 1 failed**" in md and "## FAILED example:seed-bug[torch,fused,float64]" in md
    page = (tmp_path / "report.html").read_text()
    assert page.startswith("<!doctype html>") and 'class="failed"' in page and "FAILED example:seed-bug" in page
    assert '<svg class="fd-vs-step"' in page and '<svg class="ad-vs-fd"' in page  # drawn without a plotting library
    # the script next to the .npz reproduces the failure
    assert f["script"] == f["npz"][: -len(".npz")] + ".py" and f["npz"].startswith("cases/")  # relative: portable
    rerun = subprocess.run([sys.executable, tmp_path / f["script"]], capture_output=True, text=True)
    assert rerun.returncode == 1, rerun.stderr  # 1 while the failure persists
    assert "gradverify FAILED" in rerun.stdout and "mismatch" in rerun.stdout
    # no half-written files left behind
    assert not list(tmp_path.rglob("*.tmp"))


def test_user_module_in_the_current_directory_imports_from_the_console_script(tmp_path):
    """`gradverify check mymod:fn` from the directory holding mymod.py, through
    the installed console script (whose sys.path[0] is bin/), serial and with
    spawned workers."""
    (tmp_path / "mymod.py").write_text(
        textwrap.dedent(
            """
            import numpy as np
            import gradverify as gv
            from gradverify import strategies as gst
            from hypothesis import strategies as st

            fn = gv.Rule(np.sin, jvp=lambda p, t: np.cos(p[0]) * t[0], vjp=lambda p, g: (np.cos(p[0]) * g,))
            args = gst.arrays("numpy", "float64", st.tuples(st.integers(1, 3))).map(lambda a: (a,))
            """
        )
    )
    script = str(Path(sys.executable).with_name("gradverify"))
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"}
    for extra in ([], ["--workers", "2"]):
        done = subprocess.run(
            [script, "check", "mymod:fn", "--strategy", "mymod:args", "--no-report", *extra],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.splitlines()[-1] == "1 passed, 0 failed"


def test_html_report_parses_into_the_matrix_and_links_failures(capsys, tmp_path):
    """Rendered without a browser: the page parses (html.parser), the matrix
    has one row per target and one cell per case, and each failed cell links
    to an element with that id."""
    from html.parser import HTMLParser

    main(
        capsys,
        "check",
        "example:seed-bug",
        "examples",
        "--backend",
        "numpy",
        "--report",
        str(tmp_path),
        "--format",
        "html",
    )

    class Page(HTMLParser):
        def __init__(self):
            super().__init__()
            self.cells, self.ids, self.rows, self.stack = [], set(), 0, []

        def handle_starttag(self, tag, attrs):
            a = dict(attrs)
            self.stack.append(tag)
            if "id" in a:
                self.ids.add(a["id"])
            if tag == "tr":
                self.rows += 1
            if tag == "td" and "class" in a:
                self.cells.append({"class": a["class"], "title": a.get("title")})
            if tag == "a" and "href" in a and self.cells:
                self.cells[-1]["href"] = a["href"]

        def handle_endtag(self, tag):
            while self.stack and self.stack.pop() != tag:
                pass

    page = Page()
    page.feed((tmp_path / "report.html").read_text())
    page.close()
    assert page.rows == 5  # three header rows (backend, impl, dtype) + two targets

    def cell(case):  # (a cell's title: its case, then what became of it)
        return next(c for c in page.cells if (c["title"] or "").startswith(case + ": "))

    bug = cell("example:seed-bug[numpy,fused,float64]")
    assert bug["class"] == "failed" and bug["href"].lstrip("#") in page.ids
    assert cell("examples[numpy,fused,float64]")["class"] == "passed"


def test_progress_bar_on_a_terminal_only():
    """On a terminal's stderr a rich progress bar runs; piped, nothing but the lines."""
    import os
    import pty
    import threading

    master, slave = pty.openpty()
    chunks = []

    def drain():  # read while the child writes, so a full pty buffer never blocks it
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gradverify.cli", "check", "examples", "--backend", "numpy", "--no-report"],
        stdout=subprocess.PIPE,
        stderr=slave,
        text=True,
        env={**os.environ, "COLUMNS": "100", "TERM": "xterm"},
    )
    os.close(slave)
    out, _ = proc.communicate(timeout=300)
    reader.join(timeout=10)
    os.close(master)
    terminal = b"".join(chunks).decode(errors="replace")
    assert proc.returncode == 0, terminal
    assert "[1/1] examples numpy fused float64" in terminal  # the case running and its count, on the terminal
    assert "[1/1]" not in out and out.splitlines()[-1] == "1 passed, 0 failed"
    piped = run("check", "examples", "--backend", "numpy", "--no-report")
    assert "[1/1]" not in piped.stderr


def test_user_function_and_strategy(tmp_path):
    (tmp_path / "userops.py").write_text(
        textwrap.dedent(
            """
            import numpy as np
            import gradverify as gv
            from gradverify import strategies as gst
            from hypothesis import strategies as st

            def _cube(x):
                return x ** 3

            good = gv.Rule(_cube, jvp=lambda p, t: 3 * p[0] ** 2 * t[0], vjp=lambda p, g: (3 * p[0] ** 2 * g,))
            bad = gv.Rule(_cube, jvp=lambda p, t: 3 * p[0] * t[0], vjp=lambda p, g: (3 * p[0] * g,))
            args = gst.arrays("numpy", "float64", st.tuples(st.integers(1, 3))).map(lambda a: (a,))
            """
        )
    )
    env = {**__import__("os").environ, "PYTHONPATH": str(tmp_path)}
    good = run("check", "userops:good", "--strategy", "userops:args", "--no-report", env=env)
    assert good.returncode == 0, good.stdout + good.stderr
    assert good.stdout.splitlines()[-1] == "1 passed, 0 failed"
    bad = run("check", "userops:bad", "--strategy", "userops:args", "--report", str(tmp_path / "r"), env=env)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    case = json.loads((tmp_path / "r" / "report.json").read_text())["cases"][0]
    assert case["failure"]["counterexample"][0]["shape"] == [1]
    assert case["max_shrinking_seconds"] > 0 and case["failure"]["shrink_cut"] is None
    # a shrink budget of 0 seconds keeps the first failure, and the report says so
    cut = run(
        "check",
        "userops:bad",
        "--strategy",
        "userops:args",
        "--max-shrinking-seconds",
        "0",
        "--report",
        str(tmp_path / "c"),
        env=env,
    )
    assert cut.returncode == 1, cut.stdout + cut.stderr
    case = json.loads((tmp_path / "c" / "report.json").read_text())["cases"][0]
    assert case["max_shrinking_seconds"] == 0
    assert case["failure"]["shrink_cut"] == "after 0 step(s): max_shrinking_seconds=0"
    assert "shrinking cut after 0 step(s)" in (tmp_path / "c" / "report.md").read_text()
    refused = run("check", "userops:bad", "--strategy", "userops:args", "--max-shrinking-seconds", "-1", env=env)
    assert refused.returncode == 2 and "--max-shrinking-seconds: expected a number of seconds >= 0" in refused.stderr


def test_the_audit_names_its_report_directory_as_typed(tmp_path):
    """``--report audit/`` is printed ``audit/``, from the directory the command ran in, not ``audit//``."""
    pytest.importorskip("expecttest")
    root = Path(__file__).resolve().parents[2]
    argv = ["audit", "--database", "tests.audit._database:op_db", "--ops", "audit_test.right", "--report", "audit/"]
    done = run(*argv, "torch", cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "reports: audit/ (report.json" in done.stdout and "//" not in done.stdout, done.stdout
    assert (tmp_path / "audit" / "report.json").is_file()
