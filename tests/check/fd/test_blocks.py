"""The FD estimate works block by block (so its passes stay in cache on large
vectors); element for element it does the same operations in the same order,
so its result does not depend on the block size - bit for bit, non-finite
stencil values and per-element tolerances included."""

from __future__ import annotations

import numpy as np
import pytest

from gradverify._check import fd

from ._helpers import compare_column_references


def stencil(rng, shape, bad):
    arrays = [rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 3) for _ in fd.OFFSETS]
    if bad:
        for a in arrays[:2]:
            a.reshape(-1)[rng.integers(0, a.size, 3)] = [np.nan, np.inf, -np.inf]
    return arrays


@pytest.mark.parametrize("shape", [(1,), (7,), (3, 4), (2, 1000)])
@pytest.mark.parametrize("bad", [False, True])
@pytest.mark.parametrize("per_element_tolerance", [False, True])
def test_the_estimate_does_not_depend_on_the_block_size(shape, bad, per_element_tolerance):
    rng = np.random.default_rng(hash((shape, bad, per_element_tolerance)) % 2**32)
    f0 = rng.standard_normal(shape)
    ad_tol = np.abs(rng.standard_normal(shape)) * 1e-6 if per_element_tolerance else 1e-9
    s = fd.Stencil(1e-3, tuple(stencil(rng, shape, bad)))
    whole = fd.estimate(s, f0, 1.1e-16, ad_tol, None)
    assert whole.value.shape == shape and whole.kink.dtype == bool
    if bad:
        assert not whole.finite.all() and whole.kink[~whole.finite].all()
    for chunk in (1, 3, 64):
        blocks = fd.estimate(s, f0, 1.1e-16, ad_tol, None, chunk=chunk)
        for name in ("value", "err", "kink", "finite", "noise"):
            a, b = getattr(whole, name), getattr(blocks, name)
            assert a.shape == b.shape and np.array_equal(a, b, equal_nan=True), (name, chunk)
        assert whole.eps_f == blocks.eps_f


def test_a_kink_is_flagged_in_whichever_block_it_falls():
    """|x| sampled along a direction: the element at 0 is the only kink."""
    n, h = 1000, 1e-3
    x = np.linspace(-1, 1, n)
    x[617] = 0.0
    f = np.abs
    s = fd.evaluate_level(lambda t: f(x + t), h)
    for chunk in (1 << 15, 100, 7):
        est = fd.estimate(s, f(x), 1.1e-16, 1e-12, None, chunk=chunk)
        assert np.flatnonzero(est.kink).tolist() == [617]


SMOOTH_CASES = {
    # (x, F(t) = f(x + t u) with u = 1): cancellation, saturation, tiny values, a curved polynomial
    "tanh": (np.linspace(-20, 20, 401), np.tanh),
    "log-sum-exp near 0": (np.linspace(-1e-3, 1e-3, 201), lambda z: np.log(np.exp(z) + np.exp(-z))),
    "1 - cos at tiny z": (np.geomspace(1e-9, 1e-1, 200), lambda z: 1.0 - np.cos(z)),
    "cubic": (np.linspace(-3, 3, 301), lambda z: z**3 - 2 * z),
    "erfc tail": (np.linspace(2, 25, 200), lambda z: np.exp(-z * z) / (1 + z)),
}


def _smooth_stencil(case):
    """(F, h, F(0), F at MODEL_OFFSETS, max |F(0)|) of a smooth case."""
    x, f = SMOOTH_CASES[case]

    def F(t):
        return f(x + t)

    h, f0 = 2.0**-18 * 0.7, f(x)
    return F, h, f0, {k: F(k * h / 4) for k in fd.MODEL_OFFSETS}, float(np.max(np.abs(f0)))


@pytest.mark.parametrize("case", sorted(SMOOTH_CASES))
def test_the_model_reference_lies_inside_the_measured_one(case):
    """The rounding model's interval sits inside the measured interval element
    by element: AD that agrees with it agrees with the measured reference, so
    measuring only where the model's test fails changes no verdict."""
    F, h, f0, have, f0_scale = _smooth_stencil(case)
    model = fd.model_reference(have, f0, h, 2.0**-53, 0.0, f0_scale)
    measured = fd.reference(fd.Problem.of(F, f0, h, 1e-12, 2.0**-53, 0.0, f0_scale=f0_scale, ladder=False))
    assert model is not None  # smooth everywhere: the model flags nothing
    value, err, shift, _ = model
    ok = measured.status == fd.SMOOTH
    assert ok.any()
    slack = 1e-12 * (np.abs(measured.value) + measured.err)  # the two intervals' own rounding
    assert (value - err >= measured.lo - slack)[ok].all()
    assert (value + err <= measured.hi + slack)[ok].all()
    # the measured value is R1 or R2, each within ``shift`` of the model's
    assert (np.abs(measured.value - value) <= shift + slack)[ok].all()


