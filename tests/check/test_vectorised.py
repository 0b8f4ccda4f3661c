"""A full Jacobian's columns and rows come from one vectorised (vmap) call per
mode and precision where fn allows it. What the verdict rests on does not
change: fn that cannot be vectorised is asked one column at a time, and a
failure is always reported from the plain calls."""

from __future__ import annotations

import pytest

import gradverify as gv

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")


def _batched(t: torch.Tensor) -> bool:
    """Whether t is a slice of a vmap batch (torch.func's, or the legacy one
    ``autograd.grad(is_grads_batched=True)`` uses)."""
    f = torch._C._functorch
    return f.is_batchedtensor(t) or f.is_legacy_batchedtensor(t) or f.is_functorch_wrapped_tensor(t)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_torch_full_jacobian_in_one_call_per_mode_and_precision(dtype):
    x = torch.linspace(-2, 2, 7, dtype=dtype)
    b = torch.linspace(0.3, 1.1, 7, dtype=dtype)
    r = gv.check(lambda x, b: torch.tanh(x * b), x, b)
    assert r.ok, str(r)
    assert r.strategy == "full Jacobian (7x14)"
    calls = 2 if dtype == torch.float32 else 1  # (the float64 tier: one more of each)
    assert r.evaluations["jvp"] == calls and r.evaluations["vjp"] == calls


def test_jax_full_jacobian_in_one_call_per_mode():
    with jax.enable_x64(True):
        x = jnp.linspace(-2.0, 2.0, 6)
        r = gv.check(lambda x: jnp.sin(x) * jnp.sum(x), x)
    assert r.ok, str(r)
    assert r.evaluations["jvp"] == 1 and r.evaluations["vjp"] == 1


class _OldStyleSquare(torch.autograd.Function):
    """forward(ctx, ...): torch.func cannot vectorise it."""

    wrong_at = None

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        d = 2 * x
        if _OldStyleSquare.wrong_at is not None:
            d = d.clone()
            d[_OldStyleSquare.wrong_at] *= 1.01
        return g * d


@pytest.mark.parametrize("wrong_at", [None, 3])
def test_a_function_torch_cannot_vectorise_is_asked_one_column_at_a_time(wrong_at):
    _OldStyleSquare.wrong_at = wrong_at
    try:
        x = torch.linspace(-1, 1.5, 6, dtype=torch.float64)
        r = gv.check(_OldStyleSquare.apply, x)
    finally:
        _OldStyleSquare.wrong_at = None
    if wrong_at is None:
        assert r.ok, str(r)
    else:
        assert not r.ok
        assert r.errors[0].input_index == (wrong_at,)


def test_fn_that_refuses_vmap_is_checked_plainly():
    def fn(x):
        if _batched(x):
            raise ValueError("no vmap here")
        return torch.sin(x) * x

    x = torch.linspace(-1, 1, 5, dtype=torch.float64)
    r = gv.check(fn, x)
    assert r.ok, str(r)
    assert r.evaluations["jvp"] == 1 + 5  # the attempt, then one per column
    assert r.evaluations["vjp"] == 1  # (reverse mode runs fn itself plainly: only its backward pass is vectorised)


def _exp(scale):
    """exp as a vectorisable autograd.Function (vmap rule generated) whose
    backward multiplies the right derivative by ``scale(g, y)``."""

    class Exp(torch.autograd.Function):
        generate_vmap_rule = True

        @staticmethod
        def forward(x):
            return x.exp()

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(output)
            ctx.save_for_forward(output)

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return g * y * scale(g, y)

        @staticmethod
        def jvp(ctx, t):
            (y,) = ctx.saved_tensors
            return t * y

    return Exp


def _element_2_off(g, y):
    out = torch.ones_like(y)
    out[..., 2] = 1.01
    return out


# A right rule that goes wrong only under vmap (the plain calls decide), and
# one 1% wrong at element 2 everywhere.
_WrongOnlyWhenBatched = _exp(lambda g, y: 2.0 if _batched(g) else 1.0)
_WrongBackward = _exp(_element_2_off)


class _SetupContextSquare(torch.autograd.Function):
    """setup_context style, but no vmap rule: torch.func's vmap refuses it."""

    @staticmethod
    def forward(x):
        return x * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 2 * x

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return t * 2 * x


class _OwnVmapSquare(_SetupContextSquare):
    @staticmethod
    def vmap(info, in_dims, x):
        return _OwnVmapSquare.apply(x), in_dims[0]


def _square_helper(x):
    return x * x


