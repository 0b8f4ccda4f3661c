"""gradverify: prove gradients right, or show in one screen where they are wrong.

The public API. ``import gradverify`` imports neither torch nor jax: backends
load when an array of theirs is checked.
"""

from ._audit import AuditResult, audit
from ._check.pipeline import assert_gradients, check
from ._errors import ArgumentTypeError, ArgumentValueError, GradientError, UsageError
from ._result import CheckResult, Finding, Kind, Level
from ._rule import Rule
from ._triage.junit import junit_files as triage_junit
from ._triage.rerun import Triage, rerun as triage
from ._triage.verdict import Verdict
from ._verify import VerifyResult, verify
from .backends import compiling

__version__ = "0.1.0"

__all__ = [
    "ArgumentTypeError",
    "AuditResult",
    "ArgumentValueError",
    "CheckResult",
    "Finding",
    "GradientError",
    "Kind",
    "Level",
    "Rule",
    "Triage",
    "Verdict",
    "UsageError",
    "VerifyResult",
    "assert_gradients",
    "audit",
    "check",
    "compiling",
    "triage",
    "triage_junit",
    "verify",
]