def test_the_model_reference_steps_aside_at_a_kink_and_for_disagreeing_ad():
    x = np.linspace(-1, 1, 101)
    x[37] = 0.0

    def F(t):
        return np.abs(x + t)

    h = 2.0**-18 * 0.7
    have = {k: F(k * h / 4) for k in fd.MODEL_OFFSETS}
    assert fd.model_reference(have, np.abs(x), h, 2.0**-53, 1e-12, 1.0) is None
    smooth = np.linspace(0.5, 1, 101)
    have = {k: np.tanh(smooth + k * h / 4) for k in fd.MODEL_OFFSETS}
    right = 1 - np.tanh(smooth) ** 2
    assert fd.model_reference(have, np.tanh(smooth), h, 2.0**-53, 1e-12, 1.0, right) is not None
    wrong = right.copy()
    wrong[60] *= 1 + 1e-6
    assert fd.model_reference(have, np.tanh(smooth), h, 2.0**-53, 1e-12, 1.0, wrong) is None


@pytest.mark.parametrize("coarse", [False, True])
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_ad_scaled_block_by_block_is_judged_as_ad_scaled_whole(coarse, backend):
    """The model's agreement test with AD in u's units and its scale
    (``ad_scale``: scaled block by block in the block's scratch) decides
    exactly as with AD scaled whole beforehand: the product is rounded, then
    the difference, in both. Every element's AD sits at the edge of its
    bound as ``|ad c - value| <= err + t`` rounds (the largest float that
    passes), so any other order of rounding moves some element across it;
    one ulp more at one element fails. c = 3 rounds the product (a power of
    two would not)."""
    smooth = np.linspace(0.5, 1, 101)
    h, c, t = 2.0**-18 * 0.7, 3.0, 3e-12
    offsets = fd.COARSE_OFFSETS if coarse else fd.MODEL_OFFSETS
    have = {k: np.tanh(smooth + k * h / 4) for k in offsets}
    f0 = np.tanh(smooth)
    value, err, _, _ = fd.model_reference(have, f0, h, 2.0**-53, t, 1.0, coarse=coarse)
    room = err + t
    edge = (value + room) / c
    for _ in range(4):  # (to the largest ad whose rounded test passes)
        up = np.nextafter(edge, np.inf)
        edge = np.where(np.abs(up * c - value) <= room, up, edge)
        down = np.nextafter(edge, -np.inf)
        edge = np.where(np.abs(edge * c - value) <= room, edge, down)
    assert (np.abs(edge * c - value) <= room).all()
    assert not (np.abs(np.nextafter(edge, np.inf) * c - value) <= room).any()
    wrap = np.asarray if backend == "numpy" else pytest.importorskip("torch").from_numpy
    common = ({k: wrap(v) for k, v in have.items()}, wrap(f0), h, 2.0**-53, t, 1.0)
    over = edge.copy()
    over[60] = np.nextafter(over[60], np.inf)
    for ad, passes in ((edge, True), (over, False)):
        whole = fd.model_reference(*common, wrap(ad * c), chunk=37, coarse=coarse)
        blocks = fd.model_reference(*common, wrap(ad), chunk=37, coarse=coarse, ad_scale=c)
        assert (whole is not None) == (blocks is not None) == passes


def test_a_column_whose_bound_swamps_the_unmoved_outputs_is_judged_as_the_whole():
    """F = (t + a t^2, 0, 0): for some curvatures a the unmoved outputs' bound
    is as large as the slope scale until the curvature raises it. The support
    path raises it for them exactly as the whole vector does."""
    x, w = np.zeros(3), np.array([1.0, 0.0, 0.0])
    for a in np.geomspace(1e17, 1e21, 101):  # (at h = 2^-16 some of them swamp, some do not)

        def fn(z, a=a):
            return z + a * z * z

        compare_column_references(x, w, 0.0, fn)


