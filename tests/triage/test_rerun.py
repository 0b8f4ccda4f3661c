"""gradverify triage rerun: the four fixtures of a bug, a kink flake, a
precision flake and a nondeterministic op, each given its verdict with its
evidence; the command reruns a check target and writes its report; a failure
the FD-step sweep explains is never a bug."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gradverify._triage import render as _reports_triage, rerun as _triage_rerun

from ._helpers import gv_json


# -- triage rerun: the four fixtures of a bug, a kink flake, a precision flake and a nondeterministic op
def _hardsigmoid_rule(saturated_slope):
    """numpy hardsigmoid with its rule; the saturated slope is the bug knob."""
    import numpy as np

    import gradverify as gv

    def f(x):
        return np.clip((x + 3) / 6, 0, 1)

    def slope(x):
        return np.where(np.abs(x) < 3, 1 / 6, saturated_slope)

    return gv.Rule(f, jvp=lambda p, t: slope(p[0]) * t[0], vjp=lambda p, g: (slope(p[0]) * g,))


def _naive_inputs(lo=-5.0, hi=5.0):
    from hypothesis import strategies as st

    from gradverify import strategies as gst

    return gst.arrays("numpy", "float64", st.tuples(st.integers(1, 6)), min_value=lo, max_value=hi).map(lambda a: (a,))


def test_rerun_wrong_saturated_slope_is_a_bug_in_a_region():
    """The seed's hardsigmoid: slope 1 instead of 0 beyond +-3, random inputs in [-5, 5]."""
    import gradverify as gv

    r = gv.triage(_hardsigmoid_rule(1.0), _naive_inputs(), seeds=6, max_examples=5, kinks=[-3.0, 3.0])
    assert isinstance(r, gv.Triage) and not r.ok
    assert r.verdict == "bug in a region", r.evidence
    located = [v for f in r.evidence["failures"] for v in f["position"]]
    assert located and all(abs(v) > 3 for v in located)  # every wrong element found is a saturated one
    assert r.evidence["region"] and set(r.evidence["region"]) <= {"x < -3", "x > 3"}
    m = r.evidence["minimal_case"]  # shrunk by gv.verify to one saturated element, far from the kinks
    assert m["shapes"] == [[1]] and m["kink_distance"] >= 0.5 and abs(m["position"][0]) > 3
    assert r.example[0].shape == (1,) and not r.check.ok
    assert 0 < r.evidence["failing_examples"] < r.evidence["examples"]
    assert not r.check.ok and r.example[0].size >= 1
    assert all(f["confirmed"] for f in r.evidence["failures"])
    for f in r.evidence["failures"]:  # the error stays whatever the step, and in float64 too
        assert f["fd_sweep"]["relative_floor"] > 1e-2 and "levels off" in f["fd_sweep"]["trend"]
        assert f["dtypes"]["float64"]["ok"] is False


def naive_fd_test(eps=1e-3, tol=1e-4):
    """A test as people write it: one central difference per element, fixed eps."""
    import numpy as np

    def test(fn, x):
        fd = (fn(x + eps) - fn(x - eps)) / (2 * eps)
        ad = fn.jvp((x,), (np.ones_like(x),))
        err = float(np.max(np.abs(fd - ad)))
        return err <= tol, err

    return test


def test_rerun_correct_rule_near_kinks_with_naive_fd_is_a_kink_flake():
    from hypothesis import strategies as st

    near = st.lists(
        st.sampled_from([-3.0, 3.0]).flatmap(lambda k: st.floats(k - 5e-4, k + 5e-4)) | st.floats(-2.0, 2.0),
        min_size=1,
        max_size=4,
    ).map(lambda v: (__import__("numpy").array(v),))
    r = _triage_rerun.rerun(
        _hardsigmoid_rule(0.0), near, test=naive_fd_test(), seeds=6, max_examples=10, kinks=[-3.0, 3.0], fd_step=1e-3
    )
    assert r.verdict == "kink flake", r.evidence
    assert r.evidence["failing_seeds"]
    assert all(d <= 2e-3 for d in r.evidence["kink_distances"])
    assert "kinks" in r.evidence["avoid_with"]
    for f in r.evidence["failures"]:  # a small enough step sees the rule is right
        assert f["fd_sweep"]["relative_floor"] < 1e-6 and "the step, not AD" in f["fd_sweep"]["trend"]


