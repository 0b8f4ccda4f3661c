"""A full Jacobian's columns estimated together: one stencil for the columns
whose outputs AD says are disjoint, each with its own step. Right where the
function is as local as AD says (bit for bit what each column's own stencil
gives), and no hiding place for a rule that is wrong about which output an
input moves."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import gradverify as gv
from gradverify import _fd, _probes
from gradverify._compare import Bounds
from gradverify._oracle import GROUP_SEPARATION, Oracle

from .test_stages import stages


def _oracle(fn, *args, together=True):
    ev, _, primal, precision, probes, _, modes = stages(fn, *args, full=True)
    oracle = Oracle(ev, primal, precision, probes)
    bounds = Bounds(oracle, modes, ev.dtypes, None, None)
    oracle.first_order(modes.jvps, bounds.jvp, modes.vjps, together=together)
    return ev, oracle


def _silu_x_plus_b(x, b):
    return torch.nn.functional.silu(x + b)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_columns_estimated_together_are_bit_for_bit_each_columns_own(dtype):
    g = torch.Generator().manual_seed(3)
    x = (torch.rand(3, 4, generator=g, dtype=torch.float64) * 8 - 4).to(dtype)
    b = (torch.rand(4, generator=g, dtype=torch.float64) * 2 - 1).to(dtype)
    ev_t, together = _oracle(_silu_x_plus_b, x, b)
    ev_a, alone = _oracle(_silu_x_plus_b, x, b, together=False)
    assert together.together  # the columns were grouped...
    assert ev_t.counts["primal"] < ev_a.counts["primal"] / 3  # ...and took fewer evaluations
    for r_t, r_a in zip(together.refs, alone.refs):
        assert r_t.modelled and r_a.modelled
        assert np.array_equal(r_t.value, r_a.value)
        assert np.array_equal(r_t.err, r_a.err)


def test_an_elementwise_check_takes_at_most_one_stencil_more_at_24_inputs_than_at_4():
    counts = []
    for n in (4, 24):
        x = torch.linspace(-3, 3, n, dtype=torch.float64)
        r = gv.check(torch.sin, x)
        assert r.ok, str(r)
        assert r.strategy.startswith("full Jacobian")
        counts.append(r.evaluations["primal"])
    # (24 steps spread over a factor of 2 do not all lie 2^(1/32) apart: two groups)
    assert counts[1] <= counts[0] + len(_fd.MODEL_OFFSETS)


def test_steps_of_columns_estimated_together_are_separated():
    ev, oracle = _oracle(torch.sin, torch.full((12,), 0.5, dtype=torch.float64))
    groups = {tuple(g) for g in oracle.together.values()}
    assert groups and max(len(g) for g in groups) > 1
    for g in groups:
        logs = np.log2([oracle.probes.cs[b] for b in g])
        gaps = np.abs(logs[:, None] - logs[None, :])[~np.eye(len(g), dtype=bool)]
        assert gaps.min() >= np.log2(GROUP_SEPARATION)
    assert all(0.7 < _probes.spread(j) < 1.42 for j in range(64))


class _Swapped(torch.autograd.Function):
    """sin, whose rules give input 0's derivative to output 1 and input 1's to
    output 0 - in both modes, so that they agree with each other."""

    @staticmethod
    def forward(x):
        return torch.sin(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    @staticmethod
    def _d(x):
        d = torch.cos(x)
        return d[[1, 0, *range(2, len(d))]]

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        g = g * _Swapped._d(x)
        return g[[1, 0, *range(2, len(g))]]

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return (t * torch.cos(x))[[1, 0, *range(2, len(t))]]


def test_a_rule_that_swaps_two_inputs_of_one_magnitude_is_caught_at_the_right_elements():
    # Every |x_j| the same and cos(x_0) = cos(x_1): with equal steps, the two
    # columns estimated together would each read the other's derivative as
    # its own, exactly. Their steps differ (spread), so the estimate moves by
    # their ratio, which the model does not accept.
    x = torch.tensor([0.5, -0.5, 0.5, -0.5, 0.5, -0.5], dtype=torch.float64)
    _, right = _oracle(torch.sin, x)
    assert set(right.together) == set(range(6))  # (the right rule: estimated together)
    r = gv.check(_Swapped.apply, x)
    assert not r.ok
    m = r.by_kind(gv.Kind.MISMATCH)[0]
    assert {m.output_index, m.input_index} <= {(0,), (1,)}
    assert gv.check(torch.sin, x).ok


class _Leaky(torch.autograd.Function):
    """x + 1e-3 x rolled by one: a rule that forgets the rolled term - the
    outputs AD says are disjoint are not."""

    @staticmethod
    def forward(x):
        return x + 1e-3 * torch.roll(x, 1)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, g):
        return g

    @staticmethod
    def jvp(ctx, t):
        return t


def test_a_rule_that_misses_a_neighbours_term_is_named_at_that_term():
    x = torch.linspace(-2, 2, 6, dtype=torch.float64)
    r = gv.check(_Leaky.apply, x)
    assert not r.ok
    m = r.by_kind(gv.Kind.MISMATCH)[0]
    # d out[i] / d x[i - 1] = 1e-3, where AD says 0
    assert m.output_index[0] == (m.input_index[0] + 1) % 6
    assert abs(m.values["FD"] - 1e-3) < 1e-8


class _Detached(torch.autograd.Function):
    """sin(x) with one more output, sum(x), whose gradient the rule drops: no
    column claims that output, and it moves."""

    @staticmethod
    def forward(x):
        return torch.cat([torch.sin(x), x.sum().reshape(1)])

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g[:-1] * torch.cos(x)

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return torch.cat([t * torch.cos(x), torch.zeros(1, dtype=t.dtype)])


def test_an_output_no_column_claims_that_moves_is_caught():
    x = torch.linspace(-2, 2, 5, dtype=torch.float64)
    r = gv.check(_Detached.apply, x)
    assert not r.ok
    m = r.by_kind(gv.Kind.MISMATCH)[0]
    assert m.output_index == (5,)
    assert abs(m.values["FD"] - 1.0) < 1e-8


def test_the_callers_tolerances_estimate_every_column_alone():
    x = torch.linspace(-2, 2, 8, dtype=torch.float64)
    loose = gv.check(torch.sin, x, rtol=1e-3)
    tight = gv.check(torch.sin, x)
    assert loose.ok and tight.ok
    assert loose.evaluations["primal"] > 2 * tight.evaluations["primal"]


def test_model_only_declines_what_the_model_does_not_accept():
    # a kink inside the stencil: the model flags it, and points estimated
    # elsewhere give no reference (the column is then estimated alone)
    h = 1e-3
    f0 = np.zeros(3)
    points = {k: np.abs(np.array([1.0, 2.0, 3.0]) * k * h / 4) for k in _fd.MODEL_OFFSETS}
    got = _fd.model_only(
        lambda t: np.abs(np.array([1.0, 2.0, 3.0]) * t),
        f0,
        h,
        1e-12,
        2.0**-53,
        0.0,
        points,
        f0_scale=0.0,
        inputs=1.0,
        ad=None,
        point=1.0,
    )
    assert got is None
