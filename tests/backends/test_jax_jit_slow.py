"""In a compiling session (a verify run, or a check on small arrays) the
finite differences' points and the JVPs and VJPs go to the compiled jax forms
as numpy arrays: the verdicts are the eager check's (under
``jax.disable_jit()``), for a right rule and a wrong one, at every x64
setting, dtype and Jacobian strategy; and fn's own operations are never
compiled once per batch size."""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest

import gradverify as gv
from gradverify import compiling

from ._helpers import float_rows

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("x64", [False, True])
def test_compiled_evaluations_from_host_arrays_judge_as_the_eager_ones(x64):
    """In a session the finite differences' points go to the compiled fn as
    numpy arrays (no jax arrays made first): the same verdicts as the eager
    check, for a right rule and a wrong one, at either x64 setting."""

    @jax.custom_vjp
    def tanh_mul(x, b):
        return jnp.tanh(x * b)

    def fwd(x, b):
        y = tanh_mul(x, b)
        return y, (x, b, y)

    def bwd(res, g):
        x, b, y = res
        d = g * (1 - y * y)
        return d * b, (d * x).at[2].multiply(wrong)

    tanh_mul.defvjp(fwd, bwd)
    with jax.enable_x64(x64):
        x = jnp.linspace(-2.0, 2.0, 6)
        b = jnp.linspace(0.5, 1.5, 6)
    for wrong in (1.0, -1.0):
        with jax.disable_jit():
            eager = gv.check(tanh_mul, x, b)
        with compiling():
            compiled = gv.check(tanh_mul, x, b)
        assert eager.ok == compiled.ok == (wrong == 1.0), str(compiled)
        if wrong != 1.0:
            assert {(f.argument, f.input_index) for f in compiled.errors} == {(1, (2,))}, str(compiled)


@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_compiled_modes_from_host_arrays_judge_as_the_eager_ones(dtype, full):
    """In a session the JVPs and VJPs (one direction, or all stacked) also take
    numpy arrays: a wrong forward rule at one element is named alike, eagerly
    and compiled, and the right rule passes both ways."""

    @jax.custom_jvp
    def softplus_mul(x, b):
        return jax.nn.softplus(x * b)

    @softplus_mul.defjvp
    def _(primals, tangents):
        (x, b), (tx, tb) = primals, tangents
        s = jax.nn.sigmoid(x * b)
        return softplus_mul(x, b), (s * (tx * b + x * tb)).at[3].multiply(wrong)

    with jax.enable_x64(True):
        x = jnp.linspace(-2.0, 2.0, 6, dtype=dtype)
        b = jnp.linspace(0.5, 1.5, 6, dtype=dtype)
    for wrong in (1.0, 1.5):
        with jax.disable_jit():
            eager = gv.check(softplus_mul, x, b, full=full)
        with compiling():
            compiled = gv.check(softplus_mul, x, b, full=full)
        assert eager.ok == compiled.ok == (wrong == 1.0), str(compiled)
        named = {(f.kind, f.input_index) for f in compiled.errors}
        assert named == {(f.kind, f.input_index) for f in eager.errors}, str(compiled)
        assert {index for _, index in named} <= {(3,)}, str(compiled)


def test_a_verify_run_compiles_fn_once_not_per_evaluation():
    calls = []

    def fn(x):
        calls.append(1)  # runs while jax traces, not per compiled call
        return jnp.tanh(x)

    r = gv.verify(fn, float_rows(), max_examples=20, seed=0)
    assert r.ok and r.examples_run == 20
    # each check evaluates fn ~17 times (~340 Python calls eagerly); two of
    # them eagerly at the point (mutation and nondeterminism), the rest - the
    # float64 oracle's centre among them - compiled, traced a few times
    assert 2 * 20 <= len(calls) < 2 * 20 + 40


