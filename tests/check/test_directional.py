"""Large inputs: random signed directions, element-wise J u, projected J^T v, the
adjoint identity, and bisection to the wrong element. Cost independent of n."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv
from gradverify._sweep.examples import tanh_bias_flipped

from .._helpers import flipped_tanh_bias, make


@pytest.mark.parametrize("backend", ["numpy", "torch", "jax"])
@pytest.mark.parametrize("n_rows", [100, 1000])
def test_one_flipped_reverse_element_is_found_and_located(backend, n_rows):
    rng = np.random.default_rng(n_rows)
    n_cols = 10
    flip_at = int(rng.integers(n_rows * n_cols))
    x = make(backend, rng.standard_normal((n_rows, n_cols)))
    b = make(backend, rng.standard_normal(n_cols))
    r = gv.check(flipped_tanh_bias(backend, n_cols, flip_at), x, b)
    assert not r.ok, str(r)
    assert r.strategy.startswith("directional")
    (f,) = r.by_kind(gv.Kind.MISMATCH)
    assert f.pair == ("VJP", "FD")
    assert f.argument == 0
    assert f.input_index == np.unravel_index(flip_at, (n_rows, n_cols))
    assert f.values["VJP"] == pytest.approx(-f.values["FD"], rel=1e-6)
    # Cost independent of n: a handful of evaluations plus log2(n) for the
    # bisection. Without a JVP to vouch for FD, a disagreement is first put to
    # fn's noise at four wider spacings (32 evaluations) before it convicts.
    calls = sum(r.evaluations.values())
    assert calls <= 30 + 32 + 2 * np.log2(n_rows * n_cols + 10), r.evaluations


@pytest.mark.parametrize("n_rows", [100, 1000])
def test_correct_rule_passes_large(backend, n_rows):
    rng = np.random.default_rng(5)
    x = make(backend, rng.standard_normal((n_rows, 10)))
    b = make(backend, rng.standard_normal(10))
    r = gv.check(tanh_bias_flipped(backend, None), x, b)
    assert r.ok, str(r)
    assert r.strategy.startswith("directional")


def test_one_flipped_forward_element_is_located():
    rng = np.random.default_rng(3)
    flip_at = 4321
    x, b = rng.standard_normal((1000, 10)), rng.standard_normal(10)
    r = gv.check(flipped_tanh_bias("numpy", 10, flip_at, mode="jvp"), x, b)
    assert not r.ok
    f = [f for f in r.by_kind(gv.Kind.MISMATCH) if f.pair == ("JVP", "FD")][0]
    assert f.output_index == (432, 1) and f.input_index == (432, 1) and f.argument == 0
    assert f.values["JVP"] == pytest.approx(-f.values["FD"], rel=1e-6)


def test_adjoint_identity_catches_what_float32_fd_cannot_resolve():
    """A function that only runs in float32 (FD in float32 is coarse): a VJP
    off by 10% in one element of 4096 still breaks <v, J u> = <J^T v, u>
    beyond float32's rounding of the sum, on every seed (at 5% it is near
    the band: caught on most seeds, a precision warning on the others)."""
    import torch

    class Tanh(torch.autograd.Function):
        @staticmethod
        def forward(x):
            if x.dtype != torch.float32:
                raise TypeError("float32 only")
            return torch.tanh(x)

        @staticmethod
        def setup_context(ctx, inputs, out):
            ctx.save_for_backward(out)
            ctx.save_for_forward(out)

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            gx = g * (1 - y * y)
            gx[17] *= 1.1
            return gx

        @staticmethod
        def jvp(ctx, t):
            (y,) = ctx.saved_tensors
            return (1 - y * y) * t

    x = torch.from_numpy(np.random.default_rng(0).standard_normal(4096).astype(np.float32))
    for seed in range(8):
        r = gv.check(Tanh.apply, x, seed=seed)
        assert "float32" in r.modes["FD"] and "float32 only" in r.modes["FD"] or r.oracle_dtype == "float32"
        assert not r.ok, str(r)
        f = r.by_kind(gv.Kind.MISMATCH)[0]
        assert f.input_index == (17,), (seed, str(r))


def test_dense_jacobian_directional():
    """A non-elementwise function (softmax): correct passes, a wrong rule fails."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((40, 8))

    def softmax(x):
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    def jvp(p, t):
        s = softmax(p[0])
        return s * (t[0] - (s * t[0]).sum(-1, keepdims=True))

    def vjp_ok(p, g):
        s = softmax(p[0])
        return (s * (g - (s * g).sum(-1, keepdims=True)),)

    def vjp_bad(p, g):  # forgets the normalisation term
        return (softmax(p[0]) * g,)

    assert gv.check(gv.Rule(softmax, jvp=jvp, vjp=vjp_ok), x).ok
    bad = gv.check(gv.Rule(softmax, jvp=jvp, vjp=vjp_bad), x)
    assert not bad.ok
    assert bad.by_kind(gv.Kind.MISMATCH)[0].pair == ("VJP", "FD")


