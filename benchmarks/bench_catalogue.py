"""Bug catalogue benchmark: the same cases under gradverify,
torch.autograd.gradcheck (slow and fast mode) and jax.test_util.check_grads -
bugs detected, false alarms and time, side by side in one run.

Each case is one gradient rule written once in numpy (forward and VJP) and
handed to every checker in the form it takes: a torch autograd.Function for
gradverify and gradcheck, a jax.custom_vjp (through pure_callback) for
check_grads (modes=("rev",): it cannot run forward mode on a custom_vjp).
One injected bug per bug class the project documents (the seed bugs,
relu6's cap, one wrong element in a large gradient, the five normalization
bugs), and correct ops at their kinks and in float32, which a
checker should pass. gradverify counts an inconclusive check (it found a
kink at an input: "kink found") as a pass, never as a detection.

    python benchmarks/bench_catalogue.py [--reps 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import torch
from jax.test_util import check_grads

import gradverify as gv

jax.config.update("jax_enable_x64", True)
EPS = 1e-5


@dataclasses.dataclass
class Case:
    name: str
    kind: str  # a bug class, or "correct: ..." for a rule that is right
    buggy: bool
    f: Callable[..., np.ndarray]
    vjp: Callable[[list[np.ndarray], np.ndarray], tuple[np.ndarray, ...]]
    args: list[np.ndarray]


# -- bias_act cases: act(x + b) ----------------------------------------------------------------------
def sigmoid(z):
    return 1 / (1 + np.exp(-z))


ACTS = {
    "swish": (lambda z: z * sigmoid(z), lambda z: sigmoid(z) * (1 + z * (1 - sigmoid(z)))),
    "tanh": (np.tanh, lambda z: 1 - np.tanh(z) ** 2),
    "relu": (lambda z: np.maximum(z, 0), lambda z: (z > 0).astype(z.dtype)),
    "relu6": (lambda z: np.clip(z, 0, 6), lambda z: ((z > 0) & (z < 6)).astype(z.dtype)),
    "hardtanh": (lambda z: np.clip(z, -1, 1), lambda z: (np.abs(z) < 1).astype(z.dtype)),
    "hardsigmoid": (lambda z: np.clip((z + 3) / 6, 0, 1), lambda z: np.where(np.abs(z) < 3, 1 / 6, 0).astype(z.dtype)),
    "leakyrelu": (lambda z: np.where(z > 0, z, 0.01 * z), lambda z: np.where(z > 0, 1, 0.01).astype(z.dtype)),
}


def bias_act(name: str, x, b, kind: str, buggy: bool, slope: Callable | None = None) -> Case:
    act, dact = ACTS[name]

    def vjp(p, g):
        x, b = p
        d = slope(x, b) if slope is not None else dact(x + b)
        gx = g * d
        return gx, gx.sum(0)

    return Case(name, kind, buggy, lambda x, b: act(x + b), vjp, [x, b])


def swish_fed_shifted_output(x, b):
    """NNlib's exact path: the output computed as swish(x) + b (bias after the
    activation) fed with z = x + b to the rule y + sigmoid(z) (1 - y)."""
    y = ACTS["swish"][0](x) + b
    return y + sigmoid(x + b) * (1 - y)


def flipped(at: tuple[int, int]):
    def slope(x, b):
        d = ACTS["tanh"][1](x + b)
        d[at] = -d[at]
        return d

    return slope


# -- layer norm over the last axis (weight, bias), and group norm (C=4, G=2) -------------------------
def _ln_stats(x, ddof=0):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).sum(-1, keepdims=True) / (x.shape[-1] - ddof)
    return mu, var


def layer_norm(x, w, beta):
    mu, var = _ln_stats(x)
    return (x - mu) / np.sqrt(var + EPS) * w + beta


def layer_norm_vjp(bug: str | None = None):
    def vjp(p, g):
        x, w, _ = p
        mu, var = _ln_stats(x)
        xhat = (x - mu) / np.sqrt(var + EPS)  # as the forward made it
        # the statistics as the (buggy) rule has them
        _, var_b = _ln_stats(x, ddof=1 if bug == "unbiased" else 0)
        rstd = 1 / (np.sqrt(var_b) + EPS) if bug == "eps outside" else 1 / np.sqrt(var_b + EPS)
        xh = (x - mu) * rstd
        gxhat = g * w
        if bug == "constant stats":
            gx = rstd * gxhat
        elif bug == "no variance term":
            gx = rstd * (gxhat - gxhat.mean(-1, keepdims=True))
        else:
            gx = rstd * (gxhat - gxhat.mean(-1, keepdims=True) - xh * (gxhat * xh).mean(-1, keepdims=True))
        return gx, (g * xhat).sum(0), g.sum(0)

    return vjp


def group_norm(x, groups=2):
    n, c, length = x.shape
    xg = x.reshape(n, groups, -1)
    mu, var = _ln_stats(xg)
    return ((xg - mu) / np.sqrt(var + EPS)).reshape(n, c, length)


def group_norm_vjp(wrong_channels: bool):
    order = np.array([0, 2, 1, 3]) if wrong_channels else np.arange(4)  # groups {0,2},{1,3} instead of {0,1},{2,3}

    def vjp(p, g):
        (x,) = p
        n, c, length = x.shape
        xg, gg = x[:, order].reshape(n, 2, -1), g[:, order].reshape(n, 2, -1)
        mu, var = _ln_stats(xg)
        rstd = 1 / np.sqrt(var + EPS)
        xhat = (xg - mu) * rstd
        gx = rstd * (gg - gg.mean(-1, keepdims=True) - xhat * (gg * xhat).mean(-1, keepdims=True))
        out = np.empty_like(x)
        out[:, order] = gx.reshape(n, c, length)
        return (out,)

    return vjp


def catalogue() -> list[Case]:
    rng = np.random.default_rng(0)
    x = rng.uniform(-5, 5, (3, 4))
    b = rng.uniform(-1, 1, 4)
    big_x, big_b = rng.standard_normal((100, 100)), rng.standard_normal(100)
    xl, wl, bl = rng.standard_normal((4, 8)), rng.uniform(0.5, 1.5, 8), rng.standard_normal(8)
    small = rng.standard_normal((4, 8)) * 3e-3
    xg = rng.standard_normal((2, 4, 3))
    # inputs on the kinks: x + b lands exactly on them
    kb = np.array([0.5, -0.25, 0.75, 1.0])

    def on(points):
        return np.array(points, dtype=np.float64).reshape(1, -1) - kb

    return [
        bias_act("swish", x, b, "seed bug: swish' at x, not x + b", True, lambda x, b: ACTS["swish"][1](x)),
        bias_act("swish", x, b, "seed bug: rule fed y = swish(x) + b", True, swish_fed_shifted_output),
        bias_act(
            "hardsigmoid",
            x,
            b,
            "seed bug: slope 1 where saturated",
            True,
            lambda x, b: np.where(np.abs(x + b) < 3, 1 / 6, 1.0),
        ),
        bias_act("relu6", np.abs(x) * 2, b, "relu6 without its cap", True, lambda x, b: (x + b > 0).astype(np.float64)),
        bias_act("tanh", big_x, big_b, "one wrong element of 10^4", True, flipped((37, 42))),
        Case("layer_norm", "stats as constants", True, layer_norm, layer_norm_vjp("constant stats"), [xl, wl, bl]),
        Case(
            "layer_norm",
            "variance term dropped (weight 1)",
            True,
            layer_norm,
            layer_norm_vjp("no variance term"),
            [xl, np.ones(8), bl],
        ),
        Case("layer_norm", "unbiased variance in backward", True, layer_norm, layer_norm_vjp("unbiased"), [xl, wl, bl]),
        Case(
            "layer_norm",
            "eps outside the sqrt (std 3e-3)",
            True,
            layer_norm,
            layer_norm_vjp("eps outside"),
            [small, wl, bl],
        ),
        Case("group_norm", "stats on the wrong channels (C=4, G=2)", True, group_norm, group_norm_vjp(True), [xg]),
        # correct rules, which a checker should pass
        bias_act("relu", on([0.0, 1.0, -2.0, 0.0]), kb, "correct: relu on its kink", False),
        bias_act("hardtanh", on([1.0, -1.0, 0.3, 2.0]), kb, "correct: hardtanh on its kinks", False),
        bias_act("hardsigmoid", on([3.0, -3.0, 1.0, 4.0]), kb, "correct: hardsigmoid on its kinks", False),
        bias_act("leakyrelu", on([0.0, 0.5, -0.5, 0.0]), kb, "correct: leakyrelu on its kink", False),
        bias_act("tanh", x.astype(np.float32), b.astype(np.float32), "correct: tanh in float32", False),
        bias_act("swish", x.astype(np.float32), b.astype(np.float32), "correct: swish in float32, b != 0", False),
        bias_act("tanh", big_x, big_b, "correct: tanh, 10^4 elements", False),
        Case("layer_norm", "correct: std 3e-3", False, layer_norm, layer_norm_vjp(), [small, wl, bl]),
        Case(
            "layer_norm",
            "correct: float32",
            False,
            layer_norm,
            layer_norm_vjp(),
            [xl.astype(np.float32), wl.astype(np.float32), bl.astype(np.float32)],
        ),
        Case("group_norm", "correct: C=4, G=2", False, group_norm, group_norm_vjp(False), [xg]),
    ]


# -- the case in each checker's form ---------------------------------------------------------------
def as_torch(case: Case) -> Callable[..., torch.Tensor]:
    class Rule(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, *xs: torch.Tensor) -> torch.Tensor:
            ctx.save_for_backward(*xs)
            return torch.from_numpy(np.asarray(case.f(*[t.detach().numpy() for t in xs]), dtype=case.args[0].dtype))

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, ...]:
            xs = [t.detach().numpy() for t in ctx.saved_tensors]
            cots = case.vjp(xs, g.detach().numpy())
            return tuple(torch.from_numpy(np.ascontiguousarray(c, dtype=x.dtype)) for c, x in zip(cots, xs))

    Rule.__name__ = case.name
    return Rule.apply


def as_jax(case: Case) -> Callable[..., Any]:
    shapes = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in case.args]
    out = jax.ShapeDtypeStruct(np.shape(case.f(*case.args)), case.args[0].dtype)

    @jax.custom_vjp
    def f(*xs):
        return jax.pure_callback(lambda *a: np.asarray(case.f(*a), dtype=out.dtype), out, *xs)

    def fwd(*xs):
        return f(*xs), xs

    def bwd(xs, g):
        def host(*a):
            return tuple(np.asarray(c, dtype=s.dtype) for c, s in zip(case.vjp(list(a[:-1]), a[-1]), shapes))

        return jax.pure_callback(host, tuple(shapes), *xs, g)

    f.defvjp(fwd, bwd)
    return f


KINK_NOTES: set[int] = set()  # cases gradverify passed as inconclusive: an input on a kink


def run_gradverify(case: Case) -> bool:
    fn = as_torch(case)
    r = gv.check(fn, *[torch.from_numpy(a.copy()) for a in case.args])
    if r.ok and r.inconclusive:
        KINK_NOTES.add(id(case))
    return not r.ok


def run_gradcheck(case: Case, fast: bool) -> bool:
    fn = as_torch(case)
    args = [torch.from_numpy(a.copy()).requires_grad_() for a in case.args]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # float32 inputs: it warns, then judges them anyway
        try:
            return not torch.autograd.gradcheck(fn, args, fast_mode=fast, raise_exception=False)
        except Exception:  # noqa: BLE001  (an error raised by the checker is a detection too)
            return True


def run_check_grads(case: Case) -> bool:
    fn = as_jax(case)
    try:
        check_grads(fn, tuple(jax.numpy.asarray(a) for a in case.args), order=1, modes=("rev",))
    except AssertionError:
        return True
    return False


CHECKERS = {
    "gradverify": run_gradverify,
    "gradcheck (slow)": lambda c: run_gradcheck(c, fast=False),
    "gradcheck (fast)": lambda c: run_gradcheck(c, fast=True),
    "check_grads": run_check_grads,
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=3, help="timed runs of each check (median)")
    args = p.parse_args()
    torch.set_num_threads(1)
    cases = catalogue()
    results: dict[tuple[int, str], tuple[bool, float]] = {}
    for _ in range(args.reps):  # interleaved: every checker once per round
        for i, case in enumerate(cases):
            for name, run in CHECKERS.items():
                t0 = time.perf_counter()
                flagged = run(case)
                dt = time.perf_counter() - t0
                prev = results.get((i, name))
                if prev is not None and prev[0] != flagged:
                    raise SystemExit(f"{name} on {case.kind}: flagged {prev[0]} then {flagged}")
                results[(i, name)] = (flagged, (prev[1] if prev else []) + [dt])  # type: ignore[operator]
    names = list(CHECKERS)
    print("| case | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for i, case in enumerate(cases):
        cells = []
        for name in names:
            flagged, ts = results[(i, name)]
            mark = ("**caught**" if flagged else "missed") if case.buggy else ("FALSE ALARM" if flagged else "passes")
            if name == "gradverify" and id(case) in KINK_NOTES:
                mark += ", kink found"
            cells.append(f"{mark} ({statistics.median(ts) * 1e3:.0f} ms)")
        print(f"| {case.name}: {case.kind} | " + " | ".join(cells) + " |")
    bugs = [i for i, c in enumerate(cases) if c.buggy]
    good = [i for i, c in enumerate(cases) if not c.buggy]
    print()
    print("| checker | bugs caught | false alarms | median time per check |")
    print("|---|---|---|---|")
    for name in names:
        caught = sum(results[(i, name)][0] for i in bugs)
        alarms = sum(results[(i, name)][0] for i in good)
        t = statistics.median(statistics.median(results[(i, name)][1]) for i in range(len(cases)))
        print(f"| {name} | {caught} / {len(bugs)} | {alarms} / {len(good)} | {t * 1e3:.0f} ms |")


if __name__ == "__main__":
    main()