def test_rerun_thread_dependent_bias_sum_is_a_nondeterministic_op():
    import torch

    class Bias(torch.autograd.Function):
        @staticmethod
        def forward(x, b):
            return x + b

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, g):
            # float32 partial sums whose grouping follows the thread count
            k = torch.get_num_threads()
            parts = [p.sum(0) for p in g.chunk(k, 0)]
            gb = parts[0]
            for p in parts[1:]:
                gb = gb + p
            return g, gb

    import numpy as np
    from hypothesis import strategies as st

    args = st.just(
        (
            torch.from_numpy(np.random.default_rng(0).standard_normal((512, 3)).astype(np.float32) * 1e3),
            torch.from_numpy(np.float32([0.5, -1.0, 2.0])),
        )
    )
    r = _triage_rerun.rerun(lambda x, b: Bias.apply(x, b), args, seeds=1, max_examples=1, threads=(1, 7))
    assert r.verdict == "nondeterministic op", r.evidence
    assert r.evidence["nondeterminism"]["differs_between"] == ["threads=1", "threads=7"]


def test_rerun_float32_op_with_a_float64_tolerance_is_a_precision_flake():
    import torch
    from hypothesis import strategies as st

    import gradverify as gv
    from gradverify import strategies as gst

    def strict(fn, *args):
        r = gv.check(fn, *args, rtol=1e-12, atol=0.0)
        return r.ok, max(
            (e.error or 0.0) / max(abs(e.values.get("FD", 1.0)), 1e-30) for e in r.errors
        ) if r.errors else 0.0

    args = gst.arrays("torch", "float32", st.tuples(st.integers(2, 6)), min_value=-2, max_value=2).map(lambda a: (a,))
    r = _triage_rerun.rerun(torch.tanh, args, test=strict, seeds=3, max_examples=5, threads=(1,))
    assert r.verdict == "precision flake", r.evidence
    tol = r.evidence["proposed_tolerance"]
    assert 1e-9 < tol < 1e-4  # float32 rounding, not a float64 one
    assert all(not f["confirmed"] for f in r.evidence["failures"])
    for f in r.evidence["failures"]:  # the same values pass in float64: precision, not the rule
        assert f["dtypes"]["float64"]["ok"] is True and f["dtypes"]["float32"]["ok"] is False
        assert f["fd_sweep"]["relative_floor"] < 1e-4
    assert "float64 passes, float32 fails" in str(r)
    # the evidence is typed and reads as the JSON it is written as
    ev = r.evidence
    assert isinstance(ev, _triage_rerun.Evidence) and ev.proposed_tolerance == tol
    assert list(ev) == [
        "seeds",
        "examples",
        "failing_examples",
        "failing_seeds",
        "nondeterminism",
        "proposed_tolerance",
        "failures",
    ]  # a precision flake's own figure only; the others are left out, not written as null
    assert "region" not in ev and ev.get("region") is None and ev.region is None
    with pytest.raises(KeyError):
        ev["region"]
    assert ev.failures[0].dtypes["float64"].ok is True and ev.failures[0].fd_sweep.explains
    record = _reports_triage.rerun_record("tanh", r, "reproduce")
    assert json.loads(json.dumps(record["evidence"])) == record["evidence"] == json.loads(gv_json(ev))


def test_a_failure_the_fd_step_sweep_explains_is_never_a_bug():
    """torch's float64 hardsigmoid derivative is float32(1/6): gv.check fails
    it (3e-8 relative), but the FD-step sweep brings FD within 1e-4 of AD: a
    precision flake, not a bug."""
    import torch
    from hypothesis import strategies as st

    from gradverify import strategies as gst

    args = gst.arrays("torch", "float64", st.tuples(st.integers(2, 5)), min_value=-2.5, max_value=2.5).map(
        lambda a: (a,)
    )
    r = _triage_rerun.rerun(torch.nn.functional.hardsigmoid, args, seeds=2, max_examples=5, threads=(1,))
    assert r.verdict == "precision flake", r.evidence
    for f in r.evidence["failures"]:
        assert f["check_fails"] and not f["confirmed"]
        assert f["fd_sweep"]["relative_floor"] < _triage_rerun.STEP_EXPLAINS


@pytest.mark.parametrize(
    ("positions", "kinks", "said"),
    [
        ([3.0, 3.0, -3.0, 3.0], (-3.0, 3.0), ["x = -3", "x = 3"]),  # seed after seed at the same points
        ([3.0, 3.0], (), ["x = 3"]),
        ([-2.5, -1.0, 0.5, 1.2, 2.0], (), ["x = -2.5", "x = -1", "x = 0.5", "x = 1.2", "x = 2"]),  # everywhere
        ([-4.0, 5.5, 3.5, -4.25, 0.5], (-3.0, 3.0), ["x = -4.25", "x = -4", "x = 0.5", "x = 3.5", "x = 5.5"]),
        ([4.0, 5.5, 3.5, 4.25], (-3.0, 3.0), ["x > 3"]),
        ([-4.0, 5.5, 3.5, -4.25], (-3.0, 3.0), ["x < -3", "x > 3"]),
        ([-1e-3, -2.0], (), ["x < 0"]),
    ],
)
def test_a_region_is_said_only_where_there_is_one(positions, kinks, said):
    from gradverify._triage.rerun import region

    assert region(np.array(positions), kinks) == said
