"""bias_act: the numpy rule matches torch's reference; bias shapes, in-place
ops and what the fused torch rules save (bits, the output or their inputs),
packed and read back under torch.func and forward mode; a caller's own
activation is fused by its own rule."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv
from gradverify import ops

from .._helpers import make
from ._helpers import ACTIVATION_NAMES, fused_fn, inputs


@pytest.mark.parametrize("name", ACTIVATION_NAMES)
def test_numpy_rule_matches_torch_reference(name):
    import torch

    xn, bn = inputs(3)
    g = np.random.default_rng(4).standard_normal(xn.shape)
    rule = ops.bias_act_rule(name)
    y = rule(xn, bn)
    gx, gb = rule.vjp((xn, bn), g)
    x, b = torch.tensor(xn, requires_grad=True), torch.tensor(bn, requires_grad=True)
    yt = ops.bias_act(name, x, b)
    yt.backward(torch.tensor(g))
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(gx, x.grad.numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(gb, b.grad.numpy(), rtol=1e-12, atol=1e-13)


def test_bias_shapes_and_gradient_sums(backend):
    rng = np.random.default_rng(0)
    x4, b4 = rng.standard_normal((2, 3, 4, 5)), rng.standard_normal((3, 1, 1))
    r = gv.check(fused_fn(backend, "tanh"), make(backend, x4), make(backend, b4))
    assert r.ok, str(r)
    with pytest.raises(gv.ArgumentValueError) as e:
        ops.bias_act("tanh", make(backend, x4), make(backend, rng.standard_normal(3)))
    assert "b that broadcasts against x without changing x's shape (2, 3, 4, 5)" in str(e.value)
    assert "use b of shape (3, 1, 1) for channels on axis 1" in str(e.value)
    with pytest.raises(gv.ArgumentValueError, match=r"use b of shape \(4,\) for x of shape \(3, 4\)"):
        ops.bias_act("tanh", make(backend, np.ones((3, 4))), make(backend, np.ones((3, 4, 1))))
    with pytest.raises(gv.ArgumentValueError, match="impl: expected 'reference' or 'fused'"):
        ops.bias_act("tanh", make(backend, np.ones(3)), impl="fast")


def test_bias_act_inplace_numpy():
    xn, bn = inputs(6)
    x = xn.copy()
    out = ops.bias_act_("swish", x, bn)
    assert out is x
    np.testing.assert_allclose(x, ops.bias_act("swish", xn, bn), rtol=1e-15)
    with pytest.raises(gv.ArgumentValueError, match="read-only"):
        ro = xn.copy()
        ro.flags.writeable = False
        ops.bias_act_("relu", ro, bn)


def test_bias_act_inplace_torch():
    import torch

    xn, bn = inputs(7)
    leaf = torch.tensor(xn, requires_grad=True)
    with pytest.raises(gv.ArgumentValueError) as e:
        ops.bias_act_("relu", leaf, torch.tensor(bn))
    assert "a leaf tensor that requires grad" in str(e.value) and "impl='fused'" in str(e.value)
    x = torch.tensor(xn)
    out = ops.bias_act_("gelu", x, torch.tensor(bn))
    assert out is x
    np.testing.assert_allclose(x.numpy(), ops.bias_act("gelu", xn, bn), rtol=1e-14)
    # on a non-leaf inside a graph the gradient still flows, through x + b
    w = torch.tensor(xn, requires_grad=True)
    b = torch.tensor(bn, requires_grad=True)
    h = w * 2.0
    ops.bias_act_("swish", h, b).sum().backward()
    w2, b2 = torch.tensor(xn, requires_grad=True), torch.tensor(bn, requires_grad=True)
    ops.bias_act("swish", w2 * 2.0, b2).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), w2.grad.numpy(), rtol=1e-13)
    np.testing.assert_allclose(b.grad.numpy(), b2.grad.numpy(), rtol=1e-13)


def test_bias_act_inplace_refuses_jax():
    with pytest.raises(gv.ArgumentTypeError, match="a jax array, which is immutable"):
        ops.bias_act_("relu", make("jax", np.ones(3)))


@pytest.mark.parametrize(
    "name,saves",
    [
        ("tanh", "output"),
        ("sigmoid", "output"),
        ("relu", "bits"),
        ("hardsigmoid", "bits"),
        ("softshrink", "bits"),
        ("leakyrelu", "bits"),
        ("rrelu", "bits"),
        ("trelu", "bits"),
        (ops.activation("leakyrelu", a=-0.5), "x and b"),  # y no longer tells the sides apart
        ("identity", "nothing"),
        ("swish", "x and b"),
        ("gelu_erf", "z"),  # torch's own gelu keeps z = x + b, as the rule would
        ("tanhshrink", "x and b"),
        ("gelu", "x and b"),
    ],
)
def test_fused_saves_bits_the_output_or_its_own_inputs(name, saves):
    """One tensor made for the gradient (bits, the output, or z where torch's
    own function is the rule), or none: the other rules that read z = x + b
    keep x and b themselves (what the caller holds anyway; as inputs, their
    derivatives reach the rule's own, order 2)."""
    import torch

    xn, bn = inputs(8)
    x, b = torch.tensor(xn, requires_grad=True), torch.tensor(bn, requires_grad=True)
    packed = []

    def pack(t):
        packed.append(t.detach().clone())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = ops.bias_act(name, x, b, impl="fused")
    if saves == "nothing":
        assert packed == []
        return
    if saves == "x and b":
        assert len(packed) == 2
        torch.testing.assert_close(packed[0], x.detach(), rtol=0, atol=0)
        torch.testing.assert_close(packed[1], b.detach(), rtol=0, atol=0)
        return
    assert len(packed) == 1
    if saves == "bits":  # one bit per element: where the slope is the high value
        act = ops.activation(name)
        mask_of = ops.two_valued(act)[0]
        mask = mask_of(np, y.detach().numpy(), **act.params)
        assert packed[0].dtype == torch.uint8 and packed[0].numel() == -(-y.numel() // 8)
        np.testing.assert_array_equal(packed[0].numpy(), np.packbits(mask.reshape(-1)))
        assert 0 < mask.sum() < mask.size  # both slopes occur, so the bits say something
        return
    want = y.detach() if saves == "output" else (x + b).detach()
    torch.testing.assert_close(packed[0], want, rtol=0, atol=0)


@pytest.mark.parametrize("name", ["relu", "hardtanh", "hardsigmoid"])
def test_bit_masks_under_torch_func_and_forward_mode(name):
    """Inside functorch transforms the mask cannot go through numpy: it is kept
    as bools, and the gradients still equal the reference's."""
    import torch

    xn, bn = inputs(10)
    x, b = torch.tensor(3 * xn), torch.tensor(bn)
    for transform in (torch.func.jacrev, torch.func.jacfwd):
        got = transform(lambda x: ops.bias_act(name, x, b, impl="fused"))(x)
        want = transform(lambda x: ops.bias_act(name, x, b))(x)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    got = torch.func.vmap(lambda xx: ops.bias_act(name, xx, b, impl="fused"))(x)
    torch.testing.assert_close(got, ops.bias_act(name, x, b))


def test_torch_func_transforms_and_jax_jit():
    import jax
    import torch

    xn, bn = inputs(9)
    x, b = torch.tensor(xn), torch.tensor(bn)
    f = lambda x, b: ops.bias_act("mish", x, b, impl="fused").sum()  # noqa: E731
    g = torch.func.grad(f, argnums=(0, 1))(x, b)
    x2, b2 = x.clone().requires_grad_(), b.clone().requires_grad_()
    ops.bias_act("mish", x2, b2).sum().backward()
    torch.testing.assert_close(g[0], x2.grad)
    batched = torch.func.vmap(lambda xx: ops.bias_act("mish", xx, b, impl="fused"))(x)
    torch.testing.assert_close(batched, ops.bias_act("mish", x, b))
    with jax.enable_x64(True):
        xj, bj = jax.numpy.asarray(xn), jax.numpy.asarray(bn)
        jf = jax.jit(lambda x, b: ops.bias_act("mish", x, b, impl="fused"))
        np.testing.assert_allclose(jf(xj, bj), ops.bias_act("mish", xn, bn), rtol=1e-13)
        gj = jax.jit(jax.grad(lambda x, b: ops.bias_act("mish", x, b, impl="fused").sum()))(xj, bj)
        np.testing.assert_allclose(gj, x2.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("shape", [(1,), (7,), (8,), (3, 5), (4, 250), (2, 3, 11)])
def test_torch_bit_packing_is_numpys_on_any_device(shape):
    """Off the CPU the two-valued slopes are packed by torch's own bit
    operations: byte for byte numpy's packbits (first element in the high
    bit, the last byte zero-padded), and back to the same mask."""
    import torch

    from gradverify.ops._bias_act_torch import pack_bits, unpack_bits

    mask = np.random.default_rng(sum(shape)).random(shape) < 0.4
    packed = pack_bits(torch.from_numpy(mask))
    assert packed.dtype == torch.uint8 and packed.numel() == -(-mask.size // 8)
    np.testing.assert_array_equal(packed.numpy(), np.packbits(mask.reshape(-1)))
    np.testing.assert_array_equal(unpack_bits(packed, mask.size).reshape(shape).numpy(), mask)


@pytest.mark.parametrize("name", ACTIVATION_NAMES)
def test_fused_torch_forward_over_reverse_matches_the_reference(name):
    """The tangent of a gradient (forward mode over reverse, no graph kept):
    the fused op's equals the reference's for every activation - including
    those whose torch backward kernels have no forward-mode derivative."""
    import torch
    import torch.autograd.forward_ad as fwAD

    xn, bn = inputs(14)
    v = torch.tensor(np.random.default_rng(15).standard_normal(xn.shape))
    tangents = {}
    for impl in ("reference", "fused"):
        with fwAD.dual_level():
            x = fwAD.make_dual(torch.tensor(xn).requires_grad_(), v)
            b = torch.tensor(bn, requires_grad=True)
            y = ops.bias_act(name, x, b, impl=impl)
            (gb,) = torch.autograd.grad((y * y).sum(), b)
            tangents[impl] = fwAD.unpack_dual(gb).tangent
    assert tangents["reference"] is not None
    torch.testing.assert_close(tangents["fused"], tangents["reference"], rtol=1e-12, atol=1e-14)


def test_a_callers_own_activation_is_its_rule_whatever_its_name():
    """A row the caller built is fused by its own forward and derivative:
    none of the table's facts kept by name (kernels, bits, constant slopes)
    applies to it, even under a table name."""
    import torch

    square = ops.Activation("square", (), forward=lambda xp, z: z * z, derivative=lambda xp, z, y: 2 * z)
    impostor = ops.Activation("identity", (), forward=lambda xp, z: z * z, derivative=lambda xp, z, y: 2 * z)
    xn, bn = inputs(16)
    for act in (square, impostor):
        grads = {}
        for impl in ("reference", "fused"):
            x, b = torch.tensor(xn, requires_grad=True), torch.tensor(bn, requires_grad=True)
            ops.bias_act(act, x, b, impl=impl).sum().backward()
            grads[impl] = (x.grad, b.grad)
        torch.testing.assert_close(grads["fused"], grads["reference"], rtol=1e-13, atol=1e-14)
        torch.testing.assert_close(grads["fused"][0], 2 * (torch.tensor(xn) + torch.tensor(bn)))
        fn = lambda x, b, act=act: ops.bias_act(act, x, b, impl="fused")  # noqa: E731
        assert gv.check(fn, torch.tensor(xn), torch.tensor(bn), order=2).ok


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_hardsigmoid_bits_come_from_z_where_y_rounds_onto_the_flat_side(dtype):
    """Just below z = 3, (z + 3) / 6 rounds to 1: the output alone says
    "saturated". The fused rule reads its bit from z, so its slope is the
    derivative's 1/6 there, as the reference's, and 0 at the kinks themselves."""
    import torch

    np_dtype = np.dtype(dtype)
    below = np.nextafter(np_dtype.type(3), np_dtype.type(0))
    z = np.array([below, -below, 3, -3, 0.5], dtype=np_dtype)
    assert ops.bias_act("hardsigmoid", z[:1])[0] == 1  # y cannot tell
    grads = {}
    for impl in ("reference", "fused"):
        x = torch.tensor(z, requires_grad=True)
        b = torch.zeros(z.shape, dtype=getattr(torch, dtype), requires_grad=True)
        ops.bias_act("hardsigmoid", x, b, impl=impl).sum().backward()
        grads[impl] = x.grad
    torch.testing.assert_close(grads["fused"], grads["reference"], rtol=0, atol=0)
    assert grads["fused"][0] == grads["fused"][4] > 0 and grads["fused"][2] == 0


def test_leakyrelu_bits_come_from_z_where_a_z_underflows_to_minus_zero():
    """z = -1e-322: a z underflows to -0, the output of z = -0 too; the slopes
    there are a and 1. The fused rule reads its bit from z, as the derivative."""
    import torch

    z = np.array([-1e-322, -0.0, 0.0, 1e-322, -2.0])
    assert np.signbit(ops.bias_act("leakyrelu", z[:2])).all()  # y cannot tell
    grads = {}
    for impl in ("reference", "fused"):
        x, b = torch.tensor(z, requires_grad=True), torch.zeros(5, dtype=torch.float64, requires_grad=True)
        ops.bias_act("leakyrelu", x, b, impl=impl).sum().backward()
        grads[impl] = x.grad
    torch.testing.assert_close(grads["fused"], grads["reference"], rtol=0, atol=0)
    assert grads["fused"].tolist() == [0.01, 1.0, 1.0, 1.0, 0.01]
