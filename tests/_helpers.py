"""Helpers the tests of several wings share (fixtures live in conftest.py;
each wing's own helpers are in its folder's _helpers.py)."""

from __future__ import annotations

import contextlib

import numpy as np

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


def screenshot(page, tmp_path, size="1000,700"):
    """The pixels of ``page`` (a path) drawn by Debian's headless chromium;
    skipped where it is not installed, failed there if CI asked for it."""
    import os
    import shutil
    import subprocess

    import pytest

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        if os.environ.get("GRADVERIFY_REQUIRE_BROWSER"):
            pytest.fail("chromium is not installed, and GRADVERIFY_REQUIRE_BROWSER is set (.ci/run installs it)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    shot = tmp_path / "page.png"
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--window-size={size}"]
    done = subprocess.run(
        [browser, *args, f"--screenshot={shot}", page.as_uri()], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    return png_pixels(shot.read_bytes())
