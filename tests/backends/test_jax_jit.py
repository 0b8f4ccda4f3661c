"""Within a gv.verify run, jax functions are jit-compiled (fn, its JVP and its
VJP), falling back to eager evaluation where fn cannot be traced; a single
gv.check on small arrays compiles its own, traced anew so that it sees fn as
it is now. The verdicts do not change."""

from __future__ import annotations

import contextlib
import gc
import weakref

import numpy as np
import pytest

import gradverify as gv
from gradverify import ArgumentTypeError, compiling

from ._helpers import float_rows

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")


def test_a_single_check_sees_fn_as_it_is_now():
    state = {"k": 1.0}

    def fn(x):
        return state["k"] * jnp.sin(x)

    @jax.custom_jvp
    def claimed(x):
        return fn(x)

    claimed.defjvp(lambda p, t: (claimed(p[0]), jnp.cos(p[0]) * t[0]))  # right only for k = 1
    x = jnp.asarray(np.linspace(-2, 2, 40))
    assert gv.check(claimed, x).ok
    state["k"] = 2.0
    assert not gv.check(claimed, x).ok


@pytest.mark.parametrize("amplitude", [1e-2, 0.0], ids=["drawn", "none"])
@pytest.mark.parametrize("n", [40, 100_000], ids=["small", "large"])
@pytest.mark.parametrize("session", [False, True], ids=["check", "session"])
@pytest.mark.parametrize("x64", [False, True], ids=["float32", "float64"])
def test_a_random_draw_inside_fn_is_still_nondeterminism_in_a_session(x64, session, n, amplitude):
    """fn's compiled form draws once, at its trace: its points agree with
    each other, and a directional check passes every comparison decisively
    (jax compiles fn for a large check's evaluations, in a gv.compiling()
    session or not; a session checks small inputs along directions too).
    Only fn's eager first call at the point differs from them - in float32
    against a float64 run - and must be said; the same function without
    the draw is said to be nothing of the kind."""
    rng = np.random.default_rng(0)

    def noisy(x):
        return jnp.sin(x) + 0.5 + amplitude * rng.standard_normal()

    with contextlib.ExitStack() as stack:
        stack.enter_context(jax.enable_x64(x64))
        if session:
            stack.enter_context(compiling())
        x = jnp.asarray(np.linspace(-1, 1, n))
        r = gv.check(noisy, x)
    assert str(x.dtype) == ("float64" if x64 else "float32")
    said = [f.kind for f in r.findings if f.level == "error"]
    assert (gv.Kind.NONDETERMINISM in said) == (amplitude > 0) and r.ok == (amplitude == 0), str(r)


def test_a_function_jit_cannot_trace_runs_eagerly_and_is_still_judged():
    def repeat(x, n):  # int(n): concrete only outside jit
        y = x
        for _ in range(int(n)):
            y = jnp.sin(y)
        return y

    x = jnp.asarray(np.linspace(-2, 2, 50))
    with compiling():
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


def test_an_integer_argument_read_in_python_is_compiled_as_the_constant_it_is():
    """int(n) of a traced argument fails a trace; integer arguments are
    constants of the check, so the forms take their values into the program
    (one per value) instead of running fn eagerly, operation by operation. A
    float read in Python still makes fn run eagerly."""
    from gradverify.backends.jax_compiled import compiled

    traces = []

    def repeat(x, n):
        traces.append(type(x).__name__)
        y = x
        for _ in range(int(n)):
            y = jnp.sin(y)
        return y

    def scaled(x, s):  # float(s): concrete in eager AD of x alone, not under jit
        return jnp.sin(x) * (2.0 if float(s) > 0 else 1.0)

    x = jnp.asarray(np.linspace(-2, 2, 50))
    with compiling():
        assert gv.check(repeat, x, jnp.asarray(2)).ok
        entry = compiled(repeat)
        assert entry.baked and all(entry.ok.values()), entry.ok
        assert any("Tracer" in t for t in traces)
        traced = sum("Tracer" in t for t in traces)
        assert gv.check(repeat, x, jnp.asarray(3)).ok  # (another value: another program)
        assert sum("Tracer" in t for t in traces) > traced
        assert gv.check(scaled, x, jnp.asarray(1.0), wrt=0).ok
        assert not compiled(scaled).ok["primal"] and not compiled(scaled).baked


def test_what_fn_returns_is_judged_as_written_not_as_jit_would_make_it():
    with compiling(), pytest.raises(ArgumentTypeError, match="found builtins.float"):
        gv.check(lambda x: 1.0, jnp.asarray(np.linspace(-1, 1, 5)))


def test_the_compiled_forms_do_not_keep_fn_alive():
    def fn(x):
        return jnp.sin(x) * 2.0

    with compiling():
        assert gv.check(fn, jnp.asarray(np.linspace(-1, 1, 40))).ok
        ref = weakref.ref(fn)
        del fn
        gc.collect()
        assert ref() is None


def test_a_compiling_block_shares_the_compiled_forms_across_verify_runs():
    calls = []

    def fn(x):
        calls.append(1)
        return jnp.sin(x)

    with gv.compiling():
        assert gv.verify(fn, float_rows(), max_examples=5, seed=0).ok
        first = len(calls)
        assert gv.verify(fn, float_rows(), max_examples=5, seed=1).ok
    # the second run traces nothing: only its two eager evaluations a check
    assert len(calls) - first == 2 * 5


