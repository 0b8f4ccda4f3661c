"""gv.verify on the real Hypothesis engine, at length: the seed bug shrinks
to one element with b != 0 on every backend; correct kinked activations
never fail on naive inputs that sit on their kinks; narrow wrong regions are
found on every seed; group statistics on the wrong channels shrink to C = 4,
G = 2; the bundled normalizations pass; same seed, same counterexample and
report, whatever else is imported."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv
from gradverify import ops, strategies as gst
from gradverify._sweep.examples import BUILDERS
from gradverify.backends import require_backend_name
from gradverify.ops import _norm_fused as nf, _xp

from ._helpers import naive_bias_args, on_kinks, to_numpy

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("backend", ["numpy", "torch", "jax"])
def test_seed_bug_shrinks_to_one_element_with_nonzero_bias(backend, tmp_path):
    r = gv.verify(BUILDERS[backend](True), naive_bias_args(backend), max_examples=100, seed=0, report_dir=tmp_path)
    assert not r.ok
    x, b = r.counterexample
    assert to_numpy(x).size == 1 and to_numpy(b).size == 1
    assert to_numpy(b)[0] != 0  # the bug is invisible at b = 0, so shrinking cannot take b there
    assert require_backend_name(x) == backend and require_backend_name(b) == backend
    assert r.result is not None and not r.result.ok and r.result.backend == backend
    assert r.result.errors[0].kind == gv.Kind.MISMATCH
    # and the correct rule passes the same search
    assert gv.verify(BUILDERS[backend](False), naive_bias_args(backend), max_examples=30, seed=0).ok


def test_same_seed_same_counterexample_and_report(tmp_path):
    runs = [
        gv.verify(BUILDERS["torch"](True), naive_bias_args("torch"), seed=3, report_dir=tmp_path / str(k))
        for k in range(2)
    ]
    a, b = ([to_numpy(v).tolist() for v in r.counterexample] for r in runs)
    assert a == b
    assert runs[0].examples_run == runs[1].examples_run
    strip = lambda r: str(r).replace(str(tmp_path / "0"), "D").replace(str(tmp_path / "1"), "D")  # noqa: E731
    assert strip(runs[0]) == strip(runs[1])


KINKED = [
    ("relu", {}),
    ("relu6", {}),
    ("hardtanh", {}),
    ("hardsigmoid", {}),
    ("hardswish", {}),
    ("softshrink", {}),
    ("leakyrelu", {}),
    ("elu", {"alpha": 0.5}),
    ("selu", {}),
    ("trelu", {}),
]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name,params", KINKED, ids=[k for k, _ in KINKED])
def test_correct_kinked_activations_never_fail_on_their_kinks(name, params, dtype):
    act = ops.activation(name, **params)
    fn = lambda x: ops.bias_act(act, x, impl="fused")  # noqa: E731
    inconclusive = 0
    for seed in range(3):
        r = gv.verify(fn, on_kinks(act, "torch", dtype), max_examples=40, seed=seed)
        assert r.ok, str(r)
        assert r.examples_run == 40
        inconclusive += r.inconclusive
    if act.kink_points() and not act.kink_points()[0][1].jump:
        assert inconclusive > 0  # inputs on kinks happened and were counted, not failed


@pytest.mark.parametrize("name", ["relu", "hardsigmoid", "softshrink"])
def test_correct_kinked_activations_on_jax_and_numpy(name):
    act = ops.activation(name)
    for backend, fn in (
        ("jax", lambda x: ops.bias_act(act, x, impl="fused")),
        ("numpy", ops.bias_act_rule(act, bias=False)),
    ):
        r = gv.verify(fn, on_kinks(act, backend, "float64"), max_examples=15 if backend == "jax" else 40, seed=0)
        assert r.ok, str(r)


def wrong_rule(name, wrong_slope):
    """A numpy fused bias_act whose derivative is ``wrong_slope(z)`` (forward correct)."""
    act = ops.activation(name)
    xp = _xp.namespace(np.zeros(0))

    def f(x, b):
        return act.forward(xp, x + b)

    def jvp(p, t):
        return wrong_slope(p[0] + p[1]) * (t[0] + t[1])

    def vjp(p, g):
        gz = g * wrong_slope(p[0] + p[1])
        return gz, gz.sum(axis=0)

    f.__name__ = f"{name}_wrong"
    return gv.Rule(f, jvp=jvp, vjp=vjp)


WRONG = {
    # ignores the cap: slope 1 above 6 too
    "relu6": lambda z: np.where(z > 0, 1.0, 0.0),
    # saturation boundary at 2.5 instead of 3 (the forward saturates at 3)
    "hardsigmoid": lambda z: np.where(np.abs(z) < 2.5, 1 / 6, 0.0),
}


@pytest.mark.parametrize("name", sorted(WRONG))
def test_narrow_wrong_regions_found_on_every_seed(name):
    """gradcheck on randn inputs caught these 0/20 and 4/20 times."""
    for seed in range(5):
        r = gv.verify(wrong_rule(name, WRONG[name]), gst.bias_act_args(name, "numpy"), max_examples=100, seed=seed)
        assert not r.ok, f"seed {seed}"
        x, b = r.counterexample
        assert x.size == 1, str(r)
        z = float(x.reshape(-1)[0] + b.reshape(-1)[0])
        region = z > 6 if name == "relu6" else 2.5 <= abs(z) < 3
        assert region, (seed, z)
        # never shrunk onto a kink: a finite-difference stencil there is inconclusive
        assert min(abs(z - k) for k, _ in ops.activation(name).kink_points()) > 1e-6


def group_rule():
    """Group statistics on the wrong channels in the backward: channel c taken
    as group c % G (strided) instead of c // G (contiguous)."""
    xp = _xp.namespace(np.zeros(0))

    def spec(x, g):
        return nf.Spec((2,), 1e-5, group=(x.shape[0], int(g), -1), param=(1, x.shape[1], 1))

    def f(x, g, w, b):
        xhat, _, _, _ = nf.statistics(xp, x, spec(x, g))
        return nf.affine(xp, xhat, w, b, spec(x, g))

    def vjp(p, gy):
        x, g, w, b = p
        n, c, length = x.shape
        k = int(g)
        perm = np.argsort(np.arange(c) % k, kind="stable")  # channels regrouped strided
        inv = np.argsort(perm)
        xs, gs = x[:, perm], (gy * w[None, :, None])[:, perm]
        s = nf.Spec((2,), 1e-5, group=(n, k, -1))
        xhat, rstd, _, _ = nf.statistics(xp, xs, s)
        gx = nf.project(xp, xhat, rstd, gs, s)[:, inv]
        xhat_true, _, _, _ = nf.statistics(xp, x, spec(x, g))
        return gx, None, (gy * xhat_true).sum(axis=(0, 2)), gy.sum(axis=(0, 2))

    f.__name__ = "group_norm_wrong_channels"
    return gv.Rule(f, vjp=vjp)


