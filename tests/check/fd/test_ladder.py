"""The kink ladder's verdict on one element does not depend on its neighbours."""

from __future__ import annotations

import numpy as np
import pytest

from gradverify._check import fd


@pytest.mark.parametrize("steep", [1.0, 1e6, 1e8, 1e10])
def test_a_jump_at_the_point_stays_a_jump_beside_a_steep_element(steep):
    """F jumps by 2^-9 at t = 0 in element 0 (slope 3 on both sides) while
    element 1 has slope ``steep``. The ladder goes down to steps where the
    vector's rounding floor (which the steep element sets, and which grows as
    the step shrinks) exceeds the jump; the element's own floor does not, so
    it is a jump at every level, never a kink whose sides agree within a
    bound that grows as 1/h (a sawtooth of lax.rem read so, and its JVP
    convicted)."""

    def F(t):
        return np.array([np.where(t > 0, 2.0**-9, 0.0) + 3.0 * t, steep * t, np.sin(t)])

    problem = fd.Problem.of(F, F(0.0), 2.0**-18, 2.0**-36, 2.0**-53, 0.0)
    ref = fd.reference(problem)
    status = np.asarray(ref.status)
    assert int(status[0]) == fd.JUMP
    assert (status[1:] == fd.SMOOTH).all()
    np.testing.assert_allclose(np.asarray(ref.value)[1:], [steep, 1.0], rtol=1e-6)


def _first(f):
    """FD's verdict on f'(0) beside a smooth neighbour."""

    def F(t):
        return np.array([f(np.float64(t)), np.sin(t)])

    ref = fd.reference(fd.Problem.of(F, F(0.0), 2.0**-18, 2.0**-40, 2.0**-53, 0.0))
    return int(np.asarray(ref.status)[0]), float(np.asarray(ref.value)[0]), float(np.asarray(ref.err)[0])


def _t_log_t(t):
    return abs(t) * np.log(abs(t)) if t != 0 else 0.0


@pytest.mark.parametrize("c", [0.05, 0.3, 1.0])
def test_one_sided_slopes_that_grow_without_limit_are_no_kink(c):
    """3t + c |t| log|t|: each one-sided slope moves by c log 8 per level of
    the ladder, within both bounds of the last level's, yet without limit (a
    histogram's p log p where samples sit on its kernel's kinks). The sides
    have no common value across the levels: undecidable, not a kink whose
    hull AD could be judged against."""
    status, _, _ = _first(lambda t: 3 * t + c * _t_log_t(t))
    assert status == fd.UNRELIABLE


def test_a_kink_with_curvature_is_still_a_kink():
    status, value, err = _first(lambda t: abs(t) + t * t + 0.5 * t)
    assert status == fd.KINK
    assert value - err <= -0.5 + 1e-9 and 1.5 - 1e-9 <= value + err <= 1.6
