"""A check spends where it doubts: on large inputs the guards (the second
evaluation at the point, the wider noise tables' arithmetic) run only where
the first comparisons leave doubt, and a real bug is convicted without them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import gradverify as gv
from gradverify._check import excuses, tolerance as tol
from gradverify._check.fd import noise
from gradverify._result import ERROR
from gradverify._sweep.examples import tanh_bias_flipped


def _point(rows: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(seed)
    return torch.tensor(rng.standard_normal((rows, 10))), torch.tensor(rng.standard_normal(10))


@pytest.mark.parametrize("forward_rule", [True, False])
def test_a_decisive_pass_evaluates_fn_once_at_the_point(forward_rule):
    x, b = _point(1000)
    r = gv.check(tanh_bias_flipped("torch", None, forward_rule=forward_rule), x, b)
    assert r.ok, str(r)
    assert r.strategy.startswith("directional")
    # once at the point and four times along the first direction (the coarse
    # stencil, fd.COARSE_OFFSETS): no repeat, no second tier
    assert r.evaluations["primal"] == 5, r.evaluations
    assert r.worst_ratio <= 0.25
    # asked for one direction outright: the full model's six points
    r = gv.check(tanh_bias_flipped("torch", None, forward_rule=forward_rule), x, b, directions=1)
    assert r.ok and r.evaluations["primal"] == 7, r.evaluations


@pytest.mark.parametrize("forward_rule", [True, False])
def test_the_coarse_first_tier_still_names_a_flipped_element(forward_rule):
    """The four-point first tier convicts as the full model does: the same
    element, on every seed."""
    x, b = _point(1000)
    for seed in range(4):
        r = gv.check(tanh_bias_flipped("torch", 4321, forward_rule=forward_rule), x, b, seed=seed)
        assert not r.ok, str(r)
        assert r.by_kind(gv.Kind.MISMATCH)[0].input_index == (432, 1), str(r)


def test_a_full_jacobian_still_evaluates_twice_at_the_point():
    x, b = _point(2)
    r = gv.check(tanh_bias_flipped("torch", None), x, b)
    assert r.ok and r.strategy.startswith("full")
    calls = []

    def counted(x, b):
        calls.append(1)
        return torch.tanh(x + b)

    gv.check(counted, x, b, vectorise=False)
    # two at the point, four per column of the 20 inputs' stencils at least
    assert len(calls) >= 2 + 4 * 20


def test_nondeterminism_beyond_rounding_is_said_first_on_large_inputs():
    gen = torch.Generator().manual_seed(0)

    def jittery(x):
        return torch.tanh(x) * (1 + 1e-9 * torch.rand(x.shape, generator=gen, dtype=x.dtype))

    x, _ = _point(1000)
    r = gv.check(jittery, x)
    assert not r.ok
    first = r.findings[0]
    assert first.kind == gv.Kind.NONDETERMINISM and first.level == ERROR, str(r)


def test_dropout_in_training_is_nondeterminism_on_large_inputs():
    x, _ = _point(1000)
    r = gv.check(lambda x: torch.nn.functional.dropout(x, 0.5, training=True), x)
    assert not r.ok
    assert r.findings[0].kind == gv.Kind.NONDETERMINISM, str(r)


def test_a_real_bug_is_convicted_without_measuring_the_wider_tables(monkeypatch):
    measured = []
    original = noise.WideTable.measure
    monkeypatch.setattr(noise.WideTable, "measure", lambda self: measured.append(self.d) or original(self))
    x, b = _point(1000, seed=3)
    flip = 4321
    r = gv.check(tanh_bias_flipped("torch", flip, forward_rule=False), x, b)
    assert not r.ok
    (f,) = r.by_kind(gv.Kind.MISMATCH)
    assert f.input_index == np.unravel_index(flip, tuple(x.shape))
    # no noise a rounding artifact can have explains a flipped element: the
    # tables' points were looked at, their noise never worked out
    assert measured == []


def test_the_wide_bound_is_never_below_the_tilt():
    """_wide_bound's tilt is _wide_tilt's with sigma at its plausible limit:
    element by element never smaller, whatever sigma and the points are."""
    rng = np.random.default_rng(7)
    n = 4000
    fs = tuple(rng.standard_normal(n) * 10.0 ** rng.uniform(-300, 300, n) for _ in range(9))
    fs = (np.where(rng.random(n) < 0.01, np.inf, fs[0]), *fs[1:])
    peak = np.abs(rng.standard_normal(n))
    eligible = rng.random(n) < 0.9
    scalars = (1.5, tol.unit_roundoff("float64"), 3e-6)
    values = np.max(np.abs(np.where(np.isfinite(np.stack(fs)), np.stack(fs), 0.0)), axis=0)
    limit = tol.ROUNDING_TERMS * scalars[1] * np.maximum(values, scalars[0])
    # sigma at, just below and far beyond its plausible limit
    with np.errstate(over="ignore", invalid="ignore"):
        sigma = limit * rng.choice([1.0, 1 - 2.0**-52, 0.5, 2.0, 1e300], n)
        top, most = excuses._wide_bound(fs, peak, eligible, scalars)
        top2, tilt = excuses._wide_tilt(fs, sigma, peak, eligible, scalars)
    assert np.array_equal(top, top2)
    assert np.all(tilt <= most)
    assert np.any((tilt == most) & (tilt > 0))  # (sigma at the limit: the bound is tight)


def _host_reads(f) -> int:
    """Scalar reads (and tensors handed to the host) while ``f`` runs."""
    from torch.utils._python_dispatch import TorchDispatchMode

    reads = [0]

    class Reads(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            reads[0] += str(func.overloadpacket) in ("aten._local_scalar_dense", "aten.equal")  # (a host bool)
            return func(*args, **(kwargs or {}))

    with pytest.MonkeyPatch.context() as mp:
        for name in ("tolist", "numpy"):
            method = getattr(torch.Tensor, name)
            mp.setattr(
                torch.Tensor, name, lambda t, *a, _m=method, **k: reads.__setitem__(0, reads[0] + 1) or _m(t, *a, **k)
            )
        with Reads():
            f()
    return reads[0]


def test_a_passing_large_check_reads_its_scalars_together():
    """Every reduction read alone made 89 reads of a passing check of this
    function at this size (three blocks of the CPU's FD arithmetic); a
    stage's scalars read together make 8: the arguments' finiteness at the
    boundary; their extremes and sums of squares (validation, summaries,
    the probes' scales) with fn's mutation test and its output's extremes;
    the directions' largest elements; the AD runs' finiteness with their
    bounds' scales and the FD model's scales; the comparisons' sums - and
    whether the FD model holds, once per block (three here; one on a GPU,
    whose blocks are larger)."""
    x, b = _point(7000)
    rule = tanh_bias_flipped("torch", None)
    reads = _host_reads(lambda: gv.check(rule, x, b))
    assert reads <= 8, reads


@pytest.mark.parametrize(("forward_rule", "most"), [(True, 20), (False, 24)])
def test_a_failing_large_check_reads_its_scalars_together(forward_rule, most):
    """A flipped element of the VJP, named, in few reads (22 and 33 when the
    excuses and the localiser read each scalar alone): the wide-noise excuse
    bounds what every wider table could explain in one read (and knows
    without one that every element is eligible where none was flagged), a
    measured reference reads its flags with whether any element is
    unresolved, and the localiser reads its guess, and whether FD decided
    the column, with the sums they serve."""
    x, b = _point(7000)
    rule = tanh_bias_flipped("torch", 12345, forward_rule=forward_rule)
    found = []
    reads = _host_reads(lambda: found.append(gv.check(rule, x, b)))
    assert [f.input_index for f in found[0].findings if f.kind == gv.Kind.MISMATCH] == [(1234, 5)], str(found[0])
    assert reads <= most, reads


@pytest.mark.parametrize(("forward_rule", "most"), [(True, 13), (False, 11)])
def test_a_passing_large_check_holds_its_arrays_no_longer_than_it_needs_them(forward_rule, most, monkeypatch):
    """The full-size arrays a passing check holds at once at 70,000 elements
    (three blocks of the CPU's FD arithmetic), counted from creation to
    release (the benchmark's own count, bench_cost.live_peak): the point
    and its copies, the directions, the AD runs, the FD points and the
    model's blocks. What a stage read from an array (its extremes, its sum
    of squares) does not keep the array alive; the elements' step scales,
    once the directions are made from them, are not held, nor the JVP's
    bound in u's units beside the one along c u the references take, nor
    the JVP along c u (the model scales it block by block), nor the buffer
    the FD points were written into once they are made (17 and 13 with all
    four held)."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import bench_cost

    x, b = _point(7000)
    rule = tanh_bias_flipped("torch", None, forward_rule=forward_rule)
    gv.check(rule, x, b)  # (warm: the directions' table of 2^16, 0.94 of x here, is placed once a process)
    peak = bench_cost.live_peak(rule, (x, b), x.numel())
    assert peak <= most + 0.01, peak


def test_a_failing_check_measures_fns_noise_on_few_temporaries(monkeypatch):
    """Where a comparison fails, fn's noise is measured from a difference
    table of nine points: in one block (a GPU's, at 10^6 elements) its
    differences are worked out in place after the first, and the table is
    let go once its largest fourth difference is taken; every other
    temporary of the estimate is let go once it has served (D(h), D(h/2)
    and D(h/4) before the table, R1, R2 and the bounds once the value is
    chosen) - the check holds at most 27 full-size arrays at once (37 with
    the table's rows all kept, 33 with the temporaries)."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import bench_cost

    from gradverify._check.fd import blocks

    monkeypatch.setattr(blocks, "CHUNK", blocks.DEVICE_CHUNK)
    x, b = _point(100_000)
    rule = tanh_bias_flipped("torch", 575193, forward_rule=False)
    assert bench_cost.live_peak(rule, (x, b), x.numel()) <= 27.01


# -- one direction first, a second on doubt -------------------------------------------
@pytest.mark.parametrize("forward_rule", [True, False])
def test_a_decisive_pass_takes_one_direction_and_one_cotangent(forward_rule):
    x, b = _point(1000)
    r = gv.check(tanh_bias_flipped("torch", None, forward_rule=forward_rule), x, b)
    assert r.ok, str(r)
    assert r.strategy == "directional (1 random direction, seed 0)"
    assert r.evaluations["vjp"] == 1
    if forward_rule:
        assert r.evaluations["jvp"] == 1
    else:  # (one call says the Function has no forward rule)
        assert r.modes["JVP"] == "unavailable" and r.evaluations["jvp"] <= 1
    assert not any("left doubt" in n for n in r.notes)
    assert "directions=" not in r.reproduce


def _slightly_off(eps: float):
    """tanh whose JVP and VJP carry a relative error eps everywhere."""

    def jvp(p, t):
        return (1 - np.tanh(p[0]) ** 2) * t[0] * (1 + eps)

    def vjp(p, g):
        return ((1 - np.tanh(p[0]) ** 2) * g * (1 + eps),)

    return gv.Rule(np.tanh, jvp=jvp, vjp=vjp)


def test_doubt_takes_a_second_direction_that_keeps_the_first():
    """An error beyond gradverify's bound that a migrated suite's tolerance
    covers is a warning: the first direction leaves doubt, and the verdict is
    that of two directions, the first pair among them (the same warning)."""
    x = np.random.default_rng(3).standard_normal(5000)
    fn = _slightly_off(1e-7)
    first = gv.check(fn, x, directions=1, suite_tol=(1e-5, 1e-5))
    r = gv.check(fn, x, suite_tol=(1e-5, 1e-5))
    assert first.ok and first.warnings, str(first)
    assert r.ok and r.strategy == "directional (2 random directions, seed 0)", str(r)
    assert any("one random direction left doubt" in n for n in r.notes), r.notes
    two = gv.check(fn, x, directions=2, suite_tol=(1e-5, 1e-5))
    assert [f.message for f in r.findings] == [f.message for f in two.findings]
    for key in ("primal", "jvp", "vjp"):  # (both tiers' calls, counted)
        assert r.evaluations[key] == first.evaluations[key] + two.evaluations[key], key
    # without the suite's tolerance the same rule fails on the first direction alone
    bad = gv.check(fn, x)
    assert not bad.ok and bad.strategy == "directional (1 random direction, seed 0)", str(bad)


def test_an_explicit_number_of_directions_is_taken_as_asked():
    x = np.random.default_rng(4).standard_normal(5000)
    for k in (1, 2, 3):
        r = gv.check(_slightly_off(0.0), x, directions=k)
        assert r.ok and r.evaluations["jvp"] == k and r.evaluations["vjp"] == k, str(r)
        assert f"directions={k}" in r.reproduce
    with pytest.raises(gv.ArgumentValueError, match="directions"):
        gv.check(_slightly_off(0.0), x, directions=0)


def test_the_first_tier_is_the_first_pair_of_two():
    """probes draws directions and cotangents in pairs: the one-direction
    check's u and v are the two-direction check's first."""
    from gradverify._check import primal as _primal, probes as _probes
    from gradverify._check.evaluate import Evaluator
    from gradverify._check.findings import Findings

    x = np.random.default_rng(5).standard_normal(3000)
    ev = Evaluator.for_call(np.tanh, (x,))
    primal = _primal.evaluate(ev, Findings())
    precision = _primal.choose(ev, primal)
    one, two = (_probes.choose(ev, primal, precision, seed=9, k=k, full=False) for k in (1, 2))
    assert np.array_equal(one.us[0], two.us[0]) and np.array_equal(one.vs[0], two.vs[0])
    assert not np.array_equal(two.us[0], two.us[1])


def test_a_warning_that_no_direction_changes_takes_one_direction():
    """A NaN output is said along any direction: no second one for it."""
    x = np.abs(np.random.default_rng(6).standard_normal(4001)) + 0.1
    x[7] = -1.0
    square = gv.Rule(
        lambda z: np.where(z < 0, np.nan, z * z), jvp=lambda p, t: 2 * p[0] * t[0], vjp=lambda p, g: (2 * p[0] * g,)
    )
    r = gv.check(square, x)
    assert r.ok and r.by_kind(gv.Kind.NONFINITE_OUTPUT), str(r)
    assert r.strategy == "directional (1 random direction, seed 0)", str(r)


def test_directions_near_the_largest_float_stay_finite():
    """Inputs up to 9.5e307: the direction's normalisation does not overflow
    (its largest element stays below 4), and the check compares what FD can
    decide there."""
    x = np.random.default_rng(7).uniform(1e306, 9.5e307, 4000)
    half = gv.Rule(lambda z: z / 2, jvp=lambda p, t: t[0] / 2, vjp=lambda p, g: (g / 2,))
    r = gv.check(half, x)
    assert r.ok, str(r)
    assert not r.by_kind(gv.Kind.NOTHING_COMPARED) and not r.by_kind(gv.Kind.NOTHING_CHECKED), str(r)
    # (FD's own sums of F values near 1e308 overflow at some elements: those are inconclusive, not all)
    assert all("at 4000 element" not in f.message for f in r.findings), str(r)


@pytest.mark.parametrize("scale", [1.0, 1e150, 1e160, 1e300])
def test_the_adjoint_identity_holds_a_wrong_backward_at_any_scale(scale):
    """A backward 1e-9 too large in every element breaks <v, J u> = <J^T v, u>
    far beyond the rounding of terms as large as the inputs (|x| ~ 1), however
    large the derivatives: the projection's size is measured without
    overflowing its squares."""
    x = np.random.default_rng(8).standard_normal(5000)
    rule = gv.Rule(lambda z: scale * z, jvp=lambda p, t: scale * t[0], vjp=lambda p, g: (scale * (1 + 1e-9) * g,))
    r = gv.check(rule, x, full=False)
    assert not r.ok, str(r)
    assert any(f.pair == ("JVP", "VJP") for f in r.errors), str(r)


def test_a_curved_functions_small_error_is_caught_as_the_six_points_catch_it():
    """sin(300 x): at the oracle's step D(h/2)'s truncation is far above the
    noise, so the coarse first tier steps aside and the six points decide. A
    rule off by 1e-8 relative everywhere fails on every seed, as with
    directions=1; the correct rule passes."""
    import numpy as np

    w = 300.0

    def rule(delta):
        def d(x):
            return w * np.cos(w * x) * (1 + delta)

        return gv.Rule(lambda x: np.sin(w * x), jvp=lambda xs, ts: d(xs[0]) * ts[0], vjp=lambda xs, g: (d(xs[0]) * g,))

    x = np.random.default_rng(0).standard_normal(5000)
    for seed in range(4):
        assert not gv.check(rule(1e-8), x, seed=seed).ok
        assert not gv.check(rule(1e-8), x, seed=seed, directions=1).ok
        assert gv.check(rule(0.0), x, seed=seed).ok


def test_the_benchmarks_clock_of_fns_calls_sees_every_call(monkeypatch):
    """bench_cost.InFn: every call of fn a check makes - alone, vectorised,
    under forward and reverse mode, on a full Jacobian and along random
    directions, passing and failing - is made inside the clock's window."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import bench_cost

    clock = bench_cost.InFn()
    outside: list[bool] = []

    class Tanh(torch.autograd.Function):
        generate_vmap_rule = True  # (its columns and rows in one vectorised call each)

        @staticmethod
        def forward(x):
            outside.append(clock._depth == 0)
            return torch.tanh(x)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(output)
            ctx.y = output

        @staticmethod
        def backward(ctx, g):
            outside.append(clock._depth == 0)
            (y,) = ctx.saved_tensors
            return g * (1 - y * y) * (1.5 if flip else 1.0)

        @staticmethod
        def jvp(ctx, t):
            outside.append(clock._depth == 0)
            return t * (1 - ctx.y * ctx.y)

    flip = False
    for n in (6, 300):  # (a full Jacobian, random directions)
        for flip in (False, True):
            with clock:
                r = gv.check(Tanh.apply, torch.linspace(-1, 1, n, dtype=torch.float64))
            assert r.ok is not flip
    assert len(outside) > 20 and not any(outside)
    assert clock.seconds > 0.0


@pytest.mark.parametrize(("forward_rule", "most"), [(True, 15), (False, 13)])
def test_a_passing_check_in_blocks_as_large_as_a_gpus_holds_two_of_scratch(forward_rule, most, monkeypatch):
    """With the FD arithmetic in one block (as on a GPU, where a block is up
    to 2^22 elements), the arrays of x's size a passing check holds at its
    peak: the point, F(0), the direction and cotangent, the AD values, the
    coarse stencil's points, the JVP's bound, the reference - and the
    coarse model's block, which works in two buffers (six before: 19 and
    16). 2e5 elements: the directions' table of 2^16 is not one of them."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import bench_cost

    from gradverify._check.fd import blocks

    monkeypatch.setattr(blocks, "CHUNK", blocks.DEVICE_CHUNK)
    x, b = _point(20_000)
    rule = tanh_bias_flipped("torch", None, forward_rule=forward_rule)
    assert bench_cost.live_peak(rule, (x, b), x.numel()) <= most + 0.01
