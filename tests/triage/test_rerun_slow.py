"""gradverify triage rerun: the four fixtures of a bug, a kink flake, a
precision flake and a nondeterministic op, each given its verdict with its
evidence; the command reruns a check target and writes its report; a failure
the FD-step sweep explains is never a bug.

The slow ones (over a second, or compiling with jax)."""

from __future__ import annotations

import json

import pytest

from gradverify import cli

pytestmark = pytest.mark.slow


def test_a_bug_on_negative_inputs_without_kinks_is_named_by_its_sign():
    """A scaled softplus whose backward uses exp(x) for sigmoid(x) where x < 0:
    the region is "x < 0", not the span of the elements it happened to locate."""
    pytest.importorskip("torch")
    from hypothesis import strategies as st

    import gradverify as gv
    from gradverify import strategies as gst

    from .._helpers import PLANTED_TORCH_OPS

    planted: dict = {}
    exec(PLANTED_TORCH_OPS, planted)  # the downstream project's module (faces/test_downstream_slow.py)
    ScaledSoftplus = planted["ScaledSoftplus"]

    args = gst.arrays("torch", "float64", st.tuples(st.integers(1, 6)), min_value=-5, max_value=5)
    r = gv.triage(ScaledSoftplus.apply, args.map(lambda a: (a,)), seeds=3, max_examples=10, threads=(1,))
    assert r.verdict in ("bug", "bug in a region"), r.evidence
    assert r.evidence["region"] == ["x < 0"], r.evidence
    assert all(v < 0 for f in r.evidence["failures"] for v in f["position"])


def test_cli_rerun_a_check_target(capsys):
    code = cli.main(["triage", "rerun", "example:seed-bug", "--backend", "numpy", "--seeds", "2"])
    out = capsys.readouterr().out
    assert code == 1 and out.startswith("example:seed-bug[numpy,fused,float64]: bug")
    assert "the check at the minimal input:" in out and "reproduce: gradverify triage rerun" in out
    code = cli.main(["triage", "rerun", "bias_act:relu6", "--backend", "numpy", "--seeds", "2", "--max-examples", "5"])
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("bias_act:relu6[numpy,fused,float64]: passes")


def test_cli_rerun_writes_its_report(tmp_path, capsys):
    from html.parser import HTMLParser

    code = cli.main(
        ["triage", "rerun", "example:seed-bug", "--backend", "numpy", "--seeds", "2", "--report", str(tmp_path)]
    )
    capsys.readouterr()
    assert code == 1
    data = json.loads((tmp_path / "triage-rerun.json").read_text())
    (rec,) = data["records"]
    assert rec["verdict"].startswith("bug") and rec["reproduce"].startswith("gradverify triage rerun example:seed-bug")
    assert rec["example"][1]["values"] != [0.0] * len(rec["example"][1]["values"])  # b != 0 where it fails
    assert rec["example"][0]["shape"] == [1, 1] and rec["evidence"]["minimal_case"]["shapes"] == [[1, 1], [1]]
    md = (tmp_path / "triage-rerun.md").read_text()
    assert f"reproduce: `{rec['reproduce']}`" in md

    class Verdicts(HTMLParser):
        def __init__(self):
            super().__init__()
            self.inside, self.found = False, []

        def handle_starttag(self, tag, attrs):
            self.inside = tag == "td" and ("class", "verdict") in attrs

        def handle_data(self, data):
            if self.inside:
                self.found.append(data)

    page = Verdicts()
    page.feed((tmp_path / "triage-rerun.html").read_text())
    assert page.found == [rec["verdict"]]
