"""torch rules for the batched checks: sin with its own rules (vmapped by the
generated rule), and variants - a backward that calls a cos kernel whose
batched version (its vmap rule) gives every member the first member's
values, right alone and wrong under vmap, and one with no vmap support.
tests/check/test_batched.py imports them; tests/faces/test_batched_options_slow.py
writes this file into a user's project, where ``sin`` and ``args`` are the
command's target and strategy."""

import numpy as np
import torch
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp


class Sin(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x.sin()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x.cos()

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return t * x.cos()


class CosKernel(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return x.cos()

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def vmap(info, in_dims, x):
        x = x.movedim(in_dims[0], 0)
        return x[:1].cos().expand_as(x), 0


class SinBatchedBackwardBug(Sin):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * CosKernel.apply(x)


def kernel(alone, under_vmap, name):
    """A torch Function computing ``alone(x)``, whose vmap rule computes
    ``under_vmap(x)`` instead (over the batch axis as it comes): a kernel
    right alone and, where the two differ, wrong under vmap."""

    class Kernel(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return alone(x)

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def vmap(info, in_dims, x):
            return under_vmap(x), in_dims[0]

    Kernel.__name__ = Kernel.__qualname__ = name
    return Kernel.apply


class SinWithoutVmap(Sin):
    generate_vmap_rule = False


sin = SinBatchedBackwardBug.apply
args = st.tuples(hnp.arrays(np.float64, st.integers(2, 4), elements=st.floats(-3, 3)).map(torch.from_numpy))
