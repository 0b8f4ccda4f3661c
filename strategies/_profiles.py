"""Hypothesis settings profiles for gradient checks.

Registered under prefixed names (``gradverify-ci`` ...) so that a project's
own ``ci`` profile is never overwritten; :func:`load_profile` takes the
short name. None of them uses an example database: a gradient check's
examples come from its seed, and a shared database would make one run's
failures leak into another's examples.
"""

from __future__ import annotations

from hypothesis import HealthCheck, Phase, settings

from gradverify._errors import ArgumentValueError, explain

# Gradient checks are slower than typical property tests, and their
# strategies draw arrays element by element: these health checks would only
# report that, not a problem with the test.
_QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
_PHASES = (Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink)

PROFILES = {
    # derandomized: every runner draws the same examples (the seed is fixed)
    "ci": dict(max_examples=100, derandomize=True, database=None, deadline=None, print_blob=True, phases=_PHASES),
    "dev": dict(max_examples=25, database=None, deadline=None, phases=_PHASES),
    "thorough": dict(max_examples=1000, database=None, deadline=None, phases=_PHASES),
}


def profile_settings(name: str) -> settings:
    """The settings object of profile ``name`` (ci, dev or thorough)."""
    if name not in PROFILES:
        raise ArgumentValueError(explain("profile", f"one of {sorted(PROFILES)}", repr(name), "e.g. 'ci'"))
    return settings(suppress_health_check=_QUIET, **PROFILES[name])


def _register() -> None:
    for name in PROFILES:
        settings.register_profile(f"gradverify-{name}", profile_settings(name))


def load_profile(name: str) -> None:
    """Make profile ``name`` (ci, dev or thorough) Hypothesis's current settings."""
    profile_settings(name)  # validates
    settings.load_profile(f"gradverify-{name}")


_register()
