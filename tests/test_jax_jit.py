"""jax functions are jit-compiled (fn, its JVP and its VJP), falling back to
eager evaluation where fn cannot be traced; the verdicts do not change."""

from __future__ import annotations

import gc
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradverify as gv
from gradverify import ArgumentTypeError


def test_a_traceable_function_is_compiled_once_not_run_per_evaluation():
    calls = []

    def fn(x):
        calls.append(1)  # runs while jax traces, not per compiled call
        return jnp.tanh(x)

    x = jnp.asarray(np.linspace(-2, 2, 50))
    r = gv.check(fn, x)
    assert r.ok, str(r)
    evaluations = sum(r.evaluations.values())
    assert evaluations > 15 and len(calls) < evaluations / 2
    before = len(calls)
    assert gv.check(fn, x, seed=1).ok
    assert len(calls) == before  # same shapes and dtypes: nothing traced again


def test_a_function_jit_cannot_trace_runs_eagerly_and_is_still_judged():
    def repeat(x, n):  # int(n): concrete only outside jit
        y = x
        for _ in range(int(n)):
            y = jnp.sin(y)
        return y

    x = jnp.asarray(np.linspace(-2, 2, 50))
    assert gv.check(repeat, x, jnp.asarray(2)).ok

    @jax.custom_vjp
    def wrong(x, n):
        return repeat(x, n)

    def fwd(x, n):
        return repeat(x, n), (x, n)

    def bwd(res, g):
        x, n = res
        return (jnp.cos(x) * g, None)  # the derivative of one sin, not of two

    wrong.defvjp(fwd, bwd)
    r = gv.check(wrong, x, jnp.asarray(2))
    assert not r.ok and r.errors[0].kind == gv.Kind.MISMATCH and r.errors[0].pair == ("VJP", "FD")


def test_what_fn_returns_is_judged_as_written_not_as_jit_would_make_it():
    with pytest.raises(ArgumentTypeError, match="found builtins.float"):
        gv.check(lambda x: 1.0, jnp.asarray(np.linspace(-1, 1, 5)))


def test_the_compiled_forms_do_not_keep_fn_alive():
    def fn(x):
        return jnp.sin(x) * 2.0

    assert gv.check(fn, jnp.asarray(np.linspace(-1, 1, 40))).ok
    ref = weakref.ref(fn)
    del fn
    gc.collect()
    assert ref() is None