@pytest.mark.parametrize(
    ("fn", "vectorises"),
    [
        (_OldStyleSquare.apply, False),  # forward(ctx, ...)
        (_SetupContextSquare.apply, False),  # no vmap rule
        (_exp(lambda g, y: 1.0).apply, True),  # generate_vmap_rule = True
        (_OwnVmapSquare.apply, True),  # a vmap staticmethod of its own
        (_square_helper, True),  # a plain function: vmap may run it
        (_OldStyleSquare.forward, True),  # (not apply: nothing is known)
    ],
)
def test_torch_knows_which_functions_its_vmap_refuses(fn, vectorises):
    from gradverify.backends import backend_of

    backend = backend_of((torch.zeros(2),))
    assert backend.vectorises(fn) is vectorises
    if not vectorises:  # (torch itself agrees)
        with pytest.raises(RuntimeError):
            torch.func.vmap(fn)(torch.ones(3, 2, dtype=torch.float64))
    elif fn is not _OldStyleSquare.forward:
        torch.func.vmap(fn)(torch.ones(3, 2, dtype=torch.float64))


@pytest.mark.parametrize("function", [_OldStyleSquare, _SetupContextSquare])
def test_a_function_vmap_refuses_is_not_put_to_vmap(function):
    """No vectorised call is tried for fn's points or its JVP (each would
    raise): the columns' JVPs are asked one at a time from the start, and
    the verdict is the same as vectorise=False's."""
    x = torch.linspace(-1, 1.5, 6, dtype=torch.float64)
    r = gv.check(function.apply, x)
    plain = gv.check(function.apply, x, vectorise=False)
    assert r.ok, str(r)
    forward_rule = function is _SetupContextSquare
    assert r.evaluations["jvp"] == (6 if forward_rule else 1)  # (old style: one call says it has no JVP)
    assert r.evaluations["primal"] == plain.evaluations["primal"]
    assert r.modes == plain.modes and r.worst_ratio == plain.worst_ratio


def test_a_function_in_a_pytree_is_judged_by_its_own_vmap_support():
    """fn seen through a view (a dict argument) is still the Function
    inside: no vectorised call of it is tried."""

    def fn(d):
        return _SetupContextSquare.apply(d["x"])

    x = {"x": torch.linspace(-1, 1.5, 6, dtype=torch.float64)}
    r = gv.check(fn, x)
    assert r.ok, str(r)
    assert r.evaluations["jvp"] == 1 + 6  # (a plain function: one attempt, refused, then one per column)


def test_a_full_jacobian_asked_plainly_judges_its_columns_in_one_pass(monkeypatch):
    """fn's points one call each, the rounding model's arithmetic on every
    column at once: no column is worked out on its own where the model
    decides them all."""
    import importlib

    from gradverify._check import fd

    reference_module = importlib.import_module("gradverify._check.fd.reference")

    single = []
    original = reference_module.model_reference
    monkeypatch.setattr(reference_module, "model_reference", lambda *a, **k: single.append(1) or original(*a, **k))
    batched = []
    original_many = fd.model_rows
    monkeypatch.setattr(fd, "model_rows", lambda *a, **k: batched.append(1) or original_many(*a, **k))
    x = torch.linspace(-1, 1.5, 6, dtype=torch.float64)
    r = gv.check(_OldStyleSquare.apply, x)
    assert r.ok, str(r)
    assert (len(batched), len(single)) == (1, 0)


@pytest.mark.parametrize("finite", [True, False])
def test_a_full_jacobians_columns_references_are_each_columns_own(monkeypatch, finite):
    """The columns' references, those the rounding model decides worked out
    together, are bit for bit what the oracle gives a column alone (value,
    error, status, and the measured reference behind a modelled one), on
    arguments of many scales (columns with many c) and on an output with
    NaN elements (where the model holds for no column)."""
    from gradverify._check import oracle

    first_order = oracle.Oracle.first_order
    compared = []

    def checked(self, jvps, bound):
        first_order(self, jvps, bound)
        for b, (u, c) in enumerate(zip(self.probes.us, self.probes.cs)):
            ref = self.refs[b]
            alone = self.fd(u, bound(b) * c, c, along=True, model_first=True, ad=jvps[b], point=self.terms(c, True))
            modelled = ref.measure is not None
            assert (alone.measure is not None) == modelled, b  # (the model holds for both, or neither)
            for name in ("value", "err", "status"):
                assert getattr(ref, name).tobytes() == getattr(alone, name).tobytes(), (b, name)
            assert (ref.typical, ref.all_smooth, ref.shift_terms) == (
                alone.typical,
                alone.all_smooth,
                alone.shift_terms,
            )
            if modelled:
                measured, again = ref.measure(), alone.measure()
                assert measured.value.tobytes() == again.value.tobytes()
                assert measured.err.tobytes() == again.err.tobytes()
            compared.append((c, modelled))

    monkeypatch.setattr(oracle.Oracle, "first_order", checked)
    x = torch.tensor([1e-3, 0.37, 7.5, -3.0], dtype=torch.float64)
    y = torch.tensor([2e4, -1e3, 3e4, 1.0], dtype=torch.float64)
    fn = (lambda x, y: torch.tanh(x) * y.sum()) if finite else (lambda x, y: torch.log(x) * y)
    assert gv.check(fn, x, y).ok
    assert len(compared) == 8
    modelled = {c for c, m in compared if m}
    assert len(modelled) >= 3 if finite else not modelled