def test_kinks_in_a_large_array_are_inconclusive_not_failures():
    import torch

    rng = np.random.default_rng(0)
    x = rng.standard_normal(20000)
    x[::1000] = 0.0  # twenty exact kinks
    x[5] = 1e-9  # and one a hair beside
    r = gv.check(torch.relu, torch.tensor(x))
    assert r.ok, str(r)
    (f,) = r.by_kind(gv.Kind.NONDIFFERENTIABLE)
    assert "at 20 element(s)" in f.message
    # A wrong rule is still caught among them, and located.
    rule = gv.Rule(
        lambda z: np.maximum(z, 0),
        jvp=lambda p, t: (p[0] > 0) * t[0],
        vjp=lambda p, g: ((p[0] > 0.5) * g,),  # wrong on (0, 0.5]
    )
    bad = gv.check(rule, x)
    (m,) = bad.by_kind(gv.Kind.MISMATCH)
    j = m.input_index[0]
    assert 0 < x[j] <= 0.5 and m.values["VJP"] == 0
    assert 1.0 < abs(m.values["FD"]) < 2.0  # ((J^T v)_j = v_j, a sign times a magnitude in (1, 2), times slope 1)


def test_nonfinite_outputs_in_a_large_array_are_skipped():
    rng = np.random.default_rng(1)
    x = np.abs(rng.standard_normal(5000))
    x[10] = 0.0  # log(0) = -inf
    rule = gv.Rule(np.log, jvp=lambda p, t: t[0] / p[0], vjp=lambda p, g: (g / p[0],))
    with np.errstate(divide="ignore", invalid="ignore"):
        r = gv.check(rule, x)
    assert r.ok, str(r)
    assert r.by_kind(gv.Kind.NONFINITE_OUTPUT) and r.by_kind(gv.Kind.NONFINITE_GRADIENT)[0].level == "warning"
    with np.errstate(divide="ignore", invalid="ignore"):
        wrong = gv.check(gv.Rule(np.log, jvp=lambda p, t: t[0] / p[0], vjp=lambda p, g: (-g / p[0],)), x)
    assert not wrong.ok


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_a_staircase_finer_than_the_step_is_inconclusive_not_a_mismatch(backend):
    """floor(K x) / K + x / 2 with stairs of 2^-26, finer than FD's first step
    (which reads their mean slope, 1.5) and wider than its finest: AD's 1/2
    is right between the stairs. Along every random direction finer steps
    move the estimate; the element localisation finds is no witness
    either, for the same reason, so nothing is convicted."""
    rng = np.random.default_rng(0)
    x = make(backend, rng.standard_normal(50))
    floor = __import__("torch").floor if backend == "torch" else __import__("jax").numpy.floor
    fn = lambda x: floor(x * 2.0**26) / 2.0**26 + 0.5 * x  # noqa: E731
    for seed in range(3):
        r = gv.check(fn, x, full=False, seed=seed)
        assert r.ok and r.inconclusive, str(r)
        assert not r.by_kind(gv.Kind.MISMATCH), str(r)


