"""float32: the same bugs are still caught (a flipped element, located), and
rounding at the function's own scale (saturated tanh) is no false alarm."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv

from .._helpers import flipped_tanh_bias, make


@pytest.mark.parametrize("backend", ["numpy", "torch", "jax"])
def test_flipped_element_caught_in_float32(backend):
    rng = np.random.default_rng(11)
    flip_at = 777
    x = make(backend, rng.standard_normal((1000, 10)).astype(np.float32))
    b = make(backend, rng.standard_normal(10).astype(np.float32))
    r = gv.check(flipped_tanh_bias(backend, 10, flip_at), x, b)
    assert not r.ok
    f = r.by_kind(gv.Kind.MISMATCH)[0]
    assert f.input_index == (77, 7)


def test_saturated_tanh_is_no_false_alarm():
    """1 - tanh(z)^2 near saturation rounds relative to 1, not to its tiny
    result: jax's forward and reverse mode differ by 1e-16 at z = -5 (found by
    `gradverify check all`), torch's float32 derivative at z = 9 is off by
    half its size. Both are rounding at the function's own scale, not bugs."""
    import jax
    import jax.numpy as jnp
    import torch

    with jax.enable_x64(True):
        r = gv.check(jnp.tanh, jnp.asarray([[-5.0]]))
    assert r.ok, str(r)
    r = gv.check(torch.tanh, torch.tensor([9.0], dtype=torch.float32))
    assert r.ok, str(r)
    # and a wrong slope at that point is still caught
    wrong = gv.Rule(np.tanh, jvp=lambda p, t: 2 * (1 - np.tanh(p[0]) ** 2) * t[0])
    assert not gv.check(wrong, np.array([-5.0])).ok
