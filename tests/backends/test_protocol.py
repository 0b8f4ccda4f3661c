"""Every backend of the registry (gradverify.backends.BACKENDS) keeps the one
protocol the checker relies on: it is recognised from its arrays, hands
copies back and forth without sharing memory or losing a bit, and - where it
has AD - its JVP, VJP and their vectorised forms agree with the derivative.
A backend added to the registry is tested here by adding its name."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv
from gradverify._errors import ModeUnavailable
from gradverify.backends import BACKENDS, backend_name_of, backend_of, require_backend_name
from gradverify.strategies._arrays import to_backend

from .._helpers import precise


def _sin(backend):
    if backend == "torch":
        import torch

        return torch.sin
    if backend == "jax":
        import jax.numpy as jnp

        return jnp.sin
    return np.sin


def test_the_registry_is_what_every_part_offers():
    from gradverify import cli, ops, strategies
    from gradverify._sweep import cases as _sweep

    assert BACKENDS == ("numpy", "torch", "jax")
    assert cli.BACKENDS is BACKENDS and _sweep.BACKENDS is BACKENDS and strategies.BACKENDS is BACKENDS
    with pytest.raises(gv.ArgumentTypeError, match="a numpy array, a torch tensor or a jax array"):
        require_backend_name([1.0, 2.0])
    with pytest.raises(gv.ArgumentTypeError, match="convert it with np.asarray"):
        ops.bias_act("relu", [1.0, 2.0])  # (the ops ask the same registry)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_backend_conforms(backend):
    values = np.array([[0.5, -1.25, 3.0], [1e-300, -0.0, 2.0**-30]])
    with precise(backend):
        x = to_backend(values, backend, "float64")
        assert backend_name_of(x) == backend == require_backend_name(x)
        b = backend_of([x, x])
        assert b.name == backend and b.dtype_name(x) == "float64" and b.is_floating(x)
        # copies both ways, bit for bit, never a view of the caller's array
        a = b.to_numpy(x)
        assert a.dtype == np.float64 and np.array_equal(a, values) and np.signbit(a[1, 1])
        a[0, 0] = 99.0
        assert b.to_numpy(x)[0, 0] == 0.5
        # to be read: the same bits; a copy where the caller's array can change,
        # else (jax) a read-only view of its own memory, which nothing can write
        h = b.to_host(x)
        assert h.dtype == np.float64 and np.array_equal(h, values) and np.signbit(h[1, 1])
        if backend == "jax":
            assert not h.flags.writeable and np.shares_memory(h, np.asarray(x))
            with pytest.raises(ValueError, match="read-only"):
                h[0, 0] = 99.0
        else:
            h[0, 0] = 99.0
            assert b.to_numpy(x)[0, 0] == 0.5
        y = b.from_numpy(values.copy(), x, "float32")
        assert b.dtype_name(y) == "float32" and np.array_equal(b.to_numpy(y), values.astype(np.float32))
        w = b.to_working(x)
        assert np.array_equal(np.asarray(b.to_numpy(w)), values)
        sin = _sin(backend)
        tangent = to_backend(np.ones_like(values), backend, "float64")
        if backend == "numpy":
            with pytest.raises(ModeUnavailable):
                b.jvp(sin, [x], (0,), [tangent])
            return
        expected = np.cos(values)
        assert np.allclose(b.to_numpy(b.jvp(sin, [x], (0,), [tangent])), expected, rtol=1e-15, atol=0)
        (g,) = b.vjp(sin, [x], (0,), tangent)
        assert np.allclose(b.to_numpy(g), expected, rtol=1e-15, atol=0)
        basis = np.eye(values.size).reshape(values.size, *values.shape)
        stacked = to_backend(basis, backend, "float64")
        cols = b.to_numpy(b.jvps(sin, [x], (0,), [stacked]))
        assert np.allclose(cols.reshape(values.size, -1), np.diag(expected.reshape(-1)), rtol=1e-15, atol=0)
        (rows,) = b.vjps(sin, [x], (0,), stacked)
        assert np.allclose(b.to_numpy(rows).reshape(values.size, -1), np.diag(expected.reshape(-1)), rtol=1e-15, atol=0)
        points = to_backend(values[None] + np.arange(3.0)[:, None, None], backend, "float64")
        at = b.to_numpy(b.primals(sin, [x], (0,), [points]))
        assert np.array_equal(at, np.stack([b.to_numpy(sin(p)) for p in points]))  # fn's own values


def test_a_jax_check_reads_its_arguments_and_fns_outputs_where_they_lie():
    """jax arrays never change: the checker's working arrays of a float64
    argument and of fn's output are views of their own memory, read-only (a
    write by the checker would raise), not copies."""
    jnp = pytest.importorskip("jax.numpy")
    from gradverify._check.evaluate import Evaluator

    with precise("jax"):
        x = to_backend(np.linspace(-1.0, 1.0, 12).reshape(3, 4), "jax", "float64")
        ev = Evaluator(jnp.sin, backend_of([x]), [x], (0,))
        assert np.shares_memory(ev.values[0], np.asarray(x)) and not ev.values[0].flags.writeable
        out, dtype, _ = ev.primal_raw()
        assert dtype == "float64" and not out.flags.writeable
        assert np.array_equal(out, np.sin(np.linspace(-1.0, 1.0, 12).reshape(3, 4)))
        y = jnp.sin(x)
        assert np.shares_memory(ev.working(y), np.asarray(y))
