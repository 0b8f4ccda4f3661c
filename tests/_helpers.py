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


def sine_function(scale: float = 1.0):
    """A torch autograd.Function for sin whose backward is ``scale`` times
    right (1.0: a correct rule)."""
    import torch

    class Sine(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.sin()

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return scale * g * x.cos()

    return Sine


def sine_with_rules(jvp_scale: float | None = 1.0, vjp_scale: float = 1.0, calls: dict | None = None):
    """sin as a torch autograd.Function (``.apply``) with a forward rule
    ``jvp_scale`` times right (None: none) and a backward ``vjp_scale``
    times right (1.0: correct); ``calls`` counts each rule's calls."""
    import torch

    seen = calls if calls is not None else {}

    class Sin(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return x.sin()

        @staticmethod
        def setup_context(ctx, inputs, output):
            (ctx.x,) = inputs
            ctx.save_for_backward(ctx.x)

        @staticmethod
        def backward(ctx, g):
            seen["vjp"] = seen.get("vjp", 0) + 1
            (x,) = ctx.saved_tensors
            return vjp_scale * g * x.cos()

    if jvp_scale is not None:

        def jvp(ctx, t):
            seen["jvp"] = seen.get("jvp", 0) + 1
            return jvp_scale * t * ctx.x.cos()

        Sin.jvp = staticmethod(jvp)
    return Sin.apply


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


def browser():
    """Debian's headless chromium; the test is skipped where it is not
    installed, and failed there if CI asked for it (GRADVERIFY_REQUIRE_BROWSER)."""
    import os
    import shutil

    import pytest

    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("GRADVERIFY_REQUIRE_BROWSER"):
            pytest.fail("chromium is not installed, and GRADVERIFY_REQUIRE_BROWSER is set (.ci/run installs it)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return found


#: The browser's flags: no sandbox (CI containers run as root), no GPU, and
#: scrollbars hidden, so the window's width is the page's whole viewport.
BROWSER_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]


def screenshot(page, tmp_path, size="1000,700"):
    """The pixels of ``page`` (a path) drawn by Debian's headless chromium (see ``browser``)."""
    import subprocess

    shot = tmp_path / "page.png"
    done = subprocess.run(
        [browser(), *BROWSER_FLAGS, f"--window-size={size}", f"--screenshot={shot}", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    return png_pixels(shot.read_bytes())


#: Run in the page once it has loaded: the viewport's width, the document's,
#: and every element that scrolls sideways or cuts its content at its right
#: edge (overflow hidden or clip), as JSON in an element the DOM dump shows.
_MEASURE = """<script>addEventListener("load", () => {
  const name = el => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "")
    + (typeof el.className === "string" && el.className ? "." + el.className.trim().split(/\\s+/).join(".") : "");
  const wide = [...document.body.querySelectorAll("*")].filter(el => el.scrollWidth > el.clientWidth + 1
    && el.clientWidth > 0);
  const how = el => getComputedStyle(el).overflowX;
  const out = {
    viewport: window.innerWidth,
    document: document.documentElement.scrollWidth,
    scrolls: wide.filter(el => ["auto", "scroll"].includes(how(el))).map(el => [name(el), el.matches(SCROLLS)]),
    cut: wide.filter(el => ["hidden", "clip"].includes(how(el))).map(name),
  };
  const pre = document.createElement("pre");
  pre.id = "gradverify-fits";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});</script>"""


def page_widths(page, width=1280, scrolls=".scroll"):
    """What headless chromium measures of ``page`` (a path) in a window
    ``width`` pixels wide: ``viewport`` and ``document`` (the widths of the
    window and of everything on the page), ``scrolls`` ([element, whether it
    matches the selector ``scrolls``] for each box that scrolls sideways) and
    ``cut`` (the boxes that cut their content at the right)."""
    import html
    import json
    import re
    import subprocess
    import tempfile
    from pathlib import Path

    text = Path(page).read_text(encoding="utf-8")
    probe = _MEASURE.replace("SCROLLS", json.dumps(scrolls))
    text = text.replace("</body>", probe + "</body>") if "</body>" in text else text + probe
    with tempfile.TemporaryDirectory(prefix="gradverify-page-") as scratch:
        copy = Path(scratch) / "page.html"  # (a copy elsewhere: the report's directory is left as it was)
        copy.write_text(text, encoding="utf-8")
        done = subprocess.run(
            [browser(), *BROWSER_FLAGS, f"--window-size={width},900", "--virtual-time-budget=10000"]
            + ["--dump-dom", copy.as_uri()],
            capture_output=True,
            text=True,
            timeout=180,
        )
    found = re.search(r'<pre id="gradverify-fits">(.*?)</pre>', done.stdout, re.S)
    assert done.returncode == 0 and found, done.stderr[-2000:]
    return json.loads(html.unescape(found.group(1)))


def assert_fits(page, width=1280, scrolls=".scroll"):
    """``page`` (a path to an HTML file) fits a window ``width`` pixels wide in
    headless chromium: the document is no wider than the window, no box cuts
    its content, and the only boxes that scroll sideways match the CSS
    selector ``scrolls`` (gradverify's pages mark such a box ``class="scroll"``).
    Returns the measurements (``page_widths``)."""
    got = page_widths(page, width, scrolls)
    assert got["viewport"] == width, got
    assert got["document"] <= width, f"{page}: the page is {got['document']} px wide in a {width} px window: {got}"
    assert not got["cut"], f"{page}: these boxes cut their content at the right: {got['cut']}"
    stray = [name for name, allowed in got["scrolls"] if not allowed]
    assert not stray, f"{page}: these boxes scroll sideways (they should wrap, or be a {scrolls} box): {stray}"
    return got
