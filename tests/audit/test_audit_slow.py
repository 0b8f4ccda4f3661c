"""gradverify audit on PyTorch's own operator database (a fixed set of
operators: right ones, and live defects of the pinned torch that PyTorch's
own gradient tests miss or expect), and on a small database of our own
whose operators hang, die or interrupt the audit on one sample."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

import gradverify as gv

from .._helpers import assert_fits, screenshot

pytestmark = pytest.mark.slow
pytest.importorskip("expecttest")

ROOT = Path(__file__).resolve().parents[2]
DATABASE = "tests.audit._database:op_db"
#: right operators, three live defects PyTorch's tests do not expect, two it does
FIXED = [
    "sin",
    "cat",
    "native_layer_norm",
    "max.reduction_with_dim",
    "cholesky_inverse",
    "logcumsumexp",
    "nn.functional.hardsigmoid",
    "scatter_reduce.prod",
    "nn.functional.linear_cross_entropy.chunked",
]


def command(*args, env=None, timeout=600):
    """``gradverify audit ARGS`` in a subprocess run from the repository (so the test database imports)."""
    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "gradverify.cli", "audit", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=full,
        timeout=timeout,
    )


def failures(result, op, dtype="float64"):
    return [r for r in result.samples if r["task"] == op and r["dtype"] == dtype and r["status"] == "failed"]


@pytest.fixture(scope="module")
def fixed(tmp_path_factory):
    out = tmp_path_factory.mktemp("audit")
    return gv.audit("torch", FIXED, dtypes=("float64", "complex128"), workers=2, report=out), out


def test_right_operators_pass_in_both_dtypes(fixed):
    result, _ = fixed
    for op in ("sin", "cat", "max.reduction_with_dim", "native_layer_norm"):
        assert result.verdict(op, "float64") == "passed", op
    for op in ("sin", "cat"):
        assert result.verdict(op, "complex128") == "passed", op
    # of native_layer_norm's three outputs, the saved mean and rstd are not differentiable
    norms = [r for r in result.samples if r["task"] == "native_layer_norm" and r["status"] == "passed"]
    assert norms and all(r["outputs"] == "1 of 3 outputs" for r in norms)


def test_forward_mode_defects_are_named_new_with_the_element(fixed):
    result, _ = fixed
    for op, dtype in (("cholesky_inverse", "float64"), ("cholesky_inverse", "complex128"), ("logcumsumexp", "float64")):
        assert result.verdict(op, dtype) == "failed" and f"{op}[{dtype}]" in result.report["totals"]["new_operators"]
        for r in failures(result, op, dtype):
            assert r["known"] is None
            f = r["findings"][0]
            assert f["pair"] == ["JVP", "FD"] and f["output_index"] is not None and f["input_index"] is not None
            assert set(f["values"]) == {"JVP", "FD"} and f["error"] > f["bound"] > 0
    # cholesky_inverse's JVP: a relative error of about 1e-5, far over float64's rounding
    f = failures(result, "cholesky_inverse")[0]["findings"][0]
    assert 1e-7 < abs(f["values"]["JVP"] - f["values"]["FD"]) / abs(f["values"]["FD"]) < 1e-3


def test_hardsigmoid_float64_slope_is_float32_one_sixth(fixed):
    result, _ = fixed
    (r, *_) = failures(result, "nn.functional.hardsigmoid")
    assert r["known"] is None
    slopes = {m: f["values"][m] for f in r["findings"] for m in ("JVP", "VJP") if m in f["values"]}
    assert set(slopes) == {"JVP", "VJP"}
    for slope in slopes.values():
        assert slope == float(np.float32(1 / 6)) != 1 / 6
    assert all(f["values"]["FD"] == pytest.approx(1 / 6, rel=1e-9) for f in r["findings"])


def test_pytorchs_expected_failures_are_known(fixed):
    result, _ = fixed
    for op in ("scatter_reduce.prod", "nn.functional.linear_cross_entropy.chunked"):
        flagged = failures(result, op)
        assert flagged and all(r["known"]["test"] == "TestFwdGradients.test_forward_mode_AD" for r in flagged)
        assert all(r["known"]["kind"] == "expected failure" for r in flagged)
        assert f"{op}[float64]" not in result.report["totals"]["new_operators"]
    # scatter_reduce's prod: forward mode gives 0 where the derivative is not
    f = failures(result, "scatter_reduce.prod")[0]["findings"][0]
    assert f["values"]["JVP"] == 0 and f["values"]["FD"] != 0


def test_reports_and_a_reproducer_say_the_same(fixed):
    result, out = fixed
    report = json.loads((out / "report.json").read_text())
    assert report["totals"] == result.report["totals"]
    md = (out / "report.md").read_text()
    assert f"## New failures ({len(result.new)})" in md and f"## Known failures ({len(result.known)})" in md
    suites = ET.parse(out / "junit.xml").getroot()
    assert sum(int(s.get("failures")) for s in suites) == len(result.new)
    lines = (out / "results.jsonl").read_text().splitlines()
    assert len(lines) == 2 + len(result.samples) and json.loads(lines[-1]) == {"complete": True}

    class Rows(HTMLParser):
        """The rows of the operators' table."""

        rows, inside = 0, False

        def handle_starttag(self, tag, attrs):
            self.inside = self.inside or (tag == "table" and ("id", "operators") in attrs)
            self.rows += self.inside and tag == "tr"

        def handle_endtag(self, tag):
            self.inside = self.inside and tag != "table"

    page = Rows()
    page.feed((out / "report.html").read_text())
    assert page.rows == 1 + len(result.operators)

    r = failures(result, "cholesky_inverse")[0]
    script = out / "reproducers" / f"cholesky_inverse-float64-{r['sample']}.py"
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=out, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    f = r["findings"][0]
    where = f"d output{list(f['output_index'])} / d arg0{list(f['input_index'])}"
    assert "gradverify FAILED" in done.stdout and "mismatch (JVP vs FD)" in done.stdout and where in done.stdout