def test_a_failure_under_vmap_is_rechecked_with_plain_calls():
    x = torch.linspace(-1, 1, 5, dtype=torch.float64)
    r = gv.check(_WrongOnlyWhenBatched.apply, x)
    assert r.ok, str(r)
    assert r.evaluations["vjp"] == 1 + 5  # the vectorised call, then every row plainly


def test_vectorise_false_asks_one_column_and_row_at_a_time():
    x = torch.linspace(-2, 2, 6, dtype=torch.float64)
    on = gv.check(torch.sin, x)
    off = gv.check(torch.sin, x, vectorise=False)
    assert on.ok and off.ok
    assert (on.evaluations["jvp"], on.evaluations["vjp"]) == (1, 1)
    assert (off.evaluations["jvp"], off.evaluations["vjp"]) == (6, 6)
    assert "vectorise=False" in off.reproduce and "vectorise" not in on.reproduce


def test_vectorise_must_be_a_bool():
    with pytest.raises(gv.ArgumentValueError, match="vectorise"):
        gv.check(torch.sin, torch.ones(3, dtype=torch.float64), vectorise="yes")


def _stencil_evaluations(fn, *args, **options):
    """The check with fn's stencil points vectorised and without."""
    on = gv.check(fn, *args, **options)
    off = gv.check(fn, *args, vectorise=False, **options)
    return on, off


def test_torch_stencil_points_in_one_call_give_the_plain_verdict_bit_for_bit():
    calls = {"batched": 0, "plain": 0}

    def fn(x, b):
        calls["batched" if _batched(x) else "plain"] += 1
        return torch.tanh(x * b)

    x = torch.linspace(-2, 2, 7, dtype=torch.float64)
    b = torch.linspace(0.3, 1.1, 7, dtype=torch.float64)
    on, off = _stencil_evaluations(fn, x, b)
    assert on.ok and off.ok, str(on)
    # 14 columns of 6 points each: one call beside the plain ones at the point
    assert on.evaluations["primal"] < 8 <= 6 * 14 <= off.evaluations["primal"]
    assert calls["batched"] >= 2  # (the vmapped stencils, and the vmapped JVP)
    assert on.worst_ratio == off.worst_ratio  # the same F values, bit for bit


def test_the_kink_ladder_evaluates_all_its_levels_in_one_call():
    """relu at its kink: the flagged column goes down the ladder; its
    levels come from one vectorised call, and the verdict is the plain one's
    bit for bit."""
    calls = {"batched": 0, "plain": 0}

    def fn(x):
        calls["batched" if _batched(x) else "plain"] += 1
        return torch.relu(x)

    x = torch.tensor([0.0, -0.7, 1.3], dtype=torch.float64)
    on = gv.check(fn, x)
    batched = calls["batched"]
    off = gv.check(fn, x, vectorise=False)
    assert on.ok and off.ok and on.by_kind(gv.Kind.NONDIFFERENTIABLE), str(on)
    assert on.worst_ratio == off.worst_ratio and on.findings == off.findings
    # plainly: 8 points a level, several levels; vectorised: a call for the stencils, one for the ladder
    ladder_points = off.evaluations["primal"] - 6 * 3
    assert ladder_points >= 16 and on.evaluations["primal"] < 8 and batched <= 5, (on.evaluations, batched)


