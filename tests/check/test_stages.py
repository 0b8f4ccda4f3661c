"""Each stage of the check core on its own: its typed result, what it reports,
and the property it owes the next stage."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import gradverify as gv
from gradverify._check import fd, modes as _modes, primal as _primal, probes as _probes, xp
from gradverify._check.bounds import Bounds
from gradverify._check.context import Context, Options
from gradverify._check.evaluate import Evaluator
from gradverify._check.findings import Closeness, Findings
from gradverify._check.locate import bisect
from gradverify._check.modes import AD
from gradverify._check.oracle import Oracle
from gradverify._check.validate import finite_arguments, resolve_wrt, validate_arrays
from gradverify._result import Kind
from gradverify.backends import backend_of

torch = pytest.importorskip("torch")


def evaluator(fn, *args):
    ev = Evaluator(fn, backend_of(args), args, ())
    ev.wrt = resolve_wrt(None, ev.floating, ev.dtypes)
    return ev


def stages(fn, *args, seed=0, k=2, full=None):
    ev = evaluator(fn, *args)
    report = Findings()
    primal = _primal.evaluate(ev, report)
    precision = _primal.choose(ev, primal)
    probes = _probes.choose(ev, primal, precision, seed=seed, k=k, full=full)
    options = Options(seed=seed, rtol=None, atol=None, full=full, k=k)
    ctx = Context(ev, primal, precision, probes, options, report, Closeness())
    ad = AD(ctx)
    modes = _modes.run(ad, probes)
    return ev, report, primal, precision, probes, ad, modes


def tanh_rule(vjp_sign=1.0):
    def d(p):
        return 1 - np.tanh(p[0]) ** 2

    return gv.Rule(np.tanh, jvp=lambda p, t: d(p) * t[0], vjp=lambda p, g: (vjp_sign * d(p) * g,))


def test_stage_results_are_frozen():
    _, _, primal, precision, probes, _, modes = stages(tanh_rule(), np.linspace(-1, 1, 5))
    for result in (primal, precision, probes, modes):
        field = dataclasses.fields(result)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(result, field, None)


def test_the_primal_reports_mutation_and_leaves_the_callers_array_alone():
    def fn(x):
        x[1] = 5.0
        return np.sin(x)

    x = np.array([0.1, 0.2, 0.3])
    report = Findings()
    primal = _primal.evaluate(evaluator(fn, x), report)
    assert primal is not None and primal.shape == (3,) and primal.all_finite
    assert [f.kind for f in report.items] == [Kind.MUTATION] and report.items[0].input_index == (1,)
    assert x.tolist() == [0.1, 0.2, 0.3]


def test_a_non_finite_argument_past_the_views_is_refused_at_its_first_element():
    """(The view that holds non-finite entries fixed makes every argument
    finite before validation; validation still guards: on the host at once,
    on a device from the extremes read with fn's first output.)"""
    host = np.array([1.0, np.nan, 2.0])
    with pytest.raises(gv.ArgumentValueError, match=r"1 non-finite element\(s\), the first nan at index \(1,\)"):
        validate_arrays(backend_of((host,)), [host], [host])
    finite = torch.tensor([[1.0, -3.0], [2.0, 0.5]], dtype=torch.float64)
    bad = torch.tensor([[1.0, 2.0], [float("-inf"), 4.0]], dtype=torch.float64)
    backend = backend_of((finite,))
    asked = validate_arrays(backend, [finite, bad], [finite, bad])  # (nothing read yet)
    assert sorted(asked) == [0, 1]
    lo, hi, squares, *rest = xp.read(*asked[0], *asked[1])
    assert (lo, hi, squares) == (-3.0, 2.0, 14.25)
    finite_arguments([finite], {0: (lo, hi)})
    with pytest.raises(gv.ArgumentValueError, match=r"argument 1: .* the first -inf at index \(1, 0\)"):
        finite_arguments([finite, bad], {0: (lo, hi), 1: tuple(rest[:2])})


def test_the_oracle_runs_in_float64_and_ad_in_both_tiers_for_float32_arguments():
    x = torch.linspace(-2, 2, 7, dtype=torch.float32)
    _, _, primal, precision, _, _, modes = stages(torch.tanh, x)
    assert primal.dtype == "float32" and precision.name == "float64" and precision.oracle == "float64"
    assert precision.ad64 and modes.ad64 and modes.ad_out == "float64"
    assert modes.low_jvps and modes.low_vjps  # the native float32 runs, kept for the precision comparison
    b = next(iter(modes.low_jvps))
    assert not np.array_equal(modes.low_jvps[b], modes.jvps[b])  # float32 rounding shows


@pytest.mark.parametrize("magnitude", [2.0**-1074, 1e-300, 1.0, 1e200])
def test_probe_tangents_neither_underflow_nor_overflow(magnitude):
    x = np.full(100, magnitude) * np.linspace(1, 2, 100)
    ev = evaluator(tanh_rule(), x)
    report = Findings()
    primal = _primal.evaluate(ev, report)
    probes = _probes.choose(ev, primal, _primal.choose(ev, primal), seed=0, k=2, full=False)
    for u, c in zip(probes.us, probes.cs):
        top = float(np.max(np.abs(u)))
        assert 0.5 < top < 2.0  # what AD sees, whatever the input's magnitude
        assert np.all(np.abs(u) > 0) and np.isfinite(c) and c > 0
        assert np.all(np.isfinite(c * u)) and np.all(np.abs(c * u) >= np.abs(x).min() / 2)


def test_small_inputs_get_the_full_jacobian_large_ones_directions():
    *_, small, _, _ = stages(tanh_rule(), np.linspace(-1, 1, 4))
    *_, large, _, _ = stages(tanh_rule(), np.linspace(-1, 1, 100))
    assert small.full and len(small.us) == 4 and small.strategy.startswith("full Jacobian")
    assert not large.full and len(large.us) == 2 and large.strategy.startswith("directional")


def test_a_mode_that_returns_the_wrong_shape_fails_and_is_reported_once():
    bad = gv.Rule(np.tanh, vjp=lambda p, g: (g[:-1],))
    _, report, *_, ad, modes = stages(bad, np.linspace(-1, 1, 50))
    assert ad.status["VJP"] == _modes.FAILED and modes.vjps == ()
    assert [f.kind for f in report.items].count(Kind.WRONG_SHAPE) == 1
    assert ad.status["JVP"] == _modes.UNAVAILABLE


def test_the_oracle_measures_noise_only_on_demand_and_then_agrees_with_the_model():
    ev, report, primal, precision, probes, ad, modes = stages(tanh_rule(), np.linspace(-3, 3, 200))
    options = Options(seed=0, rtol=None, atol=None, full=None, k=2)
    oracle = Oracle(Context(ev, primal, precision, probes, options, report, Closeness()))
    bounds = Bounds(oracle, modes, ev.dtypes, None, None)
    before = sum(ev.counts.values())
    oracle.first_order(modes.jvps, bounds.jvp)
    assert len(oracle.refs) == 1 and oracle.refs[0].modelled
    assert sum(ev.counts.values()) - before == len(fd.MODEL_OFFSETS)
    model = oracle.refs[0]
    lo, hi = model.lo.copy(), model.hi.copy()
    measured = oracle.measured(0)
    assert not measured.modelled and oracle.refs[0] is measured
    assert (measured.lo <= lo + 1e-15).all() and (measured.hi >= hi - 1e-15).all()
    oracle.close()


def test_bisection_finds_the_element_of_a_linear_discrepancy_in_log2_n_calls():
    for n, wrong in ((1, 0), (7, 6), (1000, 617), (1024, 0)):
        disc = np.zeros(n)
        disc[wrong] = 1e-3

        def total(lo, hi, d=disc):
            return float(d[lo:hi].sum())

        j, steps = bisect(n, total)
        assert j == wrong and steps <= int(np.ceil(np.log2(max(n, 2)))) + 1


def test_the_stages_end_to_end_catch_a_wrong_rule_and_pass_the_right_one():
    x = np.linspace(-3, 3, 200)
    assert gv.check(tanh_rule(), x).ok
    r = gv.check(tanh_rule(vjp_sign=-1.0), x)
    assert not r.ok and r.errors[0].pair == ("VJP", "FD") and r.errors[0].kind == Kind.MISMATCH