def _programs_compiled(run):
    """The programs jax compiles while ``run()`` runs, as their text without
    source locations (two with one text are one program compiled twice)."""
    import re

    from jax._src import compiler  # (the one place every compilation passes)

    texts, original = [], compiler.backend_compile_and_load

    def compile_and_load(backend, module, *args, **kwargs):
        texts.append(re.sub(r"loc\(.*?\)|#loc\d*", "", str(module)))
        return original(backend, module, *args, **kwargs)

    compiler.backend_compile_and_load = compile_and_load
    try:
        out = run()
    finally:
        compiler.backend_compile_and_load = original
    return texts, out


@pytest.mark.parametrize("order", [1, 2])
def test_a_check_compiles_each_of_its_programs_once(order):
    """jax runs a VJP's backward pass under the abstract mesh fn was
    linearized under, and keys compiled programs by it: the check sets that
    context for all its calls, so an operation its JVP, its stencil and its
    VJP share is compiled once, not once per context."""
    x = jnp.asarray(np.linspace(0.3, 1.7, 11, dtype=np.float32))  # (a shape no other test compiles at)
    texts, result = _programs_compiled(lambda: gv.check(jax.lax.sin, x, order=order))
    assert result.ok, str(result)
    twice = [t.splitlines()[0] for t in set(texts) if texts.count(t) > 1]
    assert texts and not twice, f"{len(twice)} of {len(texts)} programs compiled twice: {twice}"


def test_an_order_2_check_compiles_no_reshape_or_conversion_of_its_own():
    """lax.sin reshapes and converts nothing: at order 2 the VJP checked as
    a function keeps its argument's shape (a reshape compiles a program at
    every batch size it is vmapped at), and the cotangent and tangents held
    on the host are cast in numpy."""
    import re

    x = jnp.asarray(np.linspace(0.2, 1.8, 13, dtype=np.float32))  # (a shape no other test compiles at)
    texts, result = _programs_compiled(lambda: gv.check(jax.lax.sin, x, order=2))
    assert result.ok, str(result)
    own = [
        t.splitlines()[0]
        for t in texts
        if re.search(r"module @jit_(reshape|convert_element_type) ", t) and re.search(r"tensor<\d", t)
    ]
    assert not own, own


def _batch_sizes(texts, n):
    """The leading sizes of the batches of an (n,)-shaped argument that
    compiled programs take (1: an operand broadcast against a batch)."""
    import re

    return sorted({int(b) for t in texts for b in re.findall(rf"tensor<(\d+)x{n}x", t)} - {1})


@pytest.mark.parametrize("order", [1, 2])
def test_a_small_check_compiles_its_batches_at_one_size(order):
    """jax compiles each eager operation once per shape: a full Jacobian's
    JVPs, VJPs and stencil (and its derivatives' at order 2) run at the
    stencil's batch size, so that each of fn's operations compiles once."""
    x = jnp.asarray(np.linspace(0.3, 1.7, 7, dtype=np.float32))  # (a shape no other test compiles at)
    texts, result = _programs_compiled(lambda: gv.check(jax.lax.sin, x, order=order))
    assert result.ok, str(result)
    assert _batch_sizes(texts, 7) == [6 * 7 + 1]


def test_a_batch_of_large_arguments_is_not_padded():
    """A padded member costs fn's work on all its arguments: where they are
    large, the batches keep their own sizes."""
    x = jnp.asarray(np.linspace(0.3, 1.7, 9, dtype=np.float32))
    big = jnp.asarray(np.linspace(0.0, 1.0, 20000, dtype=np.float32))
    texts, result = _programs_compiled(lambda: gv.check(lambda x, b: jnp.sin(x) * b.mean(), x, big, wrt=0))
    assert result.ok and result.strategy.startswith("full Jacobian"), str(result)
    assert _batch_sizes(texts, 9) == [9, 6 * 9 + 1]


def test_a_mesh_the_caller_set_is_the_one_fn_sees():
    seen = []

    def fn(x):
        seen.append(jax.sharding.get_abstract_mesh())
        return jnp.tanh(x)

    mesh = jax.make_mesh((1,), ("batch",))
    with jax.set_mesh(mesh):
        assert gv.check(fn, jnp.asarray(np.linspace(-1, 1, 5))).ok
        expected = jax.sharding.get_abstract_mesh()
    assert not expected.empty and seen
    assert all(m == expected for m in seen), {str(m) for m in seen}


def test_check_grads_takes_numpy_arguments_without_compiling_a_cast():
    """jnp.asarray compiles a cast of a float64 numpy array where x64 is off
    (one program per shape); the drop-in places it as jnp.asarray would."""
    import re

    from gradverify.jax import check_grads

    x = np.linspace(0.2, 1.8, 17)  # (float64; a shape no other test compiles at)
    texts, _ = _programs_compiled(lambda: check_grads(jax.lax.sin, (x,), order=1, modes=["fwd", "rev"]))
    staged = [t.splitlines()[0] for t in texts if re.search(r"module @jit_(stage|convert_element_type) ", t)]
    assert not jax.config.jax_enable_x64 and not staged, staged


def test_a_vjp_that_is_the_identity_is_checked_at_order_2():
    """Its pullback returns the cotangent itself: a jax array, whatever the
    check cast it from."""
    for dtype in (np.float32, np.float64):
        x = jnp.asarray(np.linspace(-1, 1, 6, dtype=dtype).reshape(2, 3))
        result = gv.check(lambda x: jax.lax.transpose(x, (0, 1)), x, order=2)
        assert result.ok, str(result)