def test_the_finer_steps_levels_come_from_few_vectorised_calls(monkeypatch):
    """normalize with a row far below the step (found by the naive suite):
    the finer-step excuse takes that column down several levels of 8 points
    each; the levels come a few to a vectorised call, and the verdict is the
    plain one's bit for bit."""
    from gradverify._check import levels

    seen = {"levels": 0}
    at_step = levels.at_step

    def counted(*args, **kwargs):
        seen["levels"] += 1
        return at_step(*args, **kwargs)

    monkeypatch.setattr(levels, "at_step", counted)

    def fn(x):
        return torch.nn.functional.normalize(x, dim=-1)

    x = torch.tensor([[5.0, 9.0], [9.0, 9.0], [1.1386441650594544e-09, 8.189291950261085e-22]], dtype=torch.float64)
    on = gv.check(fn, x)
    ran, seen["levels"] = seen["levels"], 0
    off = gv.check(fn, x, vectorise=False)
    assert ran == seen["levels"] >= 2  # (the same levels either way)
    assert on.ok and off.ok, str(on)
    assert on.worst_ratio == off.worst_ratio and on.findings == off.findings
    # plainly 8 points a level; vectorised: the stencils, the levels, the point and its repeat
    assert on.evaluations["primal"] < 8 * ran, on.evaluations


def test_a_vectorised_fn_that_rounds_otherwise_is_evaluated_point_by_point():
    """fn under vmap is off by 1e-13 (a batched kernel that rounds otherwise):
    its value at the point itself is not fn's own there, and the stencils are
    evaluated one point at a time."""

    def fn(x):
        return torch.sin(x) + (1e-13 if _batched(x) else 0.0)

    x = torch.linspace(-1, 1, 5, dtype=torch.float64)
    on, off = _stencil_evaluations(fn, x)
    assert on.ok, str(on)
    assert on.evaluations["primal"] >= 6 * 5
    assert on.worst_ratio == off.worst_ratio


def test_a_failure_with_vectorised_stencils_is_reported_from_plain_evaluations():
    x = torch.linspace(-1, 1, 5, dtype=torch.float64)
    r = gv.check(_WrongBackward.apply, x)
    assert not r.ok
    assert {f.input_index for f in r.errors if f.input_index is not None} == {(2,)}, str(r)
    assert r.evaluations["primal"] >= 6 * 5  # the rerun evaluates every point on its own


@pytest.mark.parametrize("session", [True, False])
def test_jax_stencil_points_in_one_call(session):
    """Compiled (jax.vmap under jit, as a check on small arrays is), and eager
    under jax.disable_jit()."""

    def fn(x):
        return jnp.sin(x) * jnp.sum(x)

    with jax.enable_x64(True):
        x = jnp.linspace(-2.0, 2.0, 6)
        with gv.compiling() if session else jax.disable_jit():
            on, off = _stencil_evaluations(fn, x)
    assert on.ok and off.ok, str(on)
    assert on.evaluations["primal"] < 8 <= 6 * 6 <= off.evaluations["primal"]
    assert on.worst_ratio == off.worst_ratio


def test_the_stacked_stencil_points_are_bit_for_bit_the_points_made_one_at_a_time():
    """A full Jacobian's stencil is written as one array of points; each row
    must be the point ``axpy`` (along a direction) or ``shifted`` (along e_j)
    makes alone, bit for bit: signed zeros, subnormals, huge and tiny
    values, steps of either sign and a direction in float32 (its step
    rounds in float32, as a Python float times a float32 array does)."""
    import numpy as np

    from gradverify._check import xp as _xp
    from gradverify._check.oracle import _rows_along, _rows_shifted

    rng = np.random.default_rng(3)
    x = np.concatenate([rng.standard_normal(20) * 10.0 ** rng.integers(-300, 300, 20), [0.0, -0.0, 5e-324, -5e-324]])
    steps = [[1e-3, -1e-3, 2.5e-4, -7.0], [0.1, -0.1 / 3, 1e-300]]
    ws = [rng.standard_normal(x.size), np.where(rng.random(x.size) < 0.5, 0.0, -0.0)]
    ws.append((rng.standard_normal(x.size)).astype(np.float32))
    steps.append([1 / 3, -1e-5])

    def bits(a):
        return np.asarray(a, dtype=np.float64).view(np.int64)

    rows = np.empty((sum(map(len, steps)), x.size))
    _rows_along(x, ws, steps)(rows)
    alone = [_xp.axpy(x, t, w) for w, ts in zip(ws, steps) for t in ts]
    assert np.array_equal(bits(rows), bits(np.stack(alone)))

    deltas = [1e-8, -1e-8, 3.0, -0.0]
    for j in (0, 21, x.size - 1):
        rows = np.empty((len(deltas), x.size))
        _rows_shifted(x, j, deltas)(rows)
        alone = [_xp.shifted(x, j, d) for d in deltas]
        assert np.array_equal(bits(rows), bits(np.stack(alone)))
