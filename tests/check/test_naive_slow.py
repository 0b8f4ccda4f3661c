"""Correct functions under the strategy a new user writes - plain floats in
[-10, 10], zeros, subnormals and repeats included, shapes 1-5 - give no
failure on any seed: what gradverify cannot decide there is inconclusive,
never a mismatch.

Every case runs 10 seeds of GRADVERIFY_NAIVE_EXAMPLES examples (60 by
default, which CI runs, 68,400 checks; ``GRADVERIFY_NAIVE_EXAMPLES=200 pytest -n auto
tests/check/test_naive_slow.py`` runs the full 228,000 checks over the 114
case/dtype pairs, which pass, in about 18 minutes on two cores: more than
CI's time holds beside the rest of the suite). An example costs ~3-15 ms (a full
Jacobian: a vectorised evaluation of fn at every column's stencil points, a
vectorised JVP and VJP - twice for float32, whose AD also runs in float64 -
and the checker's arithmetic; more down the kink ladder; jax also compiles
fn, its JVP and its VJP for every new shape), and Hypothesis's own
generation ~1.2 ms; docs/benchmarks.md splits it by part.
``benchmarks/bench_false_alarms.py`` runs the same cases beside gradcheck
and check_grads (its table is in docs/false-alarms.md)."""

from __future__ import annotations

import os

import pytest

import gradverify as gv
from gradverify._sweep.examples import naive_strategy

from ._helpers import NAIVE_CASES

pytestmark = pytest.mark.slow


SEEDS = range(10)


EXAMPLES = int(os.environ.get("GRADVERIFY_NAIVE_EXAMPLES", "60"))


def _params():
    for case in NAIVE_CASES:
        for dtype in ("float64", "float32"):
            yield pytest.param(case, dtype, id=f"{case.label}-{dtype}")


@pytest.mark.parametrize(("case", "dtype"), list(_params()))
def test_correct_functions_never_fail_on_a_naive_strategy(case, dtype):
    strategy = naive_strategy(case, dtype)
    examples = inconclusive = 0
    with gv.compiling():  # one function over every seed
        for seed in SEEDS:
            r = gv.verify(case.fn, strategy, max_examples=EXAMPLES, seed=seed)
            assert r.ok, str(r)
            examples += r.examples_run
            inconclusive += r.inconclusive
    assert examples == len(SEEDS) * EXAMPLES
    assert inconclusive < examples  # something was decided


def test_jax_tanh_gelu_quantised_tail_at_the_float32_floor_is_not_a_kink_to_convict():
    """Found at 200 examples a seed: x + b = -6.502 (float32), where jax's
    tanh-form gelu is computed through 1 + tanh(...) ~ 2e-13 and is flat
    between quantum steps of u x its terms. No finer step than the first lies
    above float32's resolution; the one-sided slopes differ by a quantum over
    the step, which is a kink or a quantum step - undecidable, not a kink whose
    sides convict AD's right -6.4e-12. A rule 1% off is still caught in the
    same tail where FD can judge (b = -3)."""
    import jax
    import jax.numpy as jnp

    jax_gelu = next(c.fn for c in NAIVE_CASES if c.label == "jax.nn.gelu")
    x, b = jnp.array([0.0], jnp.float32), jnp.array([-6.5021781921386719], jnp.float32)
    r = gv.check(jax_gelu, x, b, seed=7)
    assert r.ok, str(r)
    assert not r.by_kind(gv.Kind.NONDIFFERENTIABLE)

    @jax.custom_jvp
    def off(x, b):
        return jax_gelu(x, b)

    @off.defjvp
    def _(primals, tangents):
        y, t = jax.jvp(jax_gelu, primals, tangents)
        return y, 1.01 * t

    bad = gv.check(off, x, jnp.array([-3.0], jnp.float32))
    assert not bad.ok and bad.by_kind(gv.Kind.MISMATCH), str(bad)
