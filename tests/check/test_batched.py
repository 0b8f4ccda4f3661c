"""Batched derivatives (``batched=True``): the JVP and VJP under torch.func.vmap
and jax.vmap, member by member against their plain values. A rule right
alone and wrong under vmap is an error; one that cannot run under vmap is a
warning in the framework's words; a right one passes, in float64 and float32.
(The command's --batched and the plugin's switches: faces/test_batched_options_slow.py.)"""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv

from ._helpers import jax_point

torch = pytest.importorskip("torch")


# -- torch ------------------------------------------------------------------------------
from .._batchops import Sin, SinBatchedBackwardBug, SinWithoutVmap, kernel  # noqa: E402


def _x(dtype="float64", shape=(3, 2), seed=0):
    return torch.from_numpy(np.random.default_rng(seed).uniform(-2, 2, shape)).to(getattr(torch, dtype))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("fn", [torch.tanh, Sin.apply, lambda x: torch.logsumexp(x, -1)], ids=["tanh", "Sin", "lse"])
def test_right_torch_rules_pass_batched(fn, dtype):
    r = gv.check(fn, _x(dtype), batched=True)
    assert r.ok, str(r)
    assert r.modes["batched JVP"] == "checked" and r.modes["batched VJP"] == "checked"
    assert not r.findings, str(r)


def test_a_torch_backward_wrong_only_under_vmap_is_an_error_naming_the_member():
    x = _x()
    assert gv.check(SinBatchedBackwardBug.apply, x).ok  # alone, every rule is right
    r = gv.check(SinBatchedBackwardBug.apply, x, batched=True)
    assert not r.ok
    (f,) = r.errors
    assert f.kind == gv.Kind.MISMATCH and f.pair == ("batched VJP", "VJP")
    assert f.where in ("batch member 1 of 3", "batch member 2 of 3")  # the first member is its own
    assert f.error > f.bound and set(f.values) == {"batched VJP", "VJP"}
    assert r.modes["batched JVP"] == "checked"  # its jvp rule does not use the kernel
    assert "batched=True" in r.reproduce
    assert "batched VJP vs VJP" in str(r)


def test_a_torch_function_without_a_vmap_rule_is_a_warning_in_torchs_words():
    r = gv.check(SinWithoutVmap.apply, _x(), batched=True)
    assert r.ok, str(r)
    warned = r.by_kind(gv.Kind.MODE_UNAVAILABLE)
    assert {f.pair[0] for f in warned} == {"batched JVP", "batched VJP"}
    assert all("generate_vmap_rule" in f.message for f in warned)
    assert r.modes["batched VJP"] == "unavailable" and r.modes["VJP"] == "checked"


def test_verify_finds_the_batched_bug_and_shrinks_it():
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp

    strategy = st.tuples(hnp.arrays(np.float64, st.integers(1, 4), elements=st.floats(-3, 3)).map(torch.from_numpy))
    assert gv.verify(SinBatchedBackwardBug.apply, strategy, max_examples=20, seed=0).ok
    r = gv.verify(SinBatchedBackwardBug.apply, strategy, max_examples=20, seed=0, batched=True)
    assert not r.ok and r.result.errors[0].pair == ("batched VJP", "VJP")


def _bce(x, y):
    return torch.nn.functional.binary_cross_entropy_with_logits(x, y)


def test_a_gradient_that_cancels_is_bounded_by_its_terms_under_vmap():
    """sigma(x) - y near 0 is computed from terms of about 1: vmap's kernel and
    the plain one may round it by u x 1, far more than u x the result."""
    t = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    r = gv.check(_bce, t(5.851974892676312), t(0.8839723567137459), batched=True)
    assert r.ok, str(r)
    assert r.modes["batched VJP"] == "checked" and r.modes["batched JVP"] == "checked"


def test_batched_logistic_losses_pass_over_a_scan_of_logits_and_targets():
    """Logits over [-30, 30] and targets anywhere in [0, 1], some of them
    sigmoid(x) itself (the gradient cancels to a few ulps): every check passes
    batched, scalar and vector alike."""
    rng = np.random.default_rng(7)
    failed = []
    for i in range(150):
        x = rng.uniform(-30, 30, size=() if i % 2 else (3,))
        y = rng.uniform(0, 1, size=x.shape) if i % 3 else 1 / (1 + np.exp(-x))
        # (a point whose every element is undecidable compared nothing: inconclusive, not a false alarm)
        r = gv.check(_bce, torch.tensor(x), torch.tensor(y), batched=True, allow_unchecked=True)
        if not r.ok:
            failed.append((x, y, str(r)))
    assert not failed, failed[0]


#: sigmoid, whose vmap rule is off by one part in 10^9.
_sigmoid_kernel = kernel(torch.sigmoid, lambda x: torch.sigmoid(x) * (1 + 1e-9), "SigmoidKernel")


class _BCE(torch.autograd.Function):
    """The logistic loss with a backward through _sigmoid_kernel: right alone."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, y):
        return _bce(x, y)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return g * (_sigmoid_kernel(x) - y) / x.numel(), -g * x / x.numel()


def test_a_cancelling_gradient_wrong_under_vmap_by_a_part_in_a_billion_is_caught():
    x, y = torch.tensor([5.85, -1.2, 0.3], dtype=torch.float64), torch.tensor([0.99, 0.2, 0.6], dtype=torch.float64)
    assert gv.check(_BCE.apply, x, y).ok
    r = gv.check(_BCE.apply, x, y, batched=True)
    assert not r.ok
    (f,) = r.errors
    assert f.pair == ("batched VJP", "VJP") and f.argument == 0, str(r)


# -- jax --------------------------------------------------------------------------------
jax = pytest.importorskip("jax")
jnp = jax.numpy


def _softplus_with_a_numpy_backward():
    """softplus whose backward converts its arguments to numpy: fine alone
    (eagerly), impossible under vmap."""

    @jax.custom_vjp
    def softplus(x):
        return jnp.logaddexp(x, 0.0)

    def fwd(x):
        return softplus(x), x

    def bwd(x, g):
        return (jnp.asarray(np.asarray(g) / (1.0 + np.exp(-np.asarray(x)))),)

    softplus.defvjp(fwd, bwd)
    return softplus


def test_a_jax_custom_vjp_that_cannot_be_vmapped_is_a_warning():
    with jax.enable_x64(True):
        r = gv.check(_softplus_with_a_numpy_backward(), jax_point(), batched=True)
    assert r.ok, str(r)
    assert r.modes["VJP"] == "checked" and r.modes["batched VJP"] == "unavailable"
    (f,) = [f for f in r.by_kind(gv.Kind.MODE_UNAVAILABLE) if f.pair[0] == "batched VJP"]
    assert "TracerArrayConversionError" in f.message


# -- what cannot be batched, and bad input ----------------------------------------------
def test_numpy_rules_say_they_cannot_be_vmapped():
    rule = gv.Rule(np.tanh, vjp=lambda args, g: (g * (1 - np.tanh(args[0]) ** 2),))
    r = gv.check(rule, np.linspace(-1, 1, 4), batched=True)
    assert r.ok and r.modes["batched VJP"] == "unavailable"
    (f,) = [f for f in r.by_kind(gv.Kind.MODE_UNAVAILABLE) if f.pair[0] == "batched VJP"]
    assert "vmap" in f.message


def test_batched_must_be_a_bool():
    with pytest.raises(gv.ArgumentValueError, match="batched"):
        gv.check(torch.tanh, _x(), batched="yes")