@pytest.mark.parametrize("case", sorted(SMOOTH_CASES))
def test_the_coarse_model_overlaps_the_measured_reference(case):
    """The coarse model (four points) stands on its own interval, wider in
    truncation than the full model's: on smooth functions it flags nothing,
    takes R1 bit for bit as the full model computes it, and its interval
    meets the measured one at every element the measured estimate calls
    smooth (both hold the derivative)."""
    F, h, f0, have, f0_scale = _smooth_stencil(case)
    coarse = fd.model_reference({k: have[k] for k in fd.COARSE_OFFSETS}, f0, h, 2.0**-53, 0.0, f0_scale, coarse=True)
    assert coarse is not None
    value, err, shift, typical = coarse
    assert shift is None
    d1, d2 = (have[4] - have[-4]) * (0.5 / h), (have[2] - have[-2]) * (1.0 / h)
    assert np.array_equal(value, (d2 * 4.0 - d1) * (1.0 / 3.0))  # R1, bit for bit
    assert (err >= 4.0 * np.abs(value - d2)).all()  # D(h/2)'s own error, with its safety factor
    measured = fd.reference(fd.Problem.of(F, f0, h, 1e-12, 2.0**-53, 0.0, f0_scale=f0_scale, ladder=False))
    ok = measured.status == fd.SMOOTH
    assert ok.any()
    slack = 1e-12 * (np.abs(measured.value) + measured.err)
    assert (np.abs(measured.value - value) <= err + measured.err + slack)[ok].all()


CURVED = [
    (np.tanh, lambda z: 1.0 - np.tanh(z) ** 2),
    (lambda z: np.exp(3.0 * z), lambda z: 3.0 * np.exp(3.0 * z)),
    (lambda z: np.sin(40.0 * z), lambda z: 40.0 * np.cos(40.0 * z)),
]


@pytest.mark.parametrize("f, df", CURVED)
def test_the_coarse_model_holds_the_derivative_within_twice_the_six_point_bound(f, df):
    """At the oracle's step the coarse interval holds f' at every element,
    curvature (exp, a fast sine) included, and is at most twice as wide as
    the six-point model's (which is never narrower than R1's noise): a
    disagreement the six points convict is at least half way to this bound."""
    x = np.linspace(-2, 2, 2001)
    h = 2.0**-18 * 0.7
    have = {k: f(x + k * h / 4) for k in fd.MODEL_OFFSETS}
    f0 = f(x)
    scale = float(np.max(np.abs(f0)))
    coarse = fd.model_reference({k: have[k] for k in fd.COARSE_OFFSETS}, f0, h, 2.0**-53, 0.0, scale, coarse=True)
    six = fd.model_reference(have, f0, h, 2.0**-53, 0.0, scale)
    assert coarse is not None and six is not None
    value, err, _, _ = coarse
    assert (np.abs(value - df(x)) <= err).all()
    assert (err <= 2.0 * six[1]).all()


@pytest.mark.parametrize("f, df", CURVED[1:])
def test_the_coarse_model_steps_aside_where_its_truncation_outgrows_the_noise(f, df):
    """At a long step the coarse bound would be D(h/2)'s truncation, far above
    the noise and the six-point bound: the coarse model steps aside (the six
    points decide). So does it for a feature between h/2 and h that D(h)
    sees and D(h/2) does not (a dead zone of half-width h/10 at 0)."""
    x = np.linspace(-2, 2, 2001)
    h = 2.0**-7
    have = {k: f(x + k * h / 4) for k in fd.COARSE_OFFSETS}
    f0 = f(x)
    assert fd.model_reference(have, f0, h, 2.0**-53, 1e3, float(np.max(np.abs(f0))), coarse=True) is None

    def dead(z, t0=1e-4):
        return np.sign(z) * np.maximum(np.abs(z) - t0, 0.0)

    x, h = np.zeros(3), 1e-3
    have = {k: dead(x + k * h / 4) for k in fd.COARSE_OFFSETS}
    assert fd.model_reference(have, dead(x), h, 2.0**-53, 1.0, 1.0, np.zeros(3), coarse=True) is None


