"""A function computed through a cancellation upstream of a product is fn
as computed, not fn: where the factor that cancels moves in steps of u x
its terms, a stencil can straddle one step (a "kink"), miss them all (a
slope that is the factor's alone) or see them as noise. Scanned, not
pinned: F.gelu and jax.nn.gelu (erf form) over 10^4 points of z = x + b in
[-12, 12] (b != 0) in float64 and float32, and three constructed functions
of the same shape with right rules: no check fails. The same functions with
a rule 1.5x off are caught wherever finite differences can decide, and are
inconclusive - never a pass - where they cannot.

Points come sorted and eight to a check (x and b of eight elements, a full
Jacobian): the scales of a check's elements stay alike, as in a scalar
check; a scalar scan of F.gelu's tail runs besides."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv

from ._cancelling import CONSTRUCTED, gelu_rule

pytestmark = pytest.mark.slow

torch = pytest.importorskip("torch")
F = torch.nn.functional

#: Points a check, and chunks a scan (for the workers).
PER_CHECK, CHUNKS = 8, 5


def _points(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """z in [-12, 12], sorted, and b = +-[0.25, 3]."""
    rng = np.random.default_rng(seed)
    z = np.sort(rng.uniform(-12.0, 12.0, n))
    b = rng.choice([-1.0, 1.0], n) * rng.uniform(0.25, 3.0, n)
    return z, b


def _scan(fn, make, n: int, seed: int, chunk: int = 0, chunks: int = 1, per_check: int = PER_CHECK):
    """(failed, inconclusive, checks) of fn over its share of the points."""
    z, b = _points(n, seed)
    starts = list(range(0, n, per_check))[chunk::chunks]
    failed, inconclusive = [], 0
    for k in starts:
        zz, bb = z[k : k + per_check], b[k : k + per_check]
        r = gv.check(fn, make(zz - bb), make(bb))
        if not r.ok:
            failed.append((zz.tolist(), bb.tolist(), str(r)))
        elif r.inconclusive:
            inconclusive += 1
    return failed, inconclusive, len(starts)


def _torch(dtype):
    return lambda a: torch.tensor(a, dtype=getattr(torch, dtype))


@pytest.mark.parametrize("chunk", range(CHUNKS))
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_torch_gelu_over_its_tail_never_fails(dtype, chunk):
    failed, _, checks = _scan(lambda x, b: F.gelu(x + b), _torch(dtype), 10_000, 0, chunk, CHUNKS)
    assert checks == 10_000 // PER_CHECK // CHUNKS
    assert not failed, failed[0]


def test_torch_gelu_point_by_point_in_its_tail_never_fails():
    """One point a check, where nothing else sets the scales: the harshest."""
    failed, _, checks = _scan(lambda x, b: F.gelu(x + b), _torch("float64"), 1500, 1, per_check=1)
    assert checks == 1500 and not failed, failed[:1]


@pytest.mark.parametrize("chunk", range(CHUNKS))
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_jax_gelu_over_its_tail_never_fails(dtype, chunk):
    jax = pytest.importorskip("jax")
    fn = jax.jit(lambda x, b: jax.nn.gelu(x + b, approximate=False))
    with jax.enable_x64(True):
        failed, _, _ = _scan(fn, lambda a: jax.numpy.asarray(a, dtype=dtype), 10_000, 2, chunk, CHUNKS)
    assert not failed, failed[0]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", sorted(CONSTRUCTED))
def test_constructed_cancellations_with_right_rules_never_fail(name, dtype):
    failed, _, _ = _scan(CONSTRUCTED[name](), _torch(dtype), 2000, 3)
    assert not failed, failed[0]


@pytest.mark.parametrize("name", [*sorted(CONSTRUCTED), "gelu"])
def test_a_rule_one_and_a_half_times_off_is_caught_or_inconclusive_never_passed(name):
    make = gelu_rule if name == "gelu" else CONSTRUCTED[name]
    fn, right = make(1.5), make()
    failed, inconclusive, checks = _scan(fn, _torch("float64"), 600, 4)
    assert len(failed) + inconclusive == checks  # every check: caught, or FD could not decide
    assert len(failed) >= checks // 2, (len(failed), checks)  # FD decides on most of [-12, 12]
    assert not _scan(right, _torch("float64"), 600, 4)[0]  # (the same points, the right rule)
