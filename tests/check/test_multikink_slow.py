"""Where kinks of several variables meet - bilinear sampling exactly on pixel
edges, moved by an affine transform that moves every sample - AD's value is
the gradient of a piece adjacent to the point along some direction, not
always along the column's own axis: it is accepted there (the kink's
interval takes in the limits of fn's derivative around the point), and a
wrong rule is still caught, there and beside it."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv

pytestmark = pytest.mark.slow

torch = pytest.importorskip("torch")
F = torch.nn.functional

IDENTITY = [[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]]


def _sampler(bug: str | None = None):
    """grid_sample with torch's own backward, or that backward made wrong."""

    class Sample(torch.autograd.Function):
        @staticmethod
        def forward(ctx, img, grid):
            ctx.save_for_backward(img, grid)
            return F.grid_sample(img, grid, mode="bilinear", align_corners=True)

        @staticmethod
        def backward(ctx, g):
            img, grid = ctx.saved_tensors
            with torch.enable_grad():
                i, gr = img.detach().requires_grad_(), grid.detach().requires_grad_()
                out = F.grid_sample(i, gr, mode="bilinear", align_corners=True)
                di, dg = torch.autograd.grad(out, (i, gr), g)
            if bug == "negated":
                dg = -dg
            elif bug == "doubled":
                dg = 2 * dg
            elif bug == "half_y":
                dg = dg * torch.tensor([1.0, 0.5], dtype=dg.dtype)
            return di, dg

    return Sample.apply


def _warped(sample, seed: int, reduce):
    g = torch.Generator().manual_seed(seed)
    img = torch.randn(1, 1, 5, 5, dtype=torch.float64, generator=g)
    w = torch.randn(1, 1, 5, 5, dtype=torch.float64, generator=g)

    def fn(theta):
        grid = F.affine_grid(theta, (1, 1, 5, 5), align_corners=True)
        return reduce(sample(img, grid) * w)

    return fn


def _plain(img, grid):
    return F.grid_sample(img, grid, mode="bilinear", align_corners=True)


REDUCTIONS = {"sum": lambda y: y.sum(), "rows": lambda y: y.sum(dim=-1)}


@pytest.mark.parametrize("reduce", sorted(REDUCTIONS))
def test_an_affine_warp_on_pixel_edges_passes_over_random_images(reduce):
    theta = torch.tensor(IDENTITY, dtype=torch.float64)
    several = 0
    for seed in range(4):
        r = gv.check(_warped(_plain, seed, REDUCTIONS[reduce]), theta, seed=seed)
        assert r.ok and not r.by_kind(gv.Kind.MISMATCH), str(r)
        kinks = r.by_kind(gv.Kind.NONDIFFERENTIABLE)
        several += any("pieces that meet there" in f.message for f in kinks)
    assert several >= 1  # (the case the excuse is for does occur here)


@pytest.mark.parametrize("bug", ["negated", "doubled"])
def test_a_wrong_backward_on_pixel_edges_is_still_caught(bug):
    theta = torch.tensor(IDENTITY, dtype=torch.float64)
    for seed in range(3):
        r = gv.check(_warped(_sampler(bug), seed, REDUCTIONS["rows"]), theta, seed=seed)
        assert not r.ok and r.by_kind(gv.Kind.MISMATCH), str(r)
        right = gv.check(_warped(_sampler(), seed, REDUCTIONS["rows"]), theta, seed=seed)
        assert right.ok, str(right)  # (the same rule unbroken passes there)


def test_beside_the_edges_a_smaller_error_is_caught_without_probing():
    """Off the pixel edges fn is smooth: no kink, no probe, full power."""
    theta = torch.tensor(IDENTITY, dtype=torch.float64) + torch.tensor(
        [[[0.013, -0.021, 0.037], [0.017, 0.011, -0.029]]]
    )
    for seed in range(3):
        fn = _warped(_sampler("half_y"), seed, REDUCTIONS["rows"])
        r = gv.check(fn, theta, seed=seed)
        assert not r.ok and r.by_kind(gv.Kind.MISMATCH), str(r)
        assert not r.by_kind(gv.Kind.NONDIFFERENTIABLE), str(r)


def test_a_grid_exactly_on_pixel_edges_passes_in_every_padding_mode():
    rng = np.random.default_rng(5)
    for align, padding in [(True, "zeros"), (False, "border"), (False, "reflection")]:
        for seed in range(3):
            img = torch.tensor(rng.standard_normal((1, 2, 5, 5)))
            pixels = torch.tensor(rng.integers(-2, 11, (1, 3, 3, 2)) / 2.0)
            grid = pixels / 4 * 2 - 1 if align else (2 * pixels + 1) / 5 - 1
            fn = lambda g, im: F.grid_sample(im, g, padding_mode=padding, align_corners=align)  # noqa: E731,B023
            r = gv.check(fn, grid, img, seed=seed)
            assert r.ok and not r.by_kind(gv.Kind.MISMATCH), f"{align} {padding}\n{r}"
