"""Correct functions that gradverify once flagged, each at the input it was
flagged on, and the wrong rules that must still fail beside them. Every
verdict here comes from a measurement (fn's noise from difference tables, the
float64 run of a low-precision AD, fn over wider spacings), not from a wider
constant."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv

torch = pytest.importorskip("torch")
F = torch.nn.functional


def t64(*values):
    return torch.tensor(values, dtype=torch.float64)


def t32(*values):
    return torch.tensor(values, dtype=torch.float32)


def test_a_wrong_logsumexp_rule_is_still_caught():
    class Lse(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return torch.logsumexp(x, -1)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0], output)

        @staticmethod
        def backward(ctx, g):
            x, y = ctx.saved_tensors
            return g[..., None] * torch.exp(x - y[..., None]) * (1 + 1e-4)  # 1e-4 relative too large

    r = gv.check(Lse.apply, t64([-10.0, 0.0, -12.0, 3.0]))
    assert not r.ok and r.errors[0].kind == "mismatch", str(r)


def test_torch_gelu_at_minus_4_is_exact_and_so_is_the_verdict():
    """1 + erf cancels in torch's float64 gelu at z = -4: its noise is 1e4 x
    u |f|, and the old Richardson estimate was 3x too small. AD is exact there."""
    r = gv.check(F.gelu, t64(-4.0))
    assert r.ok and not r.inconclusive, str(r)


@pytest.mark.parametrize(
    "name,fn,slope", [("silu", F.silu, 0.5), ("mish", F.mish, 0.6), ("selu", F.selu, 1.0507009873554805)]
)
def test_float32_activations_at_the_smallest_subnormal(name, fn, slope):
    """b = 1.4e-45 (Hypothesis's favourite float32): a tangent scaled by the
    input's magnitude underflowed to 0. Tangents are now normalised."""
    x, b = t32(0.0), t32(1.401298464324817e-45)
    r = gv.check(lambda x, b: fn(x + b), x, b)
    assert r.ok, str(r)
    # the derivative torch returns is the one compared, not an underflowed 0
    z = (x + b).requires_grad_(True)
    fn(z).sum().backward()
    assert float(z.grad) == pytest.approx(slope, rel=1e-6)


@pytest.mark.parametrize("fn", [F.elu, F.leaky_relu], ids=["elu", "leaky_relu"])
def test_float32_kinked_activations_at_the_smallest_subnormal(fn):
    r = gv.check(lambda x, b: fn(x + b), t32(0.0), t32(1.401298464324817e-45))
    assert r.ok, str(r)


def test_a_wrong_rule_at_a_subnormal_is_still_caught():
    class Silu(torch.autograd.Function):
        @staticmethod
        def forward(z):
            return F.silu(z)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, g):
            (z,) = ctx.saved_tensors
            return g * torch.sigmoid(z)  # drops z sigma (1 - sigma): 0.5 at 0, right; wrong elsewhere

    assert not gv.check(Silu.apply, t32(1.401298464324817e-45, 1.5)).ok


def test_huge_inputs_do_not_overflow_the_tangent():
    r = gv.check(lambda a: 2 * a, t64(1e200))
    assert r.ok and not r.inconclusive, str(r)
    assert not gv.check(lambda a: 2 * a, t64(1e200, -3e199, 5e150)).errors
    wrong = gv.Rule(lambda a: 2 * a, jvp=lambda p, t: 2.5 * t[0], vjp=lambda p, g: (2.5 * g,))
    assert not gv.check(wrong, np.array([1e200])).ok


def test_sin_at_1e15_is_inconclusive_not_a_mismatch():
    """u |x| = 0.1 there: no step between the noise and the period."""
    r = gv.check(torch.sin, t64(1e15), allow_unchecked=True)
    assert r.ok and r.inconclusive, str(r)
    (f,) = r.by_kind(gv.Kind.FD_UNRELIABLE)
    assert f.detail


@pytest.mark.parametrize("fn,z", [(F.gelu, -5.0), (F.tanhshrink, 2.0**-6)], ids=["gelu", "tanhshrink"])
def test_float32_rounding_of_a_correct_op_is_a_precision_warning(fn, z):
    """torch's float32 gelu at -5 (1 + erf cancels) and tanhshrink at 2^-6
    (1 - sech^2) are off by 1.6e-3 and 8e-5 relative; the same code in
    float64 is exact. A warning with the measured error, not a failure."""
    r = gv.check(fn, t32(z))
    assert r.ok and not r.inconclusive, str(r)
    warnings = r.by_kind(gv.Kind.PRECISION)
    assert warnings and all(f.level == "warning" for f in warnings)
    f = warnings[0]
    native, wide = (v for k, v in f.values.items())
    exact = float(torch.func.grad(fn)(torch.tensor(z, dtype=torch.float64)))
    assert wide == pytest.approx(exact, rel=1e-9)
    assert f.error == pytest.approx(abs(native - wide))
    assert "ulps of float32" in f.message


def test_layer_norm_float32_on_a_near_constant_row_is_a_precision_warning():
    x = t32(5.75, 6.0).reshape(1, 2)
    r = gv.check(lambda x: F.layer_norm(x, (2,)), x)
    assert r.ok, str(r)
    assert r.by_kind(gv.Kind.PRECISION)


