"""Helpers the tests of the sweeps and their reports share."""

from __future__ import annotations

import filecmp
import json

import numpy as np
from hypothesis import strategies as st

import gradverify as gv
from gradverify import cli
from gradverify._sweep import cases, reports, session
from gradverify._sweep.examples import BUILDERS
from gradverify.pytest_plugin.records import record_of

#: The sweep of test_scale*: two targets that pass and one that fails, on two backends.
TARGETS = ["bias_act:relu", "bias_act:tanh", "example:seed-bug"]


OPTIONS = ["--backend", "numpy", "torch", "--impl", "fused", "--max-examples", "3"]


def run(capsys, *argv):
    """``cli.main(argv)`` in this process: its exit code and stdout."""
    code = cli.main(list(argv))
    out = capsys.readouterr().out
    return code, out


def canonical(directory):
    """The report.json in ``directory``, without what differs from run to run."""
    return reports.canonical(json.loads((directory / "report.json").read_text()))


def same_files(a, b):
    """The failures' .npz and .py files, byte for byte."""
    names = sorted(p.name for p in (a / "cases").iterdir())
    assert names == sorted(p.name for p in (b / "cases").iterdir()) and any(n.endswith(".npz") for n in names)
    match, mismatch, errors = filecmp.cmpfiles(a / "cases", b / "cases", names, shallow=False)
    assert not mismatch and not errors


#: A line of a failure's report longer than any window is wide, with no space to break at.
LONG_LINE = "reproduce: " + "x" * 400


def matrix_report(dtypes=("float32", "float64", "bfloat16")):
    """The report of a ``gradverify check all`` over three backends, both
    impls and ``dtypes``, its records made up (no case is run): numpy's
    reference and bfloat16 columns skipped for the reasons a sweep gives,
    one case failed, the others passed in 1.234 s with error/bound 0.0123."""
    records = []
    for c in cases.cases(cases.bundled_targets(), backends=("numpy", "torch", "jax"), dtypes=dtypes):
        record = {"id": c.id, **c.__dict__, "status": "passed", "reason": None, "examples_run": 10}
        record.update(inconclusive=0, worst_ratio=0.0123, seconds=1.234, failure=None)
        if c.backend == "numpy":
            try:
                cases.build(c)  # (numpy's cases build at once: the real reasons to skip)
            except cases.Skip as e:
                record.update(status="skipped", reason=str(e), worst_ratio=None, seconds=0.0, examples_run=0)
        records.append(record)
    failed = next(r for r in records if r["id"] == "bias_act:swish[torch,fused,float64]")
    failed.update(status="failed", worst_ratio=0.01, seconds=0.5)
    failed["failure"] = {
        "kind": "mismatch",
        "message": "forward mode disagrees with finite differences: d output[0, 0] / d arg0[0, 0]",
        "pair": ["JVP", "FD"],
        "argument": 0,
        "input_index": [0, 0],
        "output_index": [0, 0],
        "values": {"JVP": 0.07, "FD": 0.5},
        "error": 0.43,
        "bound": 2e-9,
        "report": "gradverify FAILED\n" + LONG_LINE,
    }
    return reports.build(records, command="gradverify check all --dtype " + " ".join(dtypes), seed=0)


#: A node id longer than any window is wide (a parametrized test's).
LONG_NODEID = "tests/test_kernels.py::test_fused_bias_swish[" + "-".join(["float64"] * 40) + "]"


def session_report():
    """The report of a session of two tests: one whose verify passed, one whose verify failed."""
    point = st.just((np.array([[-1.0, 0.5]]), np.array([1.0, -2.0])))
    passed = record_of("tests/test_act.py::test_right", "verify", gv.verify(BUILDERS["numpy"](False), point, seed=1))
    failed = record_of(LONG_NODEID, "verify", gv.verify(BUILDERS["numpy"](True), point, seed=1))
    failed["reproduce_test"] = f"pytest '{LONG_NODEID}'"
    return session.build([passed, failed], seed=0, max_examples=100, profile=None)
