"""Warnings raised inside fn or its rules during a check: the caller's own
stay visible and follow the caller's warning filters (an error under
``simplefilter("error")`` is an error of the rule); those the frameworks
raise from their own code are dropped."""

from __future__ import annotations

import os

import pytest


def _warning_softplus(torch, message: str, filename: str | None = None):
    """softplus whose (correct) backward warns, as from its own code or from ``filename``."""
    import warnings

    class Softplus(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return torch.nn.functional.softplus(x)

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            if filename is None:
                warnings.warn(message, UserWarning, stacklevel=1)
            else:
                # as warnings.warn inside that module makes it (its module name is what filters see)
                module = "torch." + os.path.relpath(filename, os.path.dirname(torch.__file__))[:-3].replace(os.sep, ".")
                warnings.warn_explicit(message, DeprecationWarning, filename, 1, module=module)
            return g * torch.sigmoid(x)

    return Softplus.apply


def test_warnings_of_fns_rules_stay_visible_and_follow_the_callers_filters():
    import warnings

    import torch

    import gradverify as gv

    # (plain calls of the rule: vectorised ones are silent, their warnings would be vmap's)
    x = torch.tensor([-1.0, 0.5], dtype=torch.float64)
    fn = _warning_softplus(torch, "from the rule")
    with pytest.warns(UserWarning, match="from the rule"):
        assert gv.check(fn, x, vectorise=False).ok
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the caller's policy: the rule's warning is an error of the rule
        r = gv.check(fn, x, vectorise=False)
    assert not r.ok and r.by_kind(gv.Kind.EXCEPTION), str(r)
    assert "from the rule" in str(r)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=UserWarning, module=__name__)  # the caller's own exception
        assert gv.check(fn, x, vectorise=False).ok


def test_warnings_the_frameworks_raise_from_their_own_code_are_dropped():
    import warnings

    import torch

    import gradverify as gv

    inside = os.path.join(os.path.dirname(torch.__file__), "autograd", "forward_ad.py")
    fn = _warning_softplus(torch, "the machinery's", filename=inside)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = gv.check(fn, torch.tensor([-1.0, 0.5], dtype=torch.float64), vectorise=False)
    assert r.ok, str(r)
