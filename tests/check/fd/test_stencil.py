"""The stencil's combinations are what they claim, in exact arithmetic: on
F(t) = t^p sampled at t = k h/4 (h = 1), the Richardson values R1 and R2 give
F'(0) exactly up to degree 4, the convergence test's drift DIFF vanishes up
to degree 2, and the kink indicator KAPPA vanishes up to degree 3 and is the
slope jump times h at a kink; their noise weights are the sums of their
coefficients' magnitudes, and the difference tables are binomial (a fourth
difference of independent noise sigma: sqrt(70) sigma)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from gradverify._check.fd import stencil


def apply(comb, F):
    """sum_k c_k F(k/4): the combination on F sampled at t = k h/4, h = 1."""
    return sum(c * F(Fraction(k, 4)) for k, c in comb.items())


def monomial(p):
    return lambda t: t**p


@pytest.mark.parametrize("name", ["R1", "R2"])
def test_the_richardson_values_are_exact_up_to_degree_4(name):
    comb = getattr(stencil, name)
    for p in range(5):
        assert apply(comb, monomial(p)) == (1 if p == 1 else 0), (name, p)
    assert apply(comb, monomial(5)) != 0  # the h^4 term: exact no further


def test_the_drift_vanishes_up_to_degree_2():
    for p in range(3):
        assert apply(stencil.DIFF, monomial(p)) == 0, p
    assert apply(stencil.DIFF, monomial(3)) != 0  # D(h/2) - D(h/4) sees F''': what the convergence test reads


def test_the_kink_indicator_vanishes_up_to_degree_3_and_is_the_slope_jump_at_a_kink():
    for p in range(4):
        assert apply(stencil.KAPPA, monomial(p)) == 0, p
    assert apply(stencil.KAPPA, monomial(4)) != 0  # O(h^4) on smooth pieces
    for left, right in [(Fraction(-1), Fraction(1)), (Fraction(0), Fraction(1)), (Fraction(3, 2), Fraction(-5, 7))]:

        def kink(t, left=left, right=right):
            return (right if t > 0 else left) * t

        def kink_and_cubic(t, kink=kink):
            return kink(t) + 7 - 2 * t + 5 * t * t - t**3

        # the odd part of a kink is linear and cancels; its even part |t| (right - left) / 2 leaves the jump times h
        assert apply(stencil.KAPPA, kink) == right - left, (left, right)
        assert apply(stencil.KAPPA, kink_and_cubic) == right - left, (left, right)


def test_the_noise_weights_are_the_sums_of_the_coefficients_magnitudes():
    pairs = {
        "R1": (stencil.R1, stencil.R1_WEIGHT),
        "R2": (stencil.R2, stencil.R2_WEIGHT),
        "KAPPA": (stencil.KAPPA, stencil.KAPPA_WEIGHT),
        "DIFF": (stencil.DIFF, stencil.DIFF_WEIGHT),
    }
    for name, (comb, weight) in pairs.items():
        assert weight == sum(abs(c) for c in comb.values()), name
    assert {name: weight for name, (_, weight) in pairs.items()} == {"R1": 3, "R2": 6, "KAPPA": 16, "DIFF": 6}


def test_the_difference_tables_are_binomial():
    assert stencil.difference(4) == (1, -4, 6, -4, 1)
    assert stencil.difference(3) == (-1, 3, -3, 1)
    assert stencil.difference_noise(4) ** 2 == pytest.approx(70, rel=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_scales_asked_of_torch_blocks_are_bit_for_bit_the_scales(seed):
    """stencil.scales_asked (torch: the extremes asked for as device scalars,
    D(h/2)'s taken from F(h/2) - F(-h/2) and scaled on the host) gives the
    very floats ``scales`` gives block by block - over values of every
    magnitude (D(h/2) overflowing where they are largest), with a step h
    that is no power of two, and with an inf."""
    import torch

    from gradverify._check.fd.stencil import scales, scales_asked
    from gradverify._check.xp import read

    rng = np.random.default_rng(seed)
    n = 5000
    F = {k: torch.tensor(rng.standard_normal(n) * 10.0 ** rng.integers(-300, 306, n)) for k in (-4, -2, 2, 4)}
    if seed == 3:
        F[2][17] = np.inf
    h = float(rng.uniform(1e-7, 1e-3))
    blocks = [slice(0, 1234), slice(1234, 1234), slice(1234, n)]
    asked, finish = scales_asked(F, blocks, h)
    want = [scales(F, b, h)[:2] for b in blocks]
    slope, outer = finish(read(*asked))
    assert slope == max(w[0] for w in want) and outer == max(w[1] for w in want)
