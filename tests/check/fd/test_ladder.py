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
