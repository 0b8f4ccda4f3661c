"""Complex arguments and outputs, checked as their real and imaginary parts:
right rules pass (holomorphic or not: abs, angle, conj, real-valued losses),
a wrong conjugation is caught and located (element and part) on torch, jax
and a numpy gv.Rule, a branch cut is inconclusive, not a mismatch, and
gv.verify passes log on a strategy kept off its cut."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv
from gradverify import strategies as gst

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
jnp = jax.numpy

from .._batchops import kernel  # noqa: E402  (imports torch)

Z = np.array([0.3 + 0.4j, -1.2 + 0.5j, 2.0 - 0.7j])
C = 0.5 + 2.0j

TORCH_RIGHT = {
    "exp": torch.exp,
    "log": torch.log,
    "sqrt": torch.sqrt,
    "abs": torch.abs,
    "angle": torch.angle,
    "conj": lambda z: torch.conj(z) * 2.0,
    "|z|^2 loss": lambda z: (z * z.conj()).real.sum(),
    "z conj(z) + z^2": lambda z: z * z.conj() + z * z,
    "real": lambda z: z.real * z.imag,
}


@pytest.mark.parametrize("dtype", ["complex128", "complex64"])
@pytest.mark.parametrize("name", sorted(TORCH_RIGHT))
def test_right_complex_functions_pass_on_torch(name, dtype):
    z = torch.from_numpy(Z).to(getattr(torch, dtype))
    r = gv.check(TORCH_RIGHT[name], z)
    assert r.ok and not r.inconclusive, str(r)
    assert r.modes["JVP"] == "checked" and r.modes["VJP"] == "checked"
    assert "complex values checked as their real and imaginary parts" in r.notes[-1]
    assert z.dtype == getattr(torch, dtype)  # (the caller's array untouched)


JAX_RIGHT = {
    "exp": jnp.exp,
    "log": jnp.log,
    "abs": jnp.abs,
    "angle": jnp.angle,
    "conj": lambda z: jnp.conj(z) * 2.0,
    "|z|^2 loss": lambda z: jnp.sum(jnp.real(z * jnp.conj(z))),
}


@pytest.mark.parametrize("name", sorted(JAX_RIGHT))
def test_right_complex_functions_pass_on_jax(name):
    with jax.enable_x64(True):
        r = gv.check(JAX_RIGHT[name], jnp.asarray(Z))
    assert r.ok and not r.inconclusive, str(r)


def test_a_real_function_with_a_complex_output_is_checked():
    r = gv.check(lambda x: torch.exp(1j * x) * x, torch.tensor([0.1, 0.7, -2.0], dtype=torch.float64))
    assert r.ok and r.modes["VJP"] == "checked", str(r)
    assert "and the output" in r.notes[-1]


class _ScaleForgotConj(torch.autograd.Function):
    """f(z) = C z, whose backward forgets torch's conjugate (g C, not g conj(C))."""

    @staticmethod
    def forward(z):
        return C * z

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, g):
        return g * C

    @staticmethod
    def jvp(ctx, t):
        return C * t


class _Scale(_ScaleForgotConj):
    @staticmethod
    def backward(ctx, g):
        return g * np.conj(C)


def test_a_wrong_conjugation_is_caught_on_torch_and_the_right_one_passes():
    z = torch.from_numpy(Z)
    assert gv.check(_Scale.apply, z).ok
    r = gv.check(_ScaleForgotConj.apply, z)
    assert not r.ok
    f = r.errors[0]
    assert f.kind == gv.Kind.MISMATCH and f.pair == ("VJP", "FD")
    assert len(f.input_index) == 1 and len(f.output_index) == 1  # the element, its part named in `where`
    assert "part of argument 0" in f.where and "part of output" in f.where
    assert r.modes["JVP"] == "checked"
    assert not r.by_kind(gv.Kind.MISMATCH)[0].pair == ("JVP", "FD")


def _jax_scale(conjugate: bool):
    """f(z) = C z as a custom_vjp; jax's VJP for a holomorphic f is ct f'(z),
    so conjugating C there is the bug (the opposite of torch's convention)."""

    @jax.custom_vjp
    def scale(z):
        return C * z

    def fwd(z):
        return scale(z), None

    def bwd(_, ct):
        return (ct * (np.conj(C) if conjugate else C),)

    scale.defvjp(fwd, bwd)
    return scale