def test_the_coarse_model_steps_aside_at_a_kink_and_for_disagreeing_ad():
    x = np.linspace(-1, 1, 101)
    x[37] = 0.0
    h = 2.0**-18 * 0.7
    have = {k: np.abs(x + k * h / 4) for k in fd.COARSE_OFFSETS}
    assert fd.model_reference(have, np.abs(x), h, 2.0**-53, 1e-12, 1.0, coarse=True) is None
    smooth = np.linspace(0.5, 1, 101)
    have = {k: np.tanh(smooth + k * h / 4) for k in fd.COARSE_OFFSETS}
    right = 1 - np.tanh(smooth) ** 2
    assert fd.model_reference(have, np.tanh(smooth), h, 2.0**-53, 1e-12, 1.0, right, coarse=True) is not None
    wrong = right.copy()
    wrong[60] *= 1 + 1e-6
    assert fd.model_reference(have, np.tanh(smooth), h, 2.0**-53, 1e-12, 1.0, wrong, coarse=True) is None


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("coarse", [False, True])
def test_the_model_reference_does_not_depend_on_the_block_size(backend, coarse):
    """Block by block (into reused temporaries and the results' own slices) the
    model reference is the one-block reference bit for bit, with a
    per-element tolerance and the AD values it judges; and a block that
    fails the test fails the whole reference, wherever it falls."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal(1000) * 3.0
    h = 2.0**-18 * 0.7
    have = {k: np.tanh(x + k * h / 4) for k in (fd.COARSE_OFFSETS if coarse else fd.MODEL_OFFSETS)}
    f0 = np.tanh(x)
    ad = 1.0 - f0 * f0
    ad_tol = np.abs(ad) * 1e-12 + 1e-15
    if backend == "torch":
        torch = pytest.importorskip("torch")
        have = {k: torch.from_numpy(v) for k, v in have.items()}
        f0, ad, ad_tol = torch.from_numpy(f0), torch.from_numpy(ad), torch.from_numpy(ad_tol)
    args = (have, f0, h, 2.0**-53, ad_tol, 1.0, ad)
    whole = fd.model_reference(*args, coarse=coarse)
    assert whole is not None
    for chunk in (1, 7, 64, 999):
        blocks = fd.model_reference(*args, chunk=chunk, coarse=coarse)
        assert blocks is not None and blocks[3] == whole[3]
        for a, b in zip(whole[:3], blocks[:3]):
            if a is None:  # (the coarse model's shift)
                assert coarse and b is None
            else:
                assert np.array_equal(np.asarray(a), np.asarray(b)), chunk
    wrong = ad * 1.0
    wrong[613] += 1e-3  # (AD off at one element: no model reference, in any blocking)
    for chunk in (None, 7, 64):
        assert fd.model_reference(have, f0, h, 2.0**-53, ad_tol, 1.0, wrong, chunk=chunk, coarse=coarse) is None


@pytest.mark.parametrize("with_ad", [True, False])
def test_the_model_rows_of_many_directions_are_each_directions_own(with_ad):
    """model_rows() works out a full Jacobian's columns in one pass, a
    row each; every row is model_reference() along that column bit for bit,
    a failing column None (a kink, a NaN, AD off at one element) - whatever
    its neighbours do - with tolerances per element or one number per column."""
    rng = np.random.default_rng(5)
    m, h = 7, 2.0**-18 * 0.7
    x = rng.standard_normal(m) * 3.0
    f0 = np.tanh(x)
    columns = []
    for j in range(6):
        c = float(2.0 ** rng.integers(-3, 3))
        u = np.zeros(m)
        u[j] = c
        if j == 2:  # a kink at one output
            fn = lambda z: np.where(np.arange(m) == 4, np.abs(z - x[4]), np.tanh(z))  # noqa: E731
            have = {k: fn(x + k * h / 4 * u) for k in fd.MODEL_OFFSETS}
        else:
            have = {k: np.tanh(x + k * h / 4 * u) for k in fd.MODEL_OFFSETS}
        if j == 3:
            have[-1] = have[-1].copy()
            have[-1][1] = np.nan
        ad = (1.0 - f0 * f0) * u
        if j == 5:
            ad[j] *= 1 + 1e-5  # AD wrong at the element the column moves
        tol = np.abs(ad) * 1e-12 + 1e-15 if j % 2 else 1e-12
        point = float(np.max(np.abs(x))) / c
        columns.append((have, tol, ad if with_ad else None, point))
    f0_scale = float(np.max(np.abs(f0)))
    ok, value, err, shift, typicals = fd.model_rows(
        [c[0] for c in columns],
        f0,
        h,
        2.0**-53,
        [c[1] for c in columns],
        f0_scale,
        [c[2] for c in columns] if with_ad else None,
        [c[3] for c in columns],
    )
    alone = [fd.model_reference(have, f0, h, 2.0**-53, t, f0_scale, ad, point=p) for have, t, ad, p in columns]
    assert list(ok) == [a is not None for a in alone]
    assert alone[2] is None and alone[3] is None and (alone[5] is None) == with_ad
    assert sum(a is not None for a in alone) >= 3
    for b, a in enumerate(alone):
        if a is not None:
            assert a[3] == typicals[b]
            for x_a, x_b in zip(a[:3], (value[b], err[b], shift[b])):
                assert x_a.shape == x_b.shape and np.array_equal(x_a, x_b)


def test_the_grid_of_a_cancelling_fn_is_u_times_its_terms_not_its_value():
    from gradverify._check import fd

    z = 2e-4 + np.arange(-4, 5) * 1.2345e-10
    for f, spacing in ((z - np.tanh(z), np.spacing(z[4])), (np.exp(z), np.spacing(np.exp(z[4])))):
        q = fd.grid([f[k : k + 1] for k in range(9) if k != 4], f[4:5])
        assert spacing <= q[0] <= 4 * spacing
    # z - tanh z ~ 3e-12 lies on z's grid, ~1e7 times its own spacing
    assert fd.grid([(z - np.tanh(z))[:1]], (z - np.tanh(z))[4:5])[0] > 1e6 * np.spacing(3e-12)
    # nothing moved: no grid seen
    assert fd.grid([np.ones(2)], np.ones(2)).tolist() == [0.0, 0.0]


def test_the_coarse_model_is_the_same_on_every_backend():
    """numpy, torch and jax (compiled: a fused product would round otherwise)
    give the coarse model's value and error bit for bit."""
    jax = pytest.importorskip("jax")
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(1).standard_normal(5000) * 2
    h = 2.0**-18 * 0.7
    have = {k: np.tanh(x + k * h / 4) for k in fd.COARSE_OFFSETS}
    f0 = np.tanh(x)
    args = (h, 2.0**-53, 1e-12, 1.0)
    ref = fd.model_reference(have, f0, *args, coarse=True)
    with jax.enable_x64(True):
        jhave = {k: jax.numpy.asarray(v) for k, v in have.items()}
        j = fd.model_reference(jhave, jax.numpy.asarray(f0), *args, coarse=True)
    t = fd.model_reference({k: torch.from_numpy(v) for k, v in have.items()}, torch.from_numpy(f0), *args, coarse=True)
    for i in (0, 1):
        assert np.array_equal(ref[i], np.asarray(j[i])) and np.array_equal(ref[i], t[i].numpy()), i