def test_a_rule_wrong_in_float32_is_an_error_not_a_precision_warning():
    """The seed bug in float32: the float64 run of the same rule is wrong too."""
    from gradverify._sweep.examples import BUILDERS

    rng = np.random.default_rng(0)
    x, b = torch.tensor(rng.standard_normal((3, 4)), dtype=torch.float32), t32(0.5, -1.0, 2.0, 0.25)
    r = gv.check(BUILDERS["torch"](bug=True), x, b)
    assert not r.ok and not r.by_kind(gv.Kind.PRECISION), str(r)
    assert r.errors[0].pair[1] == "FD"


def test_a_float32_only_code_path_that_is_wrong_is_an_error():
    """A rule whose float32 branch uses another constant: the float64 run is
    right, the float32 run is off by far more than rounding."""

    class Scaled(torch.autograd.Function):
        @staticmethod
        def forward(z):
            return torch.tanh(z)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(output)

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            slope = 1 - y * y
            return g * (slope * 1.1 if y.dtype == torch.float32 else slope)

    r = gv.check(Scaled.apply, t32(0.3, -1.2, 2.0))
    assert not r.ok, str(r)
    (f,) = r.errors
    assert f.pair == ("VJP", "VJP float64") and "float32 code path" in f.message


def round_to_tf32(t):
    """Round float32 values to 10 mantissa bits, as a TF32 matmul rounds its inputs."""
    bits = t.contiguous().view(torch.int32)
    bits = (bits + 0x1000) & ~0x1FFF
    return bits.view(torch.float32)


def test_a_tf32_like_backward_is_a_precision_warning():
    """gelu(a @ b) whose float32 backward rounds to 10 mantissa bits (what a
    TF32 matmul does on the GPU); its float64 run is exact."""

    class MatGelu(torch.autograd.Function):
        @staticmethod
        def forward(a, b):
            return F.gelu(a @ b)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(*inputs)

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            z = a @ b
            gz = g * torch.func.grad(lambda t: F.gelu(t).sum())(z)
            ga, gb = gz @ b.T, a.T @ gz
            if a.dtype == torch.float32:
                ga, gb = round_to_tf32(ga), round_to_tf32(gb)
            return ga, gb

    rng = np.random.default_rng(3)
    a = torch.tensor(rng.standard_normal((4, 6)), dtype=torch.float32)
    b = torch.tensor(rng.standard_normal((6, 5)), dtype=torch.float32)
    r = gv.check(MatGelu.apply, a, b)
    assert r.ok, str(r)
    (f,) = r.by_kind(gv.Kind.PRECISION)
    assert f.level == "warning" and f.pair == ("VJP", "VJP float64")
    assert 2.0**-14 < f.error / abs(f.values["VJP float64"]) < 2.0**-9


def test_reduced_precision_matmul_on_the_cpu_is_noted_and_a_precision_warning():
    """Under set_float32_matmul_precision('medium') the check says so and
    judges the float32 AD against its float64 run. Whether the CPU honours
    the setting (bfloat16 passes) depends on the machine and torch's kernels:
    measured here on the same matmul. Where it does, the bfloat16 rounding
    shows as a precision warning, never an error; where it does not, the AD
    is float32's and nothing is said of its precision."""
    rng = np.random.default_rng(4)
    a = torch.tensor(rng.standard_normal((64, 64)), dtype=torch.float32)
    b = torch.tensor(rng.standard_normal((64, 64)), dtype=torch.float32)
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("medium")
        honoured = not torch.equal(a @ b, _highest(lambda: a @ b))
        r = gv.check(lambda a, b: F.gelu(a @ b), a, b)
    finally:
        torch.set_float32_matmul_precision(before)
    assert r.ok, str(r)
    assert any("matmul" in n and "'medium'" in n for n in r.notes)
    assert bool(r.by_kind(gv.Kind.PRECISION)) == honoured, str(r)
    assert "note:" in str(r)


def _highest(f):
    """f() with float32 matmuls at full precision."""
    level = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        return f()
    finally:
        torch.set_float32_matmul_precision(level)


def test_normalize_of_a_tiny_row_inside_a_spherical_harmonic():
    """e3nn's spherical_harmonics(normalize=True) on a row of ~1e-72: the FD
    step is far larger than the row, which F.normalize's eps dominates."""
    o3 = pytest.importorskip("e3nn.o3")
    x = t64(0.3, -1.2, 0.8, 1e-72, 2e-72, -1.5e-72).reshape(2, 3)
    r = gv.check(lambda v: o3.spherical_harmonics(2, v, normalize=True), x)
    assert r.ok, str(r)
    r = gv.check(lambda v: F.normalize(v, dim=-1), x)
    assert r.ok, str(r)


def test_jumps_are_judged_against_their_own_element():
    """kornia's quaternion_to_axis_angle at w = 0 jumps in all three outputs,
    one of them by only 3.3e-7: a jump for its own element, not a mismatch."""
    kornia = pytest.importorskip("kornia")
    q = t64(0.0, 0.3, -0.5, 0.8)
    q = (q / q.norm()).reshape(1, 4)
    r = gv.check(kornia.geometry.conversions.quaternion_to_axis_angle, q)
    assert r.ok and r.by_kind(gv.Kind.DISCONTINUITY), str(r)

    def small_jump(q):  # the same jump, scaled down in one output
        return torch.where(q[..., :1] >= 0, 1.0, -1.0) * q[..., 1:] * torch.tensor([1.0, 1.0, 3.3e-7], dtype=q.dtype)

    r = gv.check(small_jump, q)
    assert r.ok and r.by_kind(gv.Kind.DISCONTINUITY), str(r)