def test_a_wrong_conjugation_is_caught_on_jax_and_the_right_one_passes():
    with jax.enable_x64(True):
        z = jnp.asarray(Z)
        assert gv.check(_jax_scale(conjugate=False), z).ok
        r = gv.check(_jax_scale(conjugate=True), z)
    assert not r.ok and r.errors[0].pair == ("VJP", "FD")


def _rule(vjp_factor: complex) -> gv.Rule:
    return gv.Rule(
        lambda z: C * z * z,
        jvp=lambda p, t: 2 * C * p[0] * t[0],
        vjp=lambda p, g: (g * np.conj(2 * C * p[0]) if vjp_factor == 1 else g * 2 * C * p[0],),
    )


def test_a_numpy_rule_gives_its_vjp_in_torchs_convention():
    assert gv.check(_rule(1), Z).ok
    r = gv.check(_rule(0), Z)
    assert not r.ok and r.errors[0].pair in (("VJP", "FD"), ("JVP", "VJP"))


def test_a_branch_cut_is_inconclusive_not_a_mismatch():
    on_cut = torch.tensor([-1.0 + 0.0j, -4.0 + 0.0j], dtype=torch.complex128)
    for fn in (torch.log, torch.sqrt, torch.angle):
        r = gv.check(fn, on_cut)
        assert r.ok and r.inconclusive, str(r)
        assert r.by_kind(gv.Kind.DISCONTINUITY) and not r.by_kind(gv.Kind.MISMATCH)


def test_verify_passes_log_off_its_cut_and_finds_the_conjugation_bug():
    strategy = gst.complex_arrays("torch", branch_cut=True).map(lambda z: (z,))
    r = gv.verify(torch.log, strategy, max_examples=40, seed=0)
    assert r.ok and r.examples_run == 40, str(r)
    bad = gv.verify(_ScaleForgotConj.apply, strategy, max_examples=40, seed=0)
    assert not bad.ok and bad.counterexample[0].is_complex()


def test_order_two_and_batched_work_on_the_real_view():
    z = torch.from_numpy(Z)
    r = gv.check(torch.exp, z, order=2)
    assert r.ok and r.second_order_checked, str(r)
    r = gv.check(lambda z: torch.exp(z) * z.conj(), z, batched=True)
    assert r.ok and r.modes["batched JVP"] == "checked" and r.modes["batched VJP"] == "checked", str(r)


CONJUGATE_VIEWS = {
    "conj": torch.conj,
    "mH": lambda z: z.mH,
    "H": lambda z: z.H,
    "fft.hfft": torch.fft.hfft,
    "logcumsumexp": lambda z: torch.logcumsumexp(z, 0),
}


@pytest.mark.parametrize("name", sorted(CONJUGATE_VIEWS))
def test_conjugate_views_and_their_gradients_are_batched(name):
    """An output that is a conjugate view, and a backward that hands one on,
    are resolved before the real view reads their parts: torch has no
    batching rule for the negative view .imag of a conjugate view is."""
    rng = np.random.default_rng(0)
    z = torch.from_numpy(rng.standard_normal((3, 4)) + 1j * rng.standard_normal((3, 4)))
    r = gv.check(CONJUGATE_VIEWS[name], z, batched=True)
    assert r.modes["batched JVP"] == "checked" and r.modes["batched VJP"] == "checked", str(r)
    assert not r.by_kind(gv.Kind.MODE_UNAVAILABLE) and not r.errors, str(r)


#: conj, whose vmap rule forgets to conjugate.
_conj_kernel = kernel(torch.conj, lambda z: z.clone(), "ConjKernel")


class _ScaleConjUnderVmap(_Scale):
    """f(z) = C z, whose backward conjugates C through _conj_kernel: right
    alone, the conjugation forgotten under vmap."""

    generate_vmap_rule = True

    @staticmethod
    def backward(ctx, g):
        return g * _conj_kernel(torch.full_like(g, C))  # (batched where g is)


def test_a_conjugation_forgotten_only_under_vmap_is_caught():
    z = torch.from_numpy(Z)
    assert gv.check(_ScaleConjUnderVmap.apply, z).ok
    r = gv.check(_ScaleConjUnderVmap.apply, z, batched=True)
    assert [f.pair for f in r.errors] == [("batched VJP", "VJP")], str(r)
