"""Normalization references: agree with torch.nn.functional (and numpy with
torch) on cases that make the usual bugs visible: weight != 1, n = 2 or 3,
distinct axis sizes, C = 4 with 2 groups, rows with small variance; gv.check
catches statistics treated as constants; running statistics match torch;
bad shapes say what to change."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv
from gradverify import ops

from .._helpers import make, precise
from ._helpers import CASES, IMPLS, data, tt


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("shape", [(3, 4, 5), (2, 4, 3, 2)])
def test_agrees_with_torch(case, shape, impl):
    import torch.nn.functional as F

    x, w, b = data(shape)
    mine, theirs = CASES[case]
    got = mine(tt(x), tt(w), tt(b), impl)
    want = theirs(F, tt(x), tt(w), tt(b))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_numpy_values_match_torch(case, impl):
    x, w, b = data((2, 4, 3))
    mine = CASES[case][0]
    np.testing.assert_allclose(mine(x, w, b, impl), mine(tt(x), tt(w), tt(b)).numpy(), rtol=1e-12, atol=1e-13)


def test_gradient_bugs_the_usual_tests_hide_are_caught():
    """Statistics treated as constants: invisible with weight = 1 and a sum loss,
    caught with random cotangents (gv.check's) even at n = 2."""
    import torch

    def detached_stats(x):
        m = x.mean(-1, keepdim=True).detach()
        v = x.var(-1, unbiased=False, keepdim=True).detach()
        return (x - m) / torch.sqrt(v + 1e-5)

    x = torch.tensor(np.random.default_rng(0).standard_normal((2, 3)))
    assert not gv.check(detached_stats, x).ok
    assert gv.check(lambda x: ops.layer_norm(x, (3,)), x).ok


def test_running_statistics_match_torch_after_several_steps():
    import torch
    import torch.nn.functional as F

    rm, rv = torch.zeros(4, dtype=torch.float64), torch.ones(4, dtype=torch.float64)
    rm2, rv2 = rm.clone(), rv.clone()
    for step in range(5):
        x, w, b = data((3, 4, 2), seed=step)
        y1 = ops.batch_norm(tt(x), rm, rv, tt(w), tt(b), training=True, momentum=0.2)
        y2 = F.batch_norm(tt(x), rm2, rv2, tt(w), tt(b), training=True, momentum=0.2)
        torch.testing.assert_close(y1, y2)
    torch.testing.assert_close(rm, rm2)
    torch.testing.assert_close(rv, rv2)
    x, w, b = data((3, 4, 2), seed=9)
    torch.testing.assert_close(ops.batch_norm(tt(x), rm, rv, tt(w), tt(b)), F.batch_norm(tt(x), rm2, rv2, tt(w), tt(b)))


def test_running_statistics_jax_and_numpy():
    import torch

    x, w, b = data((3, 4, 2))
    rm, rv = np.zeros(4), np.ones(4)
    ops.batch_norm(x, rm, rv, w, b, training=True)
    rmt, rvt = torch.zeros(4, dtype=torch.float64), torch.ones(4, dtype=torch.float64)
    ops.batch_norm(tt(x), rmt, rvt, tt(w), tt(b), training=True)
    np.testing.assert_allclose(rm, rmt.numpy(), rtol=1e-13)
    np.testing.assert_allclose(rv, rvt.numpy(), rtol=1e-13)
    xj, rmj, rvj = make("jax", x), make("jax", np.zeros(4)), make("jax", np.ones(4))
    with precise("jax"):
        with pytest.raises(gv.ArgumentTypeError, match="pass return_stats=True"):
            ops.batch_norm(xj, rmj, rvj, training=True)
        y, m, v = ops.batch_norm(xj, rmj, rvj, training=True, return_stats=True)
    np.testing.assert_allclose(np.asarray(m), rm, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(v), rv, rtol=1e-6)


def test_low_precision_statistics_in_float32():
    import torch
    import torch.nn.functional as F

    x = torch.tensor(data((3, 4, 5))[0]).to(torch.bfloat16)
    got = ops.layer_norm(x, (5,))
    assert got.dtype == torch.bfloat16
    want = F.layer_norm(x.float(), (5,)).to(torch.bfloat16)
    torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)


def test_bad_shapes_say_what_to_change(backend):
    x = make(backend, np.ones((2, 6, 3)))
    with pytest.raises(
        gv.ArgumentValueError,
        match=r"a number of groups that divides the 6 channels; found 4. "
        r"Fix: use one of \[1, 2, 3, 6\]",
    ):
        ops.group_norm(x, 4)
    with pytest.raises(gv.ArgumentValueError, match="more than one value per channel"):
        ops.batch_norm(make(backend, np.ones((1, 6))), None, None, training=True)
    with pytest.raises(gv.ArgumentValueError, match=r"x's trailing dimensions equal to \(6,\)"):
        ops.layer_norm(x, (6,))
    with pytest.raises(gv.ArgumentValueError, match=r"weight: expected shape \(6,\)"):
        ops.group_norm(x, 2, make(backend, np.ones(3)))
    with pytest.raises(gv.ArgumentValueError, match="impl: expected 'reference' or 'fused'; found 'fast'"):
        ops.layer_norm(x, (3,), impl="fast")
