"""Functions computed through a cancellation upstream of a product: a factor
that cancels (1 + erf z in the tail, 1 - tanh z for large z, exp(d) - 1 for
small d) times a term that does not. fn as computed is then locally z x c
with c moving in steps of u x its terms; its derivative rules (written
here from forms that do not cancel) are right. ``factor`` scales every
rule: 1 is the right one. Shared by the scans of test_cancellation_slow.py."""

from __future__ import annotations

import math

import torch


def _function(name, forward, derivative, factor=1.0):
    class Fn(torch.autograd.Function):
        generate_vmap_rule = True

        @staticmethod
        def forward(x, b):
            return forward(x + b)

        @staticmethod
        def setup_context(ctx, inputs, output):
            x, b = inputs
            ctx.save_for_backward(x, b)
            ctx.save_for_forward(x, b)

        @staticmethod
        def backward(ctx, g):
            x, b = ctx.saved_tensors
            d = g * factor * derivative(x + b)
            return d, d

        @staticmethod
        def jvp(ctx, tx, tb):
            x, b = ctx.saved_tensors
            return factor * derivative(x + b) * (tx + tb)

    Fn.__name__ = Fn.__qualname__ = name
    return Fn.apply


def erf_tail(factor=1.0):
    """z (1 + erf z): the factor cancels to steps of u for z below about -4."""
    return _function(
        "ErfTail",
        lambda z: z * (1 + torch.erf(z)),
        lambda z: torch.erfc(-z) + z * (2 / math.sqrt(math.pi)) * torch.exp(-z * z),
        factor,
    )


def tanh_tail(factor=1.0):
    """z (1 - tanh 2z): the factor cancels for z above about 4 (it is 2 sigmoid(-4z))."""

    def derivative(z):
        s = 2 * torch.sigmoid(-4 * z)
        return s - 2 * z * s * (2 - s)

    return _function("TanhTail", lambda z: z * (1 - torch.tanh(2 * z)), derivative, factor)


def expm1_like(factor=1.0):
    """z (exp(z / 2^20) - 1): exp(d) - 1 for |d| < 1.2e-5 keeps few of its bits."""
    s = 2.0**-20
    return _function(
        "Expm1Like",
        lambda z: z * (torch.exp(z * s) - 1),
        lambda z: torch.expm1(z * s) + z * s * torch.exp(z * s),
        factor,
    )


def gelu_rule(factor=1.0):
    """F.gelu itself (z Phi(z), whose 1 + erf(z / sqrt 2) cancels in the tail)
    with its rules from erfc, which does not."""
    return _function(
        "Gelu",
        torch.nn.functional.gelu,
        lambda z: 0.5 * torch.erfc(-z / math.sqrt(2)) + z * torch.exp(-z * z / 2) / math.sqrt(2 * math.pi),
        factor,
    )


CONSTRUCTED = {"erf tail": erf_tail, "tanh tail": tanh_tail, "expm1-like": expm1_like}
