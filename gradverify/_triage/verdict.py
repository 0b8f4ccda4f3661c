"""What triage says of a test."""

from __future__ import annotations

from .._result import Word

__all__ = ["Verdict"]


class Verdict(Word):
    """What triage says of a test: of its CI runs (gv.triage_junit) or of its
    gradient calls rerun (gv.triage)."""

    PASSES = "passes"
    # CI runs
    FAILS_EVERYWHERE = "fails everywhere"
    ENVIRONMENT_SPECIFIC = "environment-specific"
    FLAKY = "flaky"
    # gradient calls
    BUG = "bug"
    BUG_IN_A_REGION = "bug in a region"
    NONDETERMINISTIC_OP = "nondeterministic op"
    KINK_FLAKE = "kink flake"
    PRECISION_FLAKE = "precision flake"
