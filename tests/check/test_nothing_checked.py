"""No PASS without a check: a check that compared no derivative fails with
``nothing_checked`` (or warns, with allow_unchecked=True); a partial one
says what it compared in its headline."""

from __future__ import annotations

import math

import numpy as np
import pytest

import gradverify as gv


def _nothing(r: gv.CheckResult) -> gv.Finding:
    (f,) = r.by_kind(gv.Kind.NOTHING_CHECKED)
    return f


def test_numpy_without_rules_is_not_a_pass_and_says_wrap_it_in_a_rule() -> None:
    r = gv.check(np.sin, np.linspace(0.1, 1.0, 4))
    assert not r.ok and str(r).startswith("gradverify FAILED")
    assert "gv.Rule" in _nothing(r).message and _nothing(r).level == gv.Level.ERROR
    allowed = gv.check(np.sin, np.linspace(0.1, 1.0, 4), allow_unchecked=True)
    assert allowed.ok and _nothing(allowed).level == gv.Level.WARNING
    with pytest.raises(gv.GradientError):
        gv.assert_gradients(np.sin, np.linspace(0.1, 1.0, 4))


@pytest.mark.filterwarnings("ignore:.*[Ss]parse.*:UserWarning")
def test_a_sparse_argument_into_an_op_with_no_rule_is_not_a_pass() -> None:
    torch = pytest.importorskip("torch")
    a = torch.tensor([[0.5, 0.0], [0.0, 1.5]], dtype=torch.float64).to_sparse()
    r = gv.check(lambda a: torch.special.gammainc(a.to_dense(), torch.full((2, 2), 0.3, dtype=torch.float64)), a)
    assert not r.ok and _nothing(r).level == gv.Level.ERROR, str(r)
    assert gv.check(lambda a: torch.sin(a.to_dense()), a).ok


def test_an_all_held_point_is_not_a_pass() -> None:
    torch = pytest.importorskip("torch")
    x = torch.tensor([0.5, 1.5], dtype=torch.float64)
    r = gv.check(lambda x: (-2.0) ** x, x)  # (negative bases: every output NaN)
    assert not r.ok and "another point" in _nothing(r).message, str(r)
    assert gv.check(lambda x: (-2.0) ** x, x, allow_unchecked=True).ok
    masked = torch.tensor([-math.inf, -math.inf], dtype=torch.float64)
    held = gv.check(lambda m, y: torch.softmax(m, 0) * y, masked, x, wrt=0)
    assert not held.ok and held.by_kind(gv.Kind.NOTHING_CHECKED), str(held)


def test_verify_counts_a_point_with_nothing_to_compare_inconclusive_but_never_a_pass() -> None:
    torch = pytest.importorskip("torch")
    from hypothesis import strategies as st

    x = torch.tensor([0.5, 1.5], dtype=torch.float64)
    v = gv.verify(lambda x: (-2.0) ** x, st.just((x,)), max_examples=3)
    assert not v.ok and v.counterexample is None and v.inconclusive == v.examples_run >= 1
    assert "no example compared a derivative" in str(v)
    assert gv.verify(lambda x: (-2.0) ** x, st.just((x,)), max_examples=3, allow_unchecked=True).ok
    mixed = st.sampled_from([(x,), (torch.tensor([-0.5, -1.5], dtype=torch.float64),)])
    assert gv.verify(lambda x: torch.sqrt(x) if bool(x[0] > 0) else x * math.nan, mixed, max_examples=10).ok


def test_a_function_with_no_jvp_passes_saying_vjp_only() -> None:
    torch = pytest.importorskip("torch")

    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):  # type: ignore[no-untyped-def]
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):  # type: ignore[no-untyped-def]
            (x,) = ctx.saved_tensors
            return 2 * x * g

    r = gv.check(Square.apply, torch.tensor([0.5, 1.5], dtype=torch.float64))
    assert r.ok and str(r).startswith("gradverify PASSED (VJP only; JVP unavailable)"), str(r)
    assert not r.by_kind(gv.Kind.NOTHING_CHECKED)


def test_where_fd_decides_nothing_the_modes_compared_with_each_other_are_a_check() -> None:
    """gelu's far tail (x + b = -9.3): finite differences cannot resolve the
    function as computed, yet forward and reverse mode were compared with
    each other (the adjoint identity): a check, inconclusive where FD could
    not decide. With reverse mode alone there is nothing left to compare."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    x = torch.tensor([-11.997695026560104], dtype=torch.float64)
    b = torch.tensor([2.712293679994775], dtype=torch.float64)
    both = gv.check(lambda x, b: F.gelu(x + b), x, b)
    assert both.ok and both.inconclusive and not both.by_kind(gv.Kind.NOTHING_CHECKED), str(both)
    (fd_none,) = both.by_kind(gv.Kind.NOTHING_COMPARED)
    assert "compared, with each other" in fd_none.message

    class ReverseOnly(torch.autograd.Function):
        @staticmethod
        def forward(ctx, z):  # type: ignore[no-untyped-def]
            ctx.save_for_backward(z)
            return F.gelu(z)

        @staticmethod
        def backward(ctx, g):  # type: ignore[no-untyped-def]
            (z,) = ctx.saved_tensors
            cdf = 0.5 * (1 + torch.erf(z / math.sqrt(2)))
            return g * (cdf + z * torch.exp(-0.5 * z * z) / math.sqrt(2 * math.pi))

    alone = gv.check(lambda x, b: ReverseOnly.apply(x + b), x, b)
    assert not alone.ok and alone.by_kind(gv.Kind.NOTHING_COMPARED), str(alone)
    assert "another point" in _nothing(alone).message
