"""The FD-against-step sweep triage reads (gradverify._check.steps): a central
difference along a direction, weighing only the outputs the direction weighs."""

from __future__ import annotations

from gradverify._check import steps


def test_fd_against_step_is_a_central_difference_that_weighs_only_what_u_weighs():
    import numpy as np

    def f(x):
        return np.concatenate([np.sin(x), np.array([np.inf])])  # an infinite output u gives no weight

    x = np.array([0.3, -1.2])
    from gradverify._check.evaluate import Evaluator

    ev = Evaluator.for_call(f, (x,))
    u = np.array([0.0, 2.0, 0.0])
    v = [np.array([0.0, 1.0])]
    (h, fd, err), (h2, fd2, _) = steps.fd_against_step(ev, u, v, ad=5.0, steps=[1e-3, 1e-6])
    expected = 2.0 * (np.sin(-1.2 + 1e-3) - np.sin(-1.2 - 1e-3)) / 2e-3
    assert (h, fd, err) == (1e-3, expected, abs(expected - 5.0))
    assert abs(fd2 - 2.0 * np.cos(-1.2)) < 1e-8 and abs(fd - 2.0 * np.cos(-1.2)) > 1e-8  # the h^2 term, seen