@pytest.mark.parametrize("outside", [False, True], ids=["within the first's", "one beyond"])
def test_a_large_columns_points_are_held_in_two_reads_as_each_alone_would_be(outside):
    """On a device a column's eight points are held where they move the
    outputs: the first point's moved outputs read, the others' values
    gathered there, and whether any moves an output beyond them read once
    - a point that does is evaluated again and held alone. Each point is
    held bit for bit as ``of`` holds it."""
    torch = pytest.importorskip("torch")
    from gradverify._check.fd.reference import _Moved

    from ..test_tiers import _host_reads

    f0 = torch.linspace(-1.0, 1.0, 5000, dtype=torch.float64)
    calls = [0, 0, 0]

    def point(k, idx, step):
        def make():
            calls[k] += 1
            a = f0.clone()
            a[idx] += step
            return a

        return make

    last = [3, 17, 400, 999] if outside else [17]
    points = [point(0, [3, 17, 400], 0.5), point(1, [3, 17], -0.25), point(2, last, 2.0**-30)]
    held = []
    reads = _host_reads(lambda: held.extend(_Moved.each(points, f0)))
    assert calls == [1, 1, 2 if outside else 1] and reads == (3 if outside else 2)
    for make, h in zip(points, held):
        assert isinstance(h, _Moved)
        alone = _Moved.whole(_Moved.of(make(), f0), f0)
        assert torch.equal(_Moved.whole(h, f0).view(torch.int64), alone.view(torch.int64))


