"""The fused normalization rules: the same values, JVPs and VJPs as the
reference on torch, verified by gv.check (numpy through ops.norm_rule),
keeping no more for backward than torch's native kernels, working under
torch.func and double backward, and caught when wrong on every backend."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv
from gradverify import ops

from .._helpers import make, precise
from ._helpers import CASES, data, random_like, running, tt, w2


@pytest.mark.parametrize("case", sorted(CASES))
def test_torch_fused_jvp_and_vjp_equal_the_reference(case):
    import torch
    from torch.func import jvp, vjp

    x, w, b = data((3, 4, 5))
    fn = CASES[case][0]
    args = (tt(x), tt(w), tt(b))
    tangents = tuple(tt(random_like(a.shape, k)) for k, a in enumerate(args))
    outs = {}
    for impl in ("reference", "fused"):
        f = lambda x, w, b, impl=impl: fn(x, w, b, impl)  # noqa: E731
        y, ty = jvp(f, args, tangents)
        _, pullback = vjp(f, *args)
        g = tt(random_like(tuple(y.shape), 9))
        outs[impl] = (y, ty, pullback(g))
    (y0, t0, c0), (y1, t1, c1) = outs["reference"], outs["fused"]
    torch.testing.assert_close(y1, y0, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(t1, t0, rtol=1e-11, atol=1e-11)
    for a, b_ in zip(c1, c0):
        torch.testing.assert_close(a, b_, rtol=1e-11, atol=1e-11)


# kind, the differentiable parameters (beside x), and the layer's arguments
# built from x and those parameters (``running`` builds in x's backend).
NUMPY_RULES = {
    "layer_norm": ("layer_norm", lambda x, w, b: (w2(x), b2(x)), lambda x, p: (x.shape[-1:], *p)),
    "layer_norm_plain": ("layer_norm", lambda x, w, b: (), lambda x, p: (x.shape[1:],)),
    "rms_norm": ("rms_norm", lambda x, w, b: (w2(x),), lambda x, p: (x.shape[-1:], *p)),
    "group_norm": ("group_norm", lambda x, w, b: (w, b), lambda x, p: (2, *p)),
    "group_norm_bias_only": ("group_norm", lambda x, w, b: (b,), lambda x, p: (2, None, *p)),
    "instance_norm": ("instance_norm", lambda x, w, b: (w, b), lambda x, p: (None, None, *p)),
    "batch_norm_train": ("batch_norm", lambda x, w, b: (w, b), lambda x, p: (None, None, *p, True)),
    "batch_norm_eval": ("batch_norm", lambda x, w, b: (w,), lambda x, p: (*running(x), *p)),
}


def b2(x):
    return 0.3 - 0.2 * np.arange(x.shape[-1])


@pytest.mark.parametrize("case", sorted(NUMPY_RULES))
def test_numpy_rules_verified_and_equal_torch_autograd(case):
    import torch

    x, w, b = data((3, 4, 5))
    kind, params_of, args_of = NUMPY_RULES[case]
    params = params_of(x, w, b)
    rule = ops.norm_rule(kind, x, *args_of(x, params))
    assert isinstance(rule, gv.Rule)
    r = gv.check(rule, x, *params)
    assert r.ok, str(r)
    # the rule's VJP equals torch autograd's through the reference
    g = random_like(x.shape, 3)
    got = rule.vjp((x, *params), g)
    xt = tt(x).requires_grad_()
    pts = [tt(p).requires_grad_() for p in params]
    y = getattr(ops, kind)(xt, *args_of(xt, pts))
    want = torch.autograd.grad(y, [xt, *pts], tt(g))
    assert len(got) == len(want)
    for a, b_ in zip(got, want):
        np.testing.assert_allclose(a, b_.numpy(), rtol=1e-11, atol=1e-12)


def _saved(f):
    import torch

    storages = {}

    def pack(t):
        s = t.untyped_storage()
        storages[(s.data_ptr(), s.nbytes())] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        f()
    return sum(storages.values())


@pytest.mark.parametrize("case", ["layer_norm_affine", "group_norm", "batch_norm_train", "instance_norm", "rms_norm"])
def test_torch_fused_saves_no_more_than_native(case):
    import torch.nn.functional as F

    x, w, b = data((8, 4, 64), small_rows=False)
    mine, theirs = CASES[case]
    xt, wt, bt = (tt(a).float().requires_grad_() for a in (x, w, b))
    fused = _saved(lambda: mine(xt, wt, bt, "fused"))
    native = _saved(lambda: theirs(F, xt, wt, bt))
    assert fused <= native, (fused, native)
    # and it is xhat: one x-sized tensor plus per-group and per-channel vectors
    assert xt.numel() * 4 <= fused < xt.numel() * 4 * 1.2


def test_torch_fused_double_backward_and_torch_func():
    import torch
    from torch.func import hessian, jacfwd, jacrev, vmap

    x, w, b = data((2, 4, 3))
    xt, wt, bt = tt(x), tt(w), tt(b)

    def f(impl):
        return lambda x: ops.group_norm(x, 2, wt, bt, impl=impl)

    for transform in (jacrev, jacfwd):
        torch.testing.assert_close(transform(f("fused"))(xt), transform(f("reference"))(xt))
    torch.testing.assert_close(vmap(f("fused"))(xt[:, None]), vmap(f("reference"))(xt[:, None]))
    u = tt(random_like(x.shape, 1))
    h = {impl: hessian(lambda x, impl=impl: (f(impl)(x) * u).sum())(xt) for impl in ("reference", "fused")}
    torch.testing.assert_close(h["fused"], h["reference"])
    # create_graph through the fused backward (the differentiable path)
    xg = xt.clone().requires_grad_()
    (gx,) = torch.autograd.grad((f("fused")(xg) * u).sum(), xg, create_graph=True)
    (ggx,) = torch.autograd.grad((gx * u).sum(), xg)
    xr = xt.clone().requires_grad_()
    (gr,) = torch.autograd.grad((f("reference")(xr) * u).sum(), xr, create_graph=True)
    (ggr,) = torch.autograd.grad((gr * u).sum(), xr)
    torch.testing.assert_close(gx, gr)
    torch.testing.assert_close(ggx, ggr)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_low_precision_fused_keeps_float32_statistics(dtype):
    import torch
    import torch.nn.functional as F

    x, w, b = data((3, 4, 5))
    low = getattr(torch, dtype)
    xt = tt(x).to(low).requires_grad_()
    y = ops.layer_norm(xt, (5,), impl="fused")
    assert y.dtype == low
    torch.testing.assert_close(y, F.layer_norm(xt.float(), (5,)).to(low), rtol=1e-2, atol=1e-2)
    g = tt(random_like(x.shape, 2)).to(low)
    (gx,) = torch.autograd.grad(y, xt, g)
    xf = xt.detach().float().requires_grad_()
    (want,) = torch.autograd.grad(F.layer_norm(xf, (5,)), xf, g.float())
    assert gx.dtype == low
    torch.testing.assert_close(gx.float(), want, rtol=2e-2, atol=2e-2)


def test_fused_running_statistics_match_torch():
    import torch
    import torch.nn.functional as F

    stats = {k: (torch.zeros(4, dtype=torch.float64), torch.ones(4, dtype=torch.float64)) for k in "fn"}
    for step in range(4):
        x, w, b = data((3, 4, 2), seed=step)
        xt = tt(x).requires_grad_()
        y = ops.batch_norm(xt, *stats["f"], tt(w), tt(b), training=True, momentum=0.3, impl="fused")
        want = F.batch_norm(tt(x), *stats["n"], tt(w), tt(b), training=True, momentum=0.3)
        torch.testing.assert_close(y.detach(), want)
        y.sum().backward()  # statistics updated without touching the graph
    for a, b_ in zip(stats["f"], stats["n"]):
        torch.testing.assert_close(a, b_)
    x, w, b = data((3, 4, 2), seed=7)
    with precise("jax"):
        xj = make("jax", x)
        _, m, v = ops.instance_norm(
            xj, make("jax", np.zeros(4)), make("jax", np.ones(4)), impl="fused", return_stats=True
        )
    rm, rv = torch.zeros(4, dtype=torch.float64), torch.ones(4, dtype=torch.float64)
    F.instance_norm(tt(x), rm, rv)
    np.testing.assert_allclose(np.asarray(m), rm.numpy(), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(v), rv.numpy(), rtol=1e-12)


def test_norm_rule_misuse():
    x = np.ones((2, 4, 3))
    with pytest.raises(gv.ArgumentValueError, match="one of"):
        ops.norm_rule("layernorm", x, (3,))
    import torch

    with pytest.raises(gv.ArgumentTypeError, match="impl='fused'"):
        ops.norm_rule("layer_norm", torch.ones(2, 3), (3,))


def test_rounding_in_a_near_degenerate_slice_is_a_warning_not_a_failure():
    """Found by `gradverify check all`: batch norm over 2 values per channel,
    one channel of variance near eps. The Jacobian there is rstd (P - xhat
    xhat^T / 2), a cancellation of terms 300 times its size, so JVP and VJP
    differ by 2e-13 - beyond the AD rounding model, far below what finite
    differences resolve (6e-9), and both agree with FD. Said as a warning."""
    x = np.array([[[-0.5], [-2.05], [-0.5], [-0.5]], [[0.5], [-1.975], [0.5], [0.5]]])
    w, b = np.full(4, 1.25), np.zeros(4)
    from gradverify import strategies as gst

    r = gv.check(gst.normalization_call("batch_norm", "fused", backend="numpy"), x, w, b)
    assert r.ok, str(r)
    assert [f.kind for f in r.warnings] == [gv.Kind.MISMATCH] and "resolution" in r.warnings[0].message
