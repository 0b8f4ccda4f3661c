"""A pytest plugin for ``bench_suite.py --directional``: gradverify checks
small inputs as it checks large ones, along random directions, never by
the full Jacobian (its default at most probes.FULL_MAX_IN inputs), so that
a suite's two runs say what the full Jacobian costs there. Verdicts on
small inputs are then not gradverify's own: for timing only."""

import gradverify._check.probes as _probes

_probes.FULL_MAX_IN = 0
