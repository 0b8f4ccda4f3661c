"""A small OpInfo database of our own, in the form an out-of-tree backend or
a custom-op library keeps one (``gradverify audit torch --database
tests.audit._database:op_db``): a right rule, a wrong one PyTorch's tests
would not expect to fail, the same wrong one marked as an expected failure,
and operators that hang, kill their process or interrupt the audit on one
sample (the sample of shape (2, 3)) and work on the others."""

from __future__ import annotations

import os
import signal
import time
import unittest
from pathlib import Path

import torch
from torch.testing._internal.opinfo.core import DecorateInfo, OpInfo, SampleInput

SHAPES = [(3,), (2, 3), (4,)]


def sample_inputs(op, device, dtype, requires_grad, **kwargs):
    for k, shape in enumerate(SHAPES):
        n = 1
        for s in shape:
            n *= s
        x = torch.linspace(-1.5, 1.2, n, dtype=dtype, device=device).reshape(shape) + 0.1 * k
        yield SampleInput(x.requires_grad_(requires_grad))


class WrongSwish(torch.autograd.Function):
    """x sigmoid(x) whose backward forgets the sigmoid's own derivative."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.sigmoid(x)


class DetachedCube(torch.autograd.Function):
    """x^3 whose backward is right but detaches x: its own derivative (the
    second order) misses the 6 x g term."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 3 * x.detach() ** 2


def _marked(x: torch.Tensor) -> bool:
    return x.dim() == 2


def hangs(x):
    if _marked(x):
        time.sleep(3600)
    return torch.sinh(x)


def dies(x):
    if _marked(x):
        os._exit(3)
    return torch.sinh(x)


def interrupts(x):
    """On its marked sample, the first time (a file remembers): SIGINT to the
    audit's supervisor, as a user's Ctrl-C would send; then it works."""
    marker = Path(os.environ.get("GRADVERIFY_TEST_INTERRUPTED", "/nonexistent/marker"))
    if _marked(x) and marker.parent.is_dir() and not marker.exists():
        marker.write_text("interrupted")
        os.kill(os.getppid(), signal.SIGINT)
        time.sleep(30)  # (the supervisor stops this worker)
    log = os.environ.get("GRADVERIFY_TEST_CALLS")
    if log:
        with open(log, "a") as f:
            f.write(f"{tuple(x.shape)}\n")
    return torch.sinh(x)


def dies_before_its_samples(op, device, dtype, requires_grad, **kwargs):
    os._exit(4)
    yield  # (a generator, as sample functions are)


def _op(name, fn, **kw):
    kw.setdefault("supports_forward_ad", True)
    return OpInfo(name, op=fn, dtypes=(torch.float64,), sample_inputs_func=sample_inputs, **kw)


op_db = [
    _op("audit_test.right", torch.sinh),
    _op("audit_test.wrong", WrongSwish.apply, supports_forward_ad=False),
    OpInfo(
        "audit_test.expected",
        op=WrongSwish.apply,
        dtypes=(torch.float64,),
        sample_inputs_func=sample_inputs,
        supports_forward_ad=False,
        decorators=(DecorateInfo(unittest.expectedFailure, "TestBwdGradients", "test_fn_grad"),),
    ),
    _op("audit_test.hangs", hangs),
    _op("audit_test.dies", dies),
    _op("audit_test.interrupts", interrupts),
    _op("audit_test.cube_gradgrad", DetachedCube.apply, supports_forward_ad=False),
    OpInfo("audit_test.dies_early", op=torch.sinh, dtypes=(torch.float64,), sample_inputs_func=dies_before_its_samples),
    _op(
        "audit_test.cube_gradgrad_expected",
        DetachedCube.apply,
        supports_forward_ad=False,
        decorators=(DecorateInfo(unittest.expectedFailure, "TestBwdGradients", "test_fn_gradgrad"),),
    ),
]