def test_a_check_on_small_arrays_compiles_fn_whole_not_its_operations_per_batch_size():
    """A check's vectorised calls stack the Jacobian's columns, its rows and
    the stencil's points along new batch sizes. Eager jax would compile each
    of fn's operations again for each of them; the check compiles fn (and its
    derivatives) whole instead, so the only operations compiled alone are
    those of the two eager evaluations at the point, at the point's shape.
    (Read from jax's own compilation log.)"""

    def fn(x, y):
        z = x * y
        for k in range(4):
            z = jnp.sin(z) + jnp.cos(x * k) * jnp.tanh(y - k)
        return z

    with jax.enable_x64(True):
        x, y = jnp.linspace(0.1, 0.9, 7), jnp.linspace(-0.5, 0.5, 7)
        r, compiled = _compilations(lambda: gv.check(fn, x, y))
    assert r.ok and r.strategy.startswith("full Jacobian"), str(r)
    operations = [m for m in compiled if not m.startswith("Compiling jit(<lambda>)")]
    assert any("jit(sin)" in m for m in operations), compiled  # (the log is read: the eager point's sin)
    batched = [m for m in operations if re.search(r"ShapedArray\(float64\[\d+,7\]", m)]
    assert not batched, batched


def _compilations(run):
    """run()'s result and jax's "Compiling ..." log lines while it ran."""
    compiled: list[str] = []

    class Log(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("Compiling "):
                compiled.append(record.getMessage())

    handler = Log()
    logger = logging.getLogger("jax")
    logger.addHandler(handler)
    try:
        with jax.log_compiles(True):
            return run(), compiled
    finally:
        logger.removeHandler(handler)


def test_a_check_that_repeats_an_earlier_one_compiles_nothing():
    """Each check traces fn anew; where the trace is an earlier check's
    program (same function, shapes and constants) its executable is reused."""

    def fn(x, y):
        return jnp.tanh(x * y) + jnp.sin(x) * 0.25

    with jax.enable_x64(True):
        x, y = jnp.linspace(0.1, 0.9, 5), jnp.linspace(-0.5, 0.5, 5)
    first, compiled = _compilations(lambda: gv.check(fn, x, y))
    assert first.ok and compiled, str(first)  # (the log is read)
    again, compiled = _compilations(lambda: gv.check(fn, x, y))
    assert again.ok and compiled == [], compiled
    assert again.to_dict() == first.to_dict()


@pytest.mark.standard_promotion
def test_a_check_traces_fn_once_per_precision_and_transforms_that_trace():
    """fn's Python runs once per check and precision under jit's tracer: its
    JVP, VJP and batches of evaluations are jax's transformations of that
    trace, not traces of their own (before, each of them traced fn again)."""
    calls = []

    def fn(x, y):
        calls.append(isinstance(x, jax.core.Tracer))
        return jnp.tanh(x * y) + jnp.sin(x) * 0.25

    with jax.enable_x64(True):
        x, y = jnp.linspace(0.1, 0.9, 5), jnp.linspace(-0.5, 0.5, 5)
    for args, precisions in (((x, y), 1), ((x.astype(jnp.float32), y.astype(jnp.float32)), 2)):
        for _ in range(2):  # (the first check and one that repeats it)
            calls.clear()
            r = gv.check(fn, *args)
            assert r.ok and r.modes["JVP"] == r.modes["VJP"] == "checked", str(r)
            assert calls.count(True) == precisions, calls  # (the two eager calls at the point besides)


def test_a_function_with_a_custom_rule_is_evaluated_from_its_one_trace():
    """A custom rule plays no part in evaluating fn: its flat and batched
    evaluations come from fn's one trace (its body runs once per check under
    jit's tracer, not once per form); its JVP and VJP, which run the rule,
    are traced with it (the next test: an edited rule is seen)."""
    calls = []

    @jax.custom_jvp
    def f(x):
        calls.append(isinstance(x, jax.core.Tracer))
        return jnp.sin(x)

    f.defjvp(lambda p, t: (jnp.sin(p[0]), jnp.cos(p[0]) * t[0]))
    with jax.enable_x64(True):
        x = jnp.linspace(-1.0, 1.0, 6)
    for _ in range(2):
        calls.clear()
        r = gv.check(f, x)
        assert r.ok and r.modes["JVP"] == r.modes["VJP"] == "checked", str(r)
        assert calls.count(True) == 1, calls


def test_an_edited_custom_rule_is_seen_though_the_function_is_not():
    """A custom derivative rule runs Python the function's trace does not
    show: its JVP and VJP are traced anew, never taken from the program of
    an earlier check whose function looked the same."""
    k = {"now": 1.0}

    @jax.custom_jvp
    def f(x):
        return jnp.sin(x)

    f.defjvp(lambda p, t: (f(p[0]), jnp.cos(p[0]) * t[0] * k["now"]))

    @jax.custom_vjp
    def g(x):
        return jnp.sin(x)

    g.defvjp(lambda x: (jnp.sin(x), x), lambda x, c: (c * jnp.cos(x) * k["now"],))
    with jax.enable_x64(True):
        x = jnp.linspace(-1.0, 1.0, 6)
    for fn in (f, g):
        k["now"] = 1.0
        assert gv.check(fn, x).ok
        k["now"] = -1.0
        bad = gv.check(fn, x)
        assert not bad.ok and bad.by_kind(gv.Kind.MISMATCH), str(bad)


def test_a_constant_or_a_callback_edited_between_checks_is_seen():
    """A reused executable is never a stale one: a closed-over array edited in
    place between two checks, an inner jitted function closing over other
    values, or a Python callback replaced by another of the same name, is
    what the second check evaluates (the claimed derivative stays the first
    one's: the second check fails)."""
    w = np.ones(6)

    @jax.custom_jvp
    def scaled(x):
        return jnp.sin(x) * w

    scaled.defjvp(lambda p, t: (scaled(p[0]), jnp.cos(p[0]) * t[0]))  # right while w is 1
    with jax.enable_x64(True):
        x = jnp.linspace(-1.0, 1.0, 6)
    assert gv.check(scaled, x).ok
    w[:] = 2.0
    assert not gv.check(scaled, x).ok

    def host_for(k):
        def host(v):
            return np.sin(v) * k

        return host

    def inner_for(k):
        weights = np.full(6, k)

        @jax.jit
        def inner(x):  # (an inner jit keeps its constants in its own jaxpr)
            return jnp.sin(x) * weights

        return inner

    inner = {"now": inner_for(1.0)}

    @jax.custom_jvp
    def nested(x):
        return inner["now"](x)

    nested.defjvp(lambda p, t: (nested(p[0]), jnp.cos(p[0]) * t[0]))  # right for k = 1
    assert gv.check(nested, x).ok
    inner["now"] = inner_for(2.0)
    assert not gv.check(nested, x).ok
    inner["now"] = inner_for(1.0)  # (and back: the first program's executable again, rightly)
    assert gv.check(nested, x).ok

    state = {"host": host_for(1.0)}

    @jax.custom_jvp
    def called(x):
        return jax.pure_callback(state["host"], jax.ShapeDtypeStruct(x.shape, x.dtype), x, vmap_method="sequential")

    called.defjvp(lambda p, t: (called(p[0]), jnp.cos(p[0]) * t[0]))  # right for k = 1
    assert gv.check(called, x).ok
    state["host"] = host_for(3.0)
    assert not gv.check(called, x).ok


def test_a_custom_vjp_has_no_forward_mode_in_jaxs_words_called_directly_or_wrapped():
    """A custom_vjp is refused forward mode before it is traced; the reason is
    jax's own, word for word what tracing it inside a wrapper finds out, and
    the reverse mode is still checked (and a wrong rule caught) either way."""

    def sin_with(wrong):
        @jax.custom_vjp
        def f(x):
            return jnp.sin(x)

        f.defvjp(lambda x: (jnp.sin(x), x), lambda x, g: (g * jnp.cos(x) * wrong,))
        return f

    with jax.enable_x64(True):
        x = jnp.linspace(-1.0, 1.0, 5)
    for wrong in (1.0, -1.0):
        f = sin_with(wrong)
        direct, wrapped = gv.check(f, x), gv.check(lambda x, f=f: f(x), x)
        reasons = []
        for r in (direct, wrapped):
            assert r.modes["JVP"] == "unavailable" and r.modes["VJP"] == "checked", str(r)
            assert r.ok == (wrong == 1.0), str(r)
            reasons.append([f.message for f in r.findings if f.kind == gv.Kind.MODE_UNAVAILABLE])
        assert reasons[0] == reasons[1] and "custom_vjp" in reasons[0][0], reasons


def test_under_disable_jit_a_check_traces_nothing():
    """jax.disable_jit() around a check runs fn eagerly: it never sees jit's
    tracer (vmap's and the JVP's are eager jax's own)."""
    seen = set()

    def fn(x):
        seen.add(type(x).__name__)
        return jnp.sin(x)

    with jax.enable_x64(True):
        x = jnp.linspace(-1.0, 1.0, 4)
    with jax.disable_jit():
        assert gv.check(fn, x).ok
    assert "DynamicJaxprTracer" not in seen, seen
    assert gv.check(fn, x).ok
    assert "DynamicJaxprTracer" in seen, seen  # (the test can see a trace)


def test_a_small_check_compiles_each_form_of_fn_once_and_no_flat_twin():
    """A small check compiles fn whole once per form: fn itself (the oracle's
    float64 centre is its output, flattened after, not a flat program of its
    own), the JVPs and the VJPs (float32 inputs: in float32 and in float64)
    and the batched stencil - six programs, however many columns."""

    def fn(x):
        return jnp.tanh(x) * 0.5 + jnp.sin(x) * x

    x = jnp.asarray(np.linspace(0.1, 0.9, 12, dtype=np.float32).reshape(3, 4))
    r, compiled = _compilations(lambda: gv.check(fn, x))
    assert r.ok and r.strategy.startswith("full Jacobian"), str(r)
    whole = [m for m in compiled if m.startswith("Compiling jit(<lambda>)")]
    assert len(whole) == 6, whole


def test_a_single_check_of_a_few_operations_runs_eagerly_and_shares_their_programs():
    """fn of a few operations (at most EAGER_OPERATIONS) is checked eagerly:
    no program of fn's own is compiled, and a later check of another such
    function at the same shape reuses the programs of the operations they
    share (its checker-side ones included); the checks of its derivatives
    (order 2) run eagerly too. Inside gv.compiling() it is compiled whole,
    as a larger function is outside one."""
    # (a shape no other test uses: no program of it compiled before)
    x = jnp.asarray(np.linspace(0.1, 0.9, 21, dtype=np.float32).reshape(3, 7))
    first, compiled = _compilations(lambda: gv.check(lambda a: jnp.sin(a) * a, x, order=2))
    assert first.ok and first.modes["JVP of VJP"] == "checked", str(first)
    assert not [m for m in compiled if m.startswith("Compiling jit(<lambda>)")], compiled
    again, recompiled = _compilations(lambda: gv.check(lambda a: jnp.cos(a) * a, x, order=2))
    assert again.ok, str(again)
    assert 0 < len(recompiled) < len(compiled) / 2, (len(recompiled), len(compiled))
    with gv.compiling():
        inside, whole = _compilations(lambda: gv.check(lambda a: jnp.tan(a) * a, x))
    assert inside.ok and len([m for m in whole if m.startswith("Compiling jit(<lambda>)")]) == 6, whole


def test_a_complex_function_of_a_few_operations_runs_eagerly_its_view_not_counted():
    """The operations counted are fn's own, not those of the complex view
    it is checked through (its real and imaginary parts split and joined):
    a one-operation complex function is checked eagerly, order 2 included,
    and a second at the same shape reuses most of the programs."""
    # (a shape no other test uses)
    rng = np.random.default_rng(3)
    x = jnp.asarray((rng.uniform(-2, 2, (2, 5)) + 1j * rng.uniform(-2, 2, (2, 5))).astype(np.complex64))
    first, compiled = _compilations(lambda: gv.check(lambda a: jnp.cos(a), x, order=2))
    assert first.ok and first.modes["JVP of VJP"] == "checked", str(first)
    assert not [m for m in compiled if m.startswith("Compiling jit(<lambda>)")], compiled
    again, recompiled = _compilations(lambda: gv.check(lambda a: jnp.sin(a), x, order=2))
    assert again.ok, str(again)
    assert 0 < len(recompiled) < len(compiled) / 4, (len(recompiled), len(compiled))


def test_the_checkers_own_conversions_compile_one_program_not_one_per_operation():
    """Eagerly, the checker's own steps between fn's calls compile as few
    programs as they can: a host array becomes a jax array of another
    dtype by a numpy cast (no conversion program per shape), and the VJP's
    parts are flattened and joined by one program (not a ravel per part)."""
    # (shapes no other test uses)
    x = jnp.asarray(np.linspace(-1.0, 1.0, 11, dtype=np.float32))
    y = jnp.asarray(np.linspace(0.5, 1.5, 3, dtype=np.float32))
    start = np.array([4])
    r, compiled = _compilations(lambda: gv.check(lambda a, b: jax.lax.dynamic_update_slice(a, b, start), x, y, order=2))
    assert r.ok and r.modes["JVP of VJP"] == "checked", str(r)
    assert not [m for m in compiled if m.startswith("Compiling jit(ravel)")], compiled
    converts = [m for m in compiled if m.startswith("Compiling jit(convert_element_type)")]
    assert len(converts) <= 4, converts