@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("k", [22, 24])
def test_a_staircase_of_fns_own_is_inconclusive_not_its_mean_slope(full, k):
    """floor(2^k x): integer values, stairs finer than FD's step. FD reads
    their mean slope, 2^k; the derivative is 0 between the stairs, and AD's 0
    is right. Values on a grid of 1, far coarser than float64 rounds them
    (a function that only rounds lies on u x its terms, and is read at its
    mean slope), are a staircase of fn's own: inconclusive, with the reason."""
    import torch

    x = torch.tensor(np.random.default_rng(0).standard_normal(50 if not full else 6))
    r = gv.check(lambda x: torch.floor(x * 2.0**k), x, full=full, seed=1)
    assert r.ok and r.inconclusive, str(r)
    assert not r.by_kind(gv.Kind.MISMATCH), str(r)


# -- errors with structure: two equal errors of opposite effect -----------------------
def _swapped_tanh(backend: str, i: int, j: int):
    """tanh whose reverse-mode rule swaps entries i and j of the gradient:
    (J^T v) is wrong by d at i and -d at j, so <J^T v, u> is wrong by
    d (u_i - u_j), which sign directions alone cancel whenever u_i = u_j."""
    if backend == "numpy":

        def vjp(p, g):
            d = g * (1 - np.tanh(p[0]) ** 2)
            d[[i, j]] = d[[j, i]]
            return (d,)

        return gv.Rule(np.tanh, vjp=vjp)
    import torch

    class SwappedTanh(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = torch.tanh(x)
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            d = (g * (1 - y * y)).clone()
            d[[i, j]] = d[[j, i]]
            return d

    return SwappedTanh.apply


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_a_gradient_with_two_entries_swapped_is_caught_on_every_seed(backend):
    x = make(backend, np.random.default_rng(1).standard_normal(10_000))
    fn = _swapped_tanh(backend, 10, 20)
    missed = [seed for seed in range(16) if gv.check(fn, x, seed=seed).ok]
    assert not missed, f"passed on seeds {missed}"


def test_a_forward_rule_that_reads_the_wrong_tangent_is_caught_on_every_seed():
    """y_i = x_i^2 except y_5 = x_5 x_7 + x_9: a JVP that takes u_9's
    coefficient from u_8 is wrong at output 5 by u_8 - u_9, which random
    signs alone zero for half the seeds."""

    def f(x):
        y = x * x
        y[5] = x[5] * x[7] + x[9]
        return y

    def jvp(p, t):
        (x,), (u,) = p, t
        out = 2 * x * u
        out[5] = x[7] * u[5] + x[5] * u[7] + u[8]
        return out

    def vjp(p, g):
        (x,) = p
        out = 2 * x * g
        out[5] = x[7] * g[5]
        out[7] = 2 * x[7] * g[7] + x[5] * g[5]
        out[9] = 2 * x[9] * g[9] + g[5]
        return (out,)

    x = np.random.default_rng(2).standard_normal(5_000)
    results = [gv.check(gv.Rule(f, jvp=jvp, vjp=vjp), x, seed=seed) for seed in range(16)]
    missed = [seed for seed, r in enumerate(results) if r.ok]
    assert not missed, f"passed on seeds {missed}"
    assert all(any(f.pair == ("JVP", "FD") for f in r.errors) for r in results)


def test_random_directions_are_signs_times_magnitudes_alike_on_every_backend():
    """Each element a sign times a magnitude in (1, 2), the same for one seed
    on numpy, torch and jax: signs fair, magnitudes spread over the interval."""
    import jax
    import torch

    from gradverify._check.probes import random_directions

    n = 100_000
    host = random_directions(np.random.default_rng(7), n)
    assert host.dtype == np.float64 and host.shape == (n,)
    magnitudes = np.abs(host)
    assert magnitudes.min() > 1.0 and magnitudes.max() < 2.0
    assert len(np.unique(magnitudes)) > 30_000  # (of 2^15)
    assert abs(np.mean(host > 0) - 0.5) < 0.01  # (6 sigma: 0.0095)
    assert abs(np.mean(magnitudes) - 1.5) < 0.01
    on_torch = random_directions(np.random.default_rng(7), n, like=torch.zeros(3, dtype=torch.float64))
    assert isinstance(on_torch, torch.Tensor) and np.array_equal(on_torch.numpy(), host)
    with jax.enable_x64(True):
        on_jax = random_directions(np.random.default_rng(7), n, like=jax.numpy.zeros(3))
        assert np.array_equal(np.asarray(on_jax), host)
    scaled = random_directions(np.random.default_rng(7), n, np.full(n, 0.25))
    assert np.array_equal(scaled, host * 0.25)


def _thin(x):
    """fn defined where x[0] and x[1] agree (to 1e-6): a random direction's
    stencil leaves that set at the oracle's step, a shorter one stays in it."""
    import torch

    if not torch.allclose(x[0], x[1], rtol=0.0, atol=1e-6):
        raise ValueError("x[0] and x[1] must agree")
    return torch.tanh(x)


def test_fn_that_raises_off_a_thin_set_is_stepped_shorter_not_failed():
    """Where fn raises at its stencil's points but not at x, FD steps shorter
    and says so; the check passes a correct fn on every seed, and still
    convicts a wrong rule on the same thin set."""
    import torch

    x = torch.linspace(-2.0, 2.0, 100, dtype=torch.float64)
    x[1] = x[0]
    shortened = 0
    for seed in range(8):
        r = gv.check(_thin, x, seed=seed)
        assert r.ok and not r.by_kind(gv.Kind.EXCEPTION), str(r)
        shortened += any("FD took a step" in n for n in r.notes)
    assert shortened >= 4  # (the oracle's own step leaves the set for most draws)

    class Wrong(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return _thin(x)

        @staticmethod
        def setup_context(ctx, inputs, out):
            ctx.save_for_backward(out)

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            gx = g * (1 - y * y)
            gx[50] *= -1
            return gx

    for seed in range(4):
        r = gv.check(Wrong.apply, x, seed=seed)
        assert not r.ok and r.by_kind(gv.Kind.MISMATCH)[0].input_index == (50,), str(r)


def test_fn_that_raises_at_every_step_says_the_exception():
    """fn defined only at x itself: every step leaves its domain, and the
    exception is said as it is (an error), not taken for a gradient."""
    import torch

    x = torch.linspace(-2.0, 2.0, 100, dtype=torch.float64)

    def exact(z):
        if not torch.equal(z, x):
            raise ValueError("only at x")
        return torch.tanh(z)

    r = gv.check(exact, x)
    assert not r.ok and r.by_kind(gv.Kind.EXCEPTION), str(r)
    assert "only at x" in r.by_kind(gv.Kind.EXCEPTION)[0].message


def _flat_tail_rule(n: int, flat: np.ndarray, vjp_scale: float = 1.0, tail_scale: float = 1.0):
    """A numpy gv.Rule whose ``flat`` elements are (1 + 1e-20 x) - 1: exactly
    0 as computed, while the rules give the real slope 1e-20 - below what
    fn's rounding lets FD see, so FD decides nothing there; the others are
    1e-18 sin(x), decided. The VJP is the JVP's transpose times
    ``tail_scale`` on the flat elements and ``vjp_scale`` on the others."""
    slope = np.where(flat, 1e-20, 0.0)

    def fn(x):
        return np.where(flat, (1.0 + 1e-20 * x) - 1.0, 1e-18 * np.sin(x))

    def d(x):
        return np.where(flat, slope, 1e-18 * np.cos(x))

    return gv.Rule(
        fn,
        jvp=lambda p, t: d(p[0]) * t[0],
        vjp=lambda p, g: (d(p[0]) * g * np.where(flat, tail_scale, vjp_scale),),
    )


@pytest.mark.parametrize("path", ["host", "device"])
def test_where_fd_decides_nothing_a_disagreement_of_the_modes_is_never_one_with_fd(path, monkeypatch):
    """jax's gelu in float32 at x ~ -7 is exactly -0 as computed: FD decides
    no element. Put in FD's place, the JVP turned the VJP-vs-FD projection
    into the adjoint identity, and jax's float64 JVP and VJP, which round
    1 - tanh^2 there some percent apart, were reported as the VJP against
    FD. FD saw nothing: what the check says of them is the two modes'
    (JVP vs VJP); on the device path too (CPU_IN_JAX)."""
    jax = pytest.importorskip("jax")
    import gradverify.backends.jax

    monkeypatch.setattr(gradverify.backends.jax, "CPU_IN_JAX", path == "device")
    gelu = jax.nn.gelu
    x = jax.numpy.asarray((-7.0 + np.random.default_rng(1).uniform(-0.01, 0.01, 300)).astype(np.float32))
    rule = gv.Rule(gelu, jvp=lambda p, t: jax.jvp(gelu, p, t)[1], vjp=lambda p, g: jax.vjp(gelu, p[0])[1](g))
    r = gv.check(rule, x)
    assert r.strategy.startswith("directional") and r.by_kind(gv.Kind.FD_UNRELIABLE), str(r)
    assert all(f.pair == ("JVP", "VJP") for f in r.by_kind(gv.Kind.MISMATCH)), str(r)
    (nothing,) = r.by_kind(gv.Kind.NOTHING_COMPARED)
    assert "only forward and reverse mode were compared" in nothing.message
    # (the float32 runs off their float64 ones: not said to be confirmed by FD, which decided nothing)
    for f in r.by_kind(gv.Kind.PRECISION):
        assert "finite differences decided no element" in f.message and "agrees with finite" not in f.message


@pytest.mark.parametrize("where", ["every", "half"])
def test_modes_that_disagree_only_where_fd_decides_nothing_are_a_warning_not_a_mismatch_with_fd(where):
    """The VJP 1.5x the JVP's transpose on the elements FD cannot decide:
    the adjoint identity says the two disagree there, located; FD saw
    nothing there, so it is no 'VJP vs FD' error, and as for a full
    Jacobian's element FD cannot resolve, a warning. The same rules without
    the factor say nothing of it."""
    n = 300
    flat = np.ones(n, bool) if where == "every" else np.arange(n) % 2 == 0
    x = np.random.default_rng(0).uniform(0.5, 1.5, n)
    r = gv.check(_flat_tail_rule(n, flat, tail_scale=1.5), x)
    assert r.ok and r.strategy.startswith("directional"), str(r)
    (f,) = r.by_kind(gv.Kind.MISMATCH)
    assert f.pair == ("JVP", "VJP") and f.level == gv.Level.WARNING and "cannot decide" in f.message, str(r)
    assert flat[f.input_index], str(r)
    # located by the two modes' values there (FD decides nothing there), 1.5x apart
    assert set(f.values) == {"JVP", "VJP"} and "needs no FD" in f.bound_reason, str(r)
    assert f.values["VJP"] == pytest.approx(1.5 * f.values["JVP"], rel=1e-9)
    assert r.by_kind(gv.Kind.FD_UNRELIABLE)
    same = gv.check(_flat_tail_rule(n, flat), x)
    assert same.ok and not same.by_kind(gv.Kind.MISMATCH), str(same)


@pytest.mark.parametrize(("off", "pair"), [(1e-3, ("VJP", "FD")), (1e-9, ("JVP", "VJP"))])
def test_a_reverse_rule_wrong_where_fd_decides_fails_beside_undecided_elements(off, pair):
    """Beside elements FD cannot decide, a VJP off on the elements it
    decides: at 1e-3 relative FD convicts it (the projection restricted to
    those elements); at 1e-9, below what FD resolves, the adjoint identity
    restricted to them still breaks. Either is an error located there (not
    the warning of a disagreement FD could not decide)."""
    n = 300
    flat = np.arange(n) % 2 == 0
    x = np.random.default_rng(0).uniform(0.5, 1.5, n)
    r = gv.check(_flat_tail_rule(n, flat, vjp_scale=1 + off), x)
    assert not r.ok and r.by_kind(gv.Kind.FD_UNRELIABLE), str(r)
    (f,) = r.errors
    assert f.pair == pair and not flat[f.input_index] and f.error > f.bound, str(r)
    if pair == ("JVP", "VJP"):
        assert f.values["VJP"] == pytest.approx((1 + off) * f.values["JVP"], rel=1e-12), str(r)
        # and beside a disagreement on the undecided elements too, which is
        # made worst of three directions on this seed: every failing pair is
        # restricted, not the worst alone
        both = gv.check(_flat_tail_rule(n, flat, vjp_scale=1 + off, tail_scale=1.5), x, directions=3, seed=2)
        assert not both.ok and both.errors[0].pair == pair, str(both)


def _sine_with_a_jump(backend: str, factor: float):
    """sin(x), but output 0 is floor(x_0) (x_0 = 1: a jump, which FD cannot
    decide), with a reverse rule only: cos(x) times ``factor`` (0 at the
    jump), as a numpy gv.Rule or a torch Function with its backward alone."""
    if backend == "numpy":

        def fn(x):
            y = np.sin(x)
            y[0] = np.floor(x[0])
            return y

        def vjp(p, g):
            d = np.cos(p[0]) * factor
            d[0] = 0.0
            return (d * g,)

        return gv.Rule(fn, vjp=vjp)
    import torch

    class Fn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return torch.cat([torch.floor(x[:1]), torch.sin(x[1:])])

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            d = torch.cos(x) * factor
            d[0] = 0.0
            return d * g

    return Fn.apply


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_a_reverse_only_rule_is_compared_beside_an_element_fd_cannot_decide(backend):
    """Without forward mode nothing can stand in for FD at an undecided
    element, and the reverse mode's projections were skipped whole: one jump
    among 300 outputs left a reverse rule 10% off unchecked, yet 'VJP:
    checked'. The projection restricted to the elements FD decided compares
    it, and locates it; the right rule passes."""
    x = np.random.default_rng(0).uniform(0.5, 1.5, 300)
    x[0] = 1.0
    arg = make(backend, x)
    r = gv.check(_sine_with_a_jump(backend, 1.1), arg)
    assert not r.ok and r.by_kind(gv.Kind.DISCONTINUITY), str(r)
    (f,) = r.errors
    assert f.pair == ("VJP", "FD") and f.input_index != (0,), str(r)
    assert f.values["VJP"] == pytest.approx(1.1 * f.values["FD"], rel=1e-3), str(r)
    right = gv.check(_sine_with_a_jump(backend, 1.0), arg)
    assert right.ok, str(right)


@pytest.mark.parametrize("segments", [1, 3])
def test_step_scales_and_the_mask_below_every_step_take_abs_x_once_alike_on_every_path(segments):
    """probes._step_scales with ``finest``: each element's max(|x_j|, its
    argument's floor), and the mask of inputs nearer 0 than ``finest`` but
    not 0 - the same as below_steps' and as the scales alone, on numpy and
    on torch, one argument or several."""
    import torch

    from gradverify._check.probes import _step_scales

    rng = np.random.default_rng(3)
    parts = [rng.standard_normal(50 + 7 * k) * 10.0 ** rng.integers(-5, 5, 50 + 7 * k) for k in range(segments)]
    for p in parts:
        p[:6] = [0.0, -0.0, 1e-310, -5e-324, 1e-300, -3e-320]
    floors = [0.5 + k for k in range(segments)]
    finest = 1e-305
    x = np.concatenate(parts)
    want_scale = np.concatenate([np.maximum(np.abs(p), f) for p, f in zip(parts, floors)])
    want_below = (np.abs(x) > 0) & (np.abs(x) < finest)
    assert want_below.sum() == 3 * segments
    for like in (np.asarray, torch.tensor):
        segs = [like(p.copy()) for p in parts]
        scale, below = _step_scales(segs, floors, finest)
        assert np.array_equal(np.asarray(scale), want_scale) and np.array_equal(np.asarray(below), want_below)
        assert np.array_equal(np.asarray(_step_scales(segs, floors)), want_scale)
        assert all(np.array_equal(np.asarray(s), p) for s, p in zip(segs, parts))  # (the arguments untouched)