@pytest.mark.parametrize("case", ["smooth", "smooth, AD agrees", "AD off at one element", "a kink", "curved"])
def test_the_coarse_model_in_two_temporaries_decides_as_fresh_arrays_do(case):
    """On torch a block's temporaries live in reused buffers: the coarse
    model's share two (D(h)'s and D(h/2)'s, free once R1 is made), so a
    block of a GPU's size holds two arrays of scratch, not six. A buffer
    shared while still in use changes the verdict or the values: each case
    is computed both ways and compared bit for bit - one where every test
    passes, and one where each of its tests fails (AD's agreement, the kink
    test, the truncation bound)."""
    torch = pytest.importorskip("torch")
    from gradverify._check.fd.blocks import Scratch
    from gradverify._check.fd.model import _coarse_block

    rng = np.random.default_rng(7)
    z = np.linspace(-2.0, 2.0, 4097)
    h = 2.0**-18 * 0.7
    f = (
        (lambda a: np.abs(a) + np.tanh(a))
        if case == "a kink"
        else (lambda a: np.tanh(3e3 * a))
        if case == "curved"
        else np.tanh
    )
    fs = tuple(torch.from_numpy(f(z + k * h / 4)) for k in fd.COARSE_OFFSETS)
    f0 = torch.from_numpy(f(z))
    t = torch.from_numpy(np.abs(rng.standard_normal(z.size)) * 1e-9)
    deriv = None
    if "AD" in case:
        d = (1 - np.tanh(z) ** 2) * (1 + rng.uniform(-1e-10, 1e-10, z.size))
        d[1234] += 1e-3 if "off" in case else 0.0
        deriv = torch.from_numpy(d)
    limits = (1e-9, 1e-9, 1.0, 1e-12, 1e-9)

    def run(scratch):
        outs = (torch.empty_like(f0), torch.empty_like(f0), None)
        ok, value, err, _ = _coarse_block(fs, f0, t, deriv, h, limits, outs, scratch)
        return bool(ok), value.clone(), err.clone()

    scratch = Scratch(f0, z.size)
    shared, fresh = run(scratch), run(None)
    assert shared[0] == fresh[0] == case.startswith("smooth")
    assert torch.equal(shared[1], fresh[1]) and torch.equal(shared[2], fresh[2])
    assert len(scratch.buffers) == 2


def _whole_check_cases():
    import torch

    from gradverify._sweep.examples import tanh_bias_flipped

    rng = np.random.default_rng(11)
    x, b = rng.standard_normal((2000, 10)), rng.standard_normal(10)
    kinked = x.copy()
    kinked[::7] = 0.0
    flip = 12345
    return [
        ("torch, a forward rule, correct", tanh_bias_flipped("torch", None), (torch.tensor(x), torch.tensor(b))),
        ("torch, a forward rule, flipped", tanh_bias_flipped("torch", flip), (torch.tensor(x), torch.tensor(b))),
        (
            "torch, backward only, flipped",
            tanh_bias_flipped("torch", flip, forward_rule=False),
            (torch.tensor(x), torch.tensor(b)),
        ),
        ("numpy rule, flipped", tanh_bias_flipped("numpy", flip), (x, b)),
        ("relu at zeros", torch.relu, (torch.tensor(kinked),)),
        ("log, NaN where negative", torch.log, (torch.tensor(x),)),
        ("a curved float32 function", lambda a: torch.exp(3.0 * a) * a, (torch.tensor(x, dtype=torch.float32),)),
    ]


@pytest.mark.parametrize("case", range(7))
def test_a_whole_check_does_not_depend_on_the_block_size(case, monkeypatch):
    """A large check's result - verdict, findings and their words, the
    closeness of every comparison - is the same bit for bit in blocks of
    any size (every block's arithmetic elementwise, its reductions maxima):
    here in one block, in blocks of 1000 and in blocks of an odd size, on
    passing and failing checks, at kinks and where fn is NaN."""
    import json

    import gradverify as gv
    from gradverify._check.fd import blocks

    name, fn, args = _whole_check_cases()[case]
    said = {}
    for chunk in (blocks.DEVICE_CHUNK, 1000, 7777):
        monkeypatch.setattr(blocks, "CHUNK", chunk)
        said[chunk] = json.dumps(gv.check(fn, *args).to_dict(), sort_keys=True, default=str)
    assert said[1000] == said[blocks.DEVICE_CHUNK] == said[7777], name