def test_a_headless_browser_draws_the_report(fixed, tmp_path):
    pixels = screenshot(fixed[1] / "report.html", tmp_path, "900,500")
    white = sum(p[:3] == (255, 255, 255) for p in pixels) / len(pixels)
    # the verdict table's failed (#fbb) and passed (#dfd) cells, and text on the page
    failed = sum(all(abs(a - b) <= 8 for a, b in zip(p, (0xFF, 0xBB, 0xBB))) for p in pixels)
    passed = sum(all(abs(a - b) <= 8 for a, b in zip(p, (0xDD, 0xFF, 0xDD))) for p in pixels)
    assert white < 0.97 and failed > 100 and passed > 100, (white, failed, passed)
    assert_fits(fixed[1] / "report.html")  # nothing past a 1280-px window's edge, nothing cut


# -- a database of our own: hangs, deaths, interruptions -----------------------------------------
def test_a_hang_and_a_death_cost_one_sample_each(tmp_path):
    done = command(
        "torch", "--database", DATABASE, "--ops", "audit_test.[rwehd]*", "--timeout", "5",
        "--workers", "2", "--report", str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    status = {(r["task"], r["sample"]): r["status"] for r in report["samples"]}
    assert status[("audit_test.hangs", 1)] == "timeout" and status[("audit_test.dies", 1)] == "crashed"
    # a worker that dies before the task's first sample: given again once, then the task is lost, said
    assert status[("audit_test.dies_early", -1)] == "crashed" and "exit code 4" in next(
        r["reason"] for r in report["samples"] if r["task"] == "audit_test.dies_early"
    )
    for op in ("audit_test.hangs", "audit_test.dies", "audit_test.right"):
        assert status[(op, 0)] == status[(op, 2)] == "passed", op  # (the task went on after the lost sample)
    by_op = {o["op"]: o for o in report["operators"]}
    assert by_op["audit_test.wrong"]["verdict"] == "failed" and by_op["audit_test.wrong"]["new"]
    assert by_op["audit_test.expected"]["verdict"] == "failed" and not by_op["audit_test.expected"]["new"]
    assert report["totals"]["new_operators"] == ["audit_test.wrong[float64]"]
    assert "new: audit_test.wrong[float64]" in done.stdout
    wrong = [r for r in report["samples"] if r["task"] == "audit_test.wrong"]
    assert all(r["findings"][0]["pair"] == ["VJP", "FD"] for r in wrong)
    cases = {c.get("classname") + c.get("name"): c for c in ET.parse(tmp_path / "junit.xml").iter("testcase")}
    assert cases["gradverify.audit.audit_test.hangsfloat64-sample1"].find("error").get("type") == "timeout"
    assert cases["gradverify.audit.audit_test.expectedfloat64-sample0"].find("skipped") is not None
    assert cases["gradverify.audit.audit_test.wrongfloat64-sample0"].find("failure") is not None


def test_an_interrupted_audit_resumes_where_it_stopped(tmp_path):
    calls = tmp_path / "calls"
    env = {"GRADVERIFY_TEST_INTERRUPTED": str(tmp_path / "marker"), "GRADVERIFY_TEST_CALLS": str(calls)}
    args = ("torch", "--database", DATABASE, "--ops", "audit_test.interrupts", "--report", str(tmp_path / "r"))
    first = command(*args, env=env)
    assert first.returncode == 130, first.stderr[-3000:]
    assert "the same command again resumes there" in first.stderr and "Traceback" not in first.stderr
    kept = json.loads((tmp_path / "r" / "report.json").read_text())
    assert kept["totals"].get("interrupted") == 1 and [r["sample"] for r in kept["samples"]] == [0]
    before = calls.read_text().splitlines()
    assert set(before) == {"(3,)"}  # sample 0 only

    second = command(*args, env=env)
    assert second.returncode == 0, second.stderr[-3000:]
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert [(r["sample"], r["status"]) for r in report["samples"]] == [(0, "passed"), (1, "passed"), (2, "passed")]
    after = calls.read_text().splitlines()[len(before) :]
    assert "(3,)" not in after and {"(2, 3)", "(4,)"} == set(after)  # sample 0 was not checked again


def test_shards_merge_into_one_report(tmp_path):
    ops = ("--ops", "audit_test.right", "audit_test.wrong", "audit_test.expected")
    for k in (1, 2):
        done = command("torch", "--database", DATABASE, *ops, "--shard", f"{k}/2", "--report", str(tmp_path / f"s{k}"))
        assert done.returncode in (0, 1), done.stderr[-3000:]
    shards = [str(tmp_path / f"s{k}" / "results.jsonl") for k in (1, 2)]
    alone = command("merge", shards[1], "--report", str(tmp_path / "m"))
    assert alone.returncode == 2 and "missing 1/2" in alone.stderr, alone.stderr[-2000:]
    merged = command("merge", *shards, "--report", str(tmp_path / "m"))
    assert merged.returncode == 1, merged.stderr[-3000:]
    report = json.loads((tmp_path / "m" / "report.json").read_text())
    assert [o["op"] for o in report["operators"]] == ["audit_test.right", "audit_test.wrong", "audit_test.expected"]
    assert [o["verdict"] for o in report["operators"]] == ["passed", "failed", "failed"]
    assert len(report["samples"]) == 9 and (tmp_path / "m" / "reproducers").is_dir()


def test_order_2_names_the_second_order_test():
    """At order 2 a first-order finding is known by the first-order test's
    expected failure, a second-order one by the gradgrad test's."""
    ops = ("audit_test.cube*", "audit_test.expected")
    result = gv.audit("torch", ops, order=2, database=DATABASE, samples=1)
    assert result.verdict("audit_test.cube_gradgrad") == "failed"
    (new,) = result.new
    assert new["task"] == "audit_test.cube_gradgrad" and new["findings"][0]["pair"][0].endswith("of VJP")
    known = {r["task"]: r["known"]["test"] for r in result.known}
    assert known == {
        "audit_test.cube_gradgrad_expected": "TestBwdGradients.test_fn_gradgrad",
        "audit_test.expected": "TestBwdGradients.test_fn_grad",
    }
    # at order 1 the detached cube is right
    assert gv.audit("torch", ["audit_test.cube_gradgrad"], database=DATABASE, samples=1).ok


def test_a_dask_cluster_runs_the_tasks_with_their_time_limits(tmp_path):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=":0",  # (a free port: None still binds 8787)
    ) as cluster:
        done = command(
            "torch", "--database", DATABASE, "--ops", "audit_test.right", "audit_test.hangs", "--timeout", "5",
            "--scheduler", cluster.scheduler_address, "--report", str(tmp_path),
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    status = {(r["task"], r["sample"]): r["status"] for r in report["samples"]}
    assert status == {
        **{("audit_test.right", k): "passed" for k in range(3)},
        ("audit_test.hangs", 0): "passed",
        ("audit_test.hangs", 1): "timeout",
        ("audit_test.hangs", 2): "passed",
    }


def test_misuse_gets_what_was_expected_and_the_fix(tmp_path):
    done = command("torch", "--ops", "no_such_op*", "--report", str(tmp_path / "a"))
    assert done.returncode == 2 and "--ops: expected names or patterns of OpInfos" in done.stderr
    assert "Traceback" not in done.stderr
    done = command("torch", "--database", "tests.audit._database:nothing", "--report", str(tmp_path / "b"))
    assert done.returncode == 2 and "--database: expected MODULE:NAME" in done.stderr
    for wrong, said in (("--order", "0"), "order: expected an int >= 1"), (("--format", "pdf"), "--format: expected"):
        done = command("torch", "--database", DATABASE, *wrong, "--report", str(tmp_path / "b"))
        assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]
        assert not (tmp_path / "b").exists()  # (refused before any work or any file)
    # a directory holding another audit's results is not resumed into
    first = command("torch", "--database", DATABASE, "--ops", "audit_test.right", "--report", str(tmp_path / "c"))
    assert first.returncode == 0, first.stderr[-3000:]
    other = ("torch", "--database", DATABASE, "--ops", "audit_test.right", "--samples", "2", "--report")
    done = command(*other, str(tmp_path / "c"))
    assert done.returncode == 2 and "pass --fresh" in done.stderr
    done = command(*other, str(tmp_path / "c"), "--fresh")
    assert done.returncode == 0 and len(json.loads((tmp_path / "c" / "report.json").read_text())["samples"]) == 2
