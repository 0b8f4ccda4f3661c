"""gradverify: prove gradients right, or show in one screen where they are wrong.

The public API. ``import gradverify`` imports neither torch nor jax: backends
load when an array of theirs is checked.
"""

from ._check import assert_gradients as assert_gradients
from ._check import check as check
from ._errors import ArgumentTypeError as ArgumentTypeError
from ._errors import ArgumentValueError as ArgumentValueError
from ._errors import GradientError as GradientError
from ._errors import UsageError as UsageError
from ._result import CheckResult as CheckResult
from ._result import Finding as Finding
from ._result import Kind as Kind
from ._result import Level as Level
from ._result import Verdict as Verdict
from ._rule import Rule as Rule
from ._triage_junit import junit_files as triage_junit
from ._triage_rerun import Triage as Triage
from ._triage_rerun import rerun as triage
from ._verify import VerifyResult as VerifyResult
from ._verify import verify as verify
from .backends import compiling as compiling

__version__ = "0.1.0"

__all__ = [
    "ArgumentTypeError",
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
    "check",
    "compiling",
    "triage",
    "triage_junit",
    "verify",
]
