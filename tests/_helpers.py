"""Helpers the tests share (fixtures live in conftest.py)."""

from __future__ import annotations

import contextlib

import numpy as np

from gradverify import ops
from gradverify._sweep.examples import tanh_bias_flipped


def make(backend: str, a: np.ndarray):
    """A backend array with a's values and dtype (jax float64 made under x64)."""
    a = np.asarray(a)
    if backend == "torch":
        import torch

        return torch.from_numpy(np.array(a, copy=True))
    if backend == "jax":
        import jax
        import jax.numpy as jnp

        with jax.enable_x64(a.dtype.itemsize == 8):
            return jnp.asarray(a)
    return np.array(a, copy=True)


def precise(backend: str):
    """Context for computing on float64 arrays directly: jax needs x64 on."""
    if backend == "jax":
        import jax

        return jax.enable_x64(True)
    return contextlib.nullcontext()


def flipped_tanh_bias(backend, n_cols, flip_at, mode="vjp"):
    """tanh(x + b) whose derivative has the sign of element ``flip_at`` flipped."""
    return tanh_bias_flipped(backend, flip_at, mode)


# -- normalization cases ---------------------------------------------------------


def data(shape=(3, 4, 5), seed=0, small_rows=True):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    if small_rows:
        x[0] = 1.0 + 3e-3 * x[0]  # small but not degenerate variance
    c = shape[1]
    return x, 1.0 + 0.5 * rng.standard_normal(c), rng.standard_normal(c)


def tt(a):
    import torch

    return torch.tensor(a)


CASES = {
    "layer_norm": (
        lambda x, w, b, impl="reference": ops.layer_norm(x, x.shape[1:], None, None, impl=impl),
        lambda F, x, w, b: F.layer_norm(x, x.shape[1:]),
    ),
    "layer_norm_affine": (
        lambda x, w, b, impl="reference": ops.layer_norm(x, x.shape[-1:], w2(x), None, impl=impl),
        lambda F, x, w, b: F.layer_norm(x, x.shape[-1:], w2(x), None),
    ),
    "group_norm": (
        lambda x, w, b, impl="reference": ops.group_norm(x, 2, w, b, impl=impl),
        lambda F, x, w, b: F.group_norm(x, 2, w, b),
    ),
    "instance_norm": (
        lambda x, w, b, impl="reference": ops.instance_norm(x, weight=w, bias=b, impl=impl),
        lambda F, x, w, b: F.instance_norm(x, weight=w, bias=b),
    ),
    "batch_norm_train": (
        lambda x, w, b, impl="reference": ops.batch_norm(x, None, None, w, b, training=True, impl=impl),
        lambda F, x, w, b: F.batch_norm(x, None, None, w, b, training=True),
    ),
    "batch_norm_eval": (
        lambda x, w, b, impl="reference": ops.batch_norm(x, *running(x), w, b, impl=impl),
        lambda F, x, w, b: F.batch_norm(x, *running(x), w, b),
    ),
    "rms_norm": (
        lambda x, w, b, impl="reference": ops.rms_norm(x, x.shape[-1:], w2(x), impl=impl),
        lambda F, x, w, b: F.rms_norm(x, x.shape[-1:], w2(x)),
    ),
}
IMPLS = ["reference", "fused"]


def running(x):
    """Running statistics for x's channels, in x's backend (built from x)."""
    c = x.shape[1]
    mean, var = 0.1 * np.arange(c) - 0.2, 0.5 + 0.25 * np.arange(c)
    if hasattr(x, "new_tensor"):
        return x.new_tensor(mean), x.new_tensor(var)
    return x[0, :, 0] * 0 + mean, x[0, :, 0] * 0 + var


def w2(x):
    """A weight over the last axis, != 1, in x's backend (built from its shape)."""
    n = x.shape[-1]
    return (
        x[0, 0] * 0 + (1.5 + 0.1 * np.arange(n))
        if not hasattr(x, "new_tensor")
        else x.new_tensor(1.5 + 0.1 * np.arange(n))
    )


#: A module of a downstream project: a scaled softplus as a
#: torch.autograd.Function whose backward has a planted bug (exp(x) for
#: sigmoid(x) where x < 0), and the same function written correctly.
PLANTED_TORCH_OPS = """
import torch


class ScaledSoftplus(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return 2.0 * torch.nn.functional.softplus(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        slope = torch.where(x < 0, torch.exp(x), torch.sigmoid(x))  # the bug: exp(x) for x < 0
        return 2.0 * g * slope


def scaled_softplus(x):
    return ScaledSoftplus.apply(x)


def good_softplus(x):
    return 2.0 * torch.nn.functional.softplus(x)
"""


def png_pixels(data: bytes) -> list[tuple[int, ...]]:
    """The pixels of an 8-bit, non-interlaced RGB or RGBA PNG (what a
    browser's screenshot is), decoded with zlib alone."""
    import struct
    import zlib

    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0, header
    channels = 3 if color == 2 else 4
    raw, stride = zlib.decompress(idat), width * channels
    rows: list[bytearray] = []
    previous = bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, corner = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        rows.append(line)
        previous = line
    return [tuple(row[x * channels : x * channels + 3]) for row in rows for x in range(width)]