def test_group_statistics_on_the_wrong_channels_shrink_to_c4_g2():
    r = gv.verify(group_rule(), gst.normalization_args("group_norm", "numpy"), max_examples=100, seed=0)
    assert not r.ok
    x, g, _, _ = r.counterexample
    assert (x.shape[1], int(g)) == (4, 2), str(r)  # the first shape where the groupings differ
    assert x.shape[0] == 1, str(r)


def test_bundled_normalizations_pass(backend):
    for kind in ("layer_norm", "group_norm", "batch_norm"):
        r = gv.verify(
            gst.normalization_call(kind, "fused", backend=backend),
            gst.normalization_args(kind, backend),
            max_examples=2 if backend == "jax" else 20,
            seed=0,
        )
        assert r.ok, str(r)
        assert r.worst_ratio > 0  # something was compared (a warning may put it above 1)


def test_same_seed_same_examples_whatever_else_is_imported():
    """Hypothesis draws some values from literals in loaded local modules; one
    more module of ours imported changed the examples of a seed. verify draws
    without them: the same result in a process that imported more."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "if sys.argv[1] == 'more':\n"
        "    import gradverify._sweep.cases, gradverify.cli, gradverify._triage.rerun, gradverify._triage.junit\n"
        "import gradverify as gv\n"
        "from gradverify import strategies as gst\n"
        "r = gv.verify(gst.normalization_call('layer_norm', 'fused', backend='numpy'),\n"
        "              gst.normalization_args('layer_norm', 'numpy'), max_examples=20, seed=0)\n"
        "print(repr(r.worst_ratio), r.examples_run)\n"
    )
    outs = [
        subprocess.run([sys.executable, "-c", script, mode], capture_output=True, text=True, check=True).stdout
        for mode in ("less", "more")
    ]
    assert outs[0] == outs[1] and outs[0].strip()


def test_report_is_exact_pasteable_and_saved(tmp_path):
    import torch  # noqa: F401  (the @example line names torch)

    r = gv.verify(BUILDERS["torch"](True), naive_bias_args("torch"), seed=0, report_dir=tmp_path)
    text = str(r)
    assert text.startswith("gradverify.verify FAILED: FusedSwishSeedBug.apply - seed 0")
    assert "@example((torch.tensor(" in text and "dtype=torch.float64" in text
    # the @example literal rebuilds the counterexample exactly
    line = next(ln for ln in text.splitlines() if "@example(" in ln).strip()
    rebuilt = eval(line.removeprefix("@example(").removesuffix(")"))  # noqa: S307
    for got, want in zip(rebuilt, r.counterexample):
        assert torch.equal(got, want)
    saved = np.load(r.saved)
    assert r.saved.startswith(str(tmp_path)) and sorted(saved.files) == ["arg0", "arg1"]
    for k, a in enumerate(r.counterexample):
        np.testing.assert_array_equal(saved[f"arg{k}"], to_numpy(a))
    assert not list(tmp_path.glob("*.tmp"))  # written atomically
    assert f"gv.verify(fn, strategy, seed=0, max_examples={r.max_examples})" in text
    assert "the check at the counterexample:" in text and "mismatch" in text
    # hex is exact
    hexes = next(ln for ln in text.splitlines() if "exact:" in ln).split("exact:")[1].split()
    assert float.fromhex(hexes[0]) == to_numpy(r.counterexample[0]).reshape(-1)[0]
    d = r.to_dict()
    assert d["ok"] is False and d["counterexample"][1]["hex"][0] == float(to_numpy(r.counterexample[1])[0]).hex()
