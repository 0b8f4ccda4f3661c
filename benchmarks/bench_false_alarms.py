"""False alarms on correct functions, side by side with torch.autograd.gradcheck
and jax.test_util.check_grads, and the bug catalogue's detection rate beside.

1. The naive-strategy suite (gradverify._sweep.examples.naive_cases): every
   activation of the table through its reference implementation on torch and
   jax, and library functions that cancel, saturate or divide, fed what a new
   user writes - floats in [-10, 10], zeros, subnormals and repeats included,
   shapes 1-5 - in float64 and float32. The same drawn inputs go to every
   tool; a tool's false alarm is a correct function it fails at an input.
   gradverify's inconclusive checks (a kink, a quantised tail) are counted
   apart: they are not failures.
   With ``--batched``, gradverify also runs every input with
   ``batched=True`` (the JVP and VJP under vmap against their plain values).
2. gelu's tail: F.gelu(x + b) and jax.nn.gelu(x + b, approximate=False), one
   point a check, z = x + b uniform in [-12, 12] and b in +-[0.25, 3], in
   float64 and float32 (``--tail-points`` of them each), every tool.
3. Real library functions at the inputs they were once flagged on, and ten
   more (torch, jax, kornia, e3nn where they install).
4. The bug catalogue (bench_catalogue.py): bugs caught out of bugs.

    python benchmarks/bench_false_alarms.py [--seeds 3] [--examples 50] [--only torch] [--batched] [--tail-points 2000]
"""

from __future__ import annotations

import argparse
import contextlib
import time
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
import torch.nn.functional as F
from hypothesis import Phase, given, seed as hypothesis_seed, settings
from jax.test_util import check_grads

import gradverify as gv
from gradverify._sweep.examples import naive_cases, naive_strategy


def draw(strategy: Any, examples: int, seed: int) -> list[tuple]:
    """The inputs Hypothesis generates for ``strategy`` under ``seed``."""
    out: list[tuple] = []

    @hypothesis_seed(seed)
    @settings(max_examples=examples, database=None, phases=[Phase.generate], deadline=None)
    @given(strategy)
    def collect(args: tuple) -> None:
        out.append(args)

    collect()
    return out


def run_gradverify(fn: Callable, args: tuple, batched: bool = False) -> str:
    r = gv.check(fn, *args, batched=batched)
    return "fail" if not r.ok else ("inconclusive" if r.inconclusive else "pass")


def run_gradverify_batched(fn: Callable, args: tuple) -> str:
    return run_gradverify(fn, args, batched=True)


def run_gradcheck(fn: Callable, args: tuple) -> str:
    inputs = tuple(a.detach().clone().requires_grad_(True) for a in args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ok = torch.autograd.gradcheck(fn, inputs, raise_exception=False, check_forward_ad=True)
        except Exception:
            ok = False
    return "pass" if ok else "fail"


def run_check_grads(fn: Callable, args: tuple) -> str:
    wide = any(a.dtype == jnp.float64 for a in args)
    try:
        with jax.enable_x64(wide):
            check_grads(fn, args, order=1, modes=("fwd", "rev"))
        return "pass"
    except AssertionError:
        return "fail"
    except Exception:
        return "fail"


TOOLS = {"torch": ("gradverify", "gradcheck"), "jax": ("gradverify", "check_grads")}
RUNNERS = {
    "gradverify": run_gradverify,
    "gradverify batched": run_gradverify_batched,
    "gradcheck": run_gradcheck,
    "check_grads": run_check_grads,
}
COLUMNS = ("gradverify", "gradverify batched", "gradcheck", "check_grads")


def naive_suite(seeds: int, examples: int, only: str | None, batched: bool = False) -> list[dict]:
    rows = []
    for case in naive_cases():
        if only and case.backend != only:
            continue
        for dtype in ("float64", "float32"):
            inputs = [a for s in range(seeds) for a in draw(naive_strategy(case, dtype), examples, s)]
            tools = TOOLS[case.backend] + (("gradverify batched",) if batched else ())
            rows.append(_row(case.label, dtype, case.fn, inputs, tools))
    return rows


def _row(label: str, dtype: str, fn: Callable, inputs: list[tuple], tools: tuple[str, ...], wide: bool = False) -> dict:
    """Every tool's outcomes on ``inputs`` (under jax's x64 where ``wide``),
    printed as a table row."""
    row: dict[str, Any] = {"case": label, "dtype": dtype, "inputs": len(inputs)}
    for tool in tools:
        t0 = time.perf_counter()
        with jax.enable_x64(True) if wide else contextlib.nullcontext():
            outcomes = [RUNNERS[tool](fn, args) for args in inputs]
        row[tool] = {
            "fail": outcomes.count("fail"),
            "inconclusive": outcomes.count("inconclusive"),
            "seconds": time.perf_counter() - t0,
        }
    print(_naive_line(row), flush=True)
    return row


def _naive_line(row: dict) -> str:
    cells = [f"{row['case']} {row['dtype']}", str(row["inputs"])]
    for tool in COLUMNS:
        if tool in row:
            r = row[tool]
            extra = f" ({r['inconclusive']} inconclusive)" if r["inconclusive"] else ""
            cells.append(f"{r['fail']}{extra}")
        else:
            cells.append("-")
    return "| " + " | ".join(cells) + " |"


# -- gelu's tail ------------------------------------------------------------------------
def tail_suite(points: int) -> list[dict]:
    """F.gelu and jax's erf-form gelu at x + b, one point a check, every tool."""
    rng = np.random.default_rng(0)
    z = rng.uniform(-12.0, 12.0, points)
    b = rng.choice([-1.0, 1.0], points) * rng.uniform(0.25, 3.0, points)
    jax_gelu = jax.jit(lambda x, b: jax.nn.gelu(x + b, approximate=False))
    rows = []
    for backend, fn in (("torch", lambda x, b: F.gelu(x + b)), ("jax", jax_gelu)):
        for dtype in ("float64", "float32"):
            if backend == "torch":
                inputs = [
                    (
                        torch.tensor([zk - bk], dtype=getattr(torch, dtype)),
                        torch.tensor([bk], dtype=getattr(torch, dtype)),
                    )
                    for zk, bk in zip(z, b)
                ]
            else:
                with jax.enable_x64(True):
                    inputs = [
                        (jnp.asarray([zk - bk], dtype=dtype), jnp.asarray([bk], dtype=dtype)) for zk, bk in zip(z, b)
                    ]
            label = f"{backend} gelu(x + b), z in [-12, 12]"
            rows.append(_row(label, dtype, fn, inputs, TOOLS[backend], wide=dtype == "float64"))
    return rows


# -- real library functions at their inputs -------------------------------------------
def library_cases() -> list[tuple[str, str, Callable, tuple]]:
    t64 = lambda *v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    t32 = lambda *v: torch.tensor(v, dtype=torch.float32)  # noqa: E731
    with jax.enable_x64(True):
        j64 = lambda *v: jnp.asarray(v, dtype=jnp.float64)  # noqa: E731
        rows = [
            ("torch.logsumexp, a row near 0", "torch", lambda x: torch.logsumexp(x, -1), (t64(-10.0, 0.0, -12.0),)),
            ("jax.nn.gelu (tanh) at x + b = -7", "jax", lambda x, b: jax.nn.gelu(x + b), (j64(0.0), j64(-7.0))),
            ("F.gelu at -4 (float64)", "torch", F.gelu, (t64(-4.0),)),
            ("F.silu at b = 1.4e-45 (float32)", "torch", lambda x, b: F.silu(x + b), (t32(0.0), t32(1.4e-45))),
            ("F.mish at b = 1.4e-45 (float32)", "torch", lambda x, b: F.mish(x + b), (t32(0.0), t32(1.4e-45))),
            ("F.selu at b = 1.4e-45 (float32)", "torch", lambda x, b: F.selu(x + b), (t32(0.0), t32(1.4e-45))),
            ("2a at 1e200", "torch", lambda a: 2 * a, (t64(1e200),)),
            ("torch.sin at 1e15", "torch", torch.sin, (t64(1e15),)),
            ("F.gelu at -5 (float32)", "torch", F.gelu, (t32(-5.0),)),
            ("F.tanhshrink at 2^-6 (float32)", "torch", F.tanhshrink, (t32(2.0**-6),)),
            (
                "F.tanhshrink(x + b) at 3.5e-3, on z's grid",
                "torch",
                lambda x, b: F.tanhshrink(x + b),
                (t64(*[3.5064982365579657e-3] * 5), t64(*[s * 3.5064982365579657e-3 for s in (0.3, 0, 1, 2, -0.5)])),
            ),
            ("F.layer_norm, rows [5.75, 6] (float32)", "torch", lambda x: F.layer_norm(x, (2,)), (t32(5.75, 6.0),)),
            # ten more
            ("F.softplus at 30", "torch", F.softplus, (t64(30.0, -30.0, 0.5),)),
            ("torch.special.ndtr at -8", "torch", torch.special.ndtr, (t64(-8.0, -4.0, 1.0),)),
            ("torch.erfc at 5", "torch", torch.erfc, (t64(5.0, 0.1, -2.0),)),
            ("F.log_softmax, a spread row", "torch", lambda x: F.log_softmax(x, -1), (t64(-30.0, 0.0, 30.0, 1.0),)),
            (
                "F.cosine_similarity",
                "torch",
                lambda a, b: F.cosine_similarity(a, b, dim=-1),
                (t64(1.0, 2.0, 3.0), t64(-1.0, 0.5, 2.0)),
            ),
            ("torch.atan2 near the axis", "torch", torch.atan2, (t64(1e-8, -1e-8), t64(-1.0, -1.0))),
            (
                "jax.nn.softmax (float32)",
                "jax",
                lambda x: jax.nn.softmax(x),
                (jnp.asarray([-20.0, 0.0, 20.0, 3.0], dtype=jnp.float32),),
            ),
            ("jax.nn.log_sigmoid at -40", "jax", jax.nn.log_sigmoid, (j64(-40.0, 0.0, 40.0),)),
            (
                "jax.numpy.linalg.norm",
                "jax",
                lambda x: jnp.linalg.norm(x, axis=-1, keepdims=True),
                (j64(3.0, 4.0, 1e-9),),
            ),
            (
                "jax.scipy.special.erf (float32)",
                "jax",
                jax.scipy.special.erf,
                (jnp.asarray([-3.0, 0.2, 5.0], dtype=jnp.float32),),
            ),
        ]
    try:
        from e3nn import o3

        x = t64(0.3, -1.2, 0.8, 1e-72, 2e-72, -1.5e-72).reshape(2, 3)
        rows.append(
            (
                "e3nn spherical_harmonics(normalize=True), a row of 1e-72",
                "torch",
                lambda v: o3.spherical_harmonics(2, v, normalize=True),
                (x,),
            )
        )
    except ImportError:
        pass
    try:
        import kornia

        q = t64(0.0, 0.3, -0.5, 0.8)
        rows.append(
            (
                "kornia quaternion_to_axis_angle at w = 0",
                "torch",
                kornia.geometry.conversions.quaternion_to_axis_angle,
                ((q / q.norm()).reshape(1, 4),),
            )
        )
    except ImportError:
        pass
    return rows


def library_suite() -> list[dict]:
    rows = []
    for label, backend, fn, args in library_cases():
        row = {"case": label}
        for tool in TOOLS[backend]:
            if backend == "jax" and tool == "gradverify":
                with jax.enable_x64(any(a.dtype == jnp.float64 for a in args)):
                    row[tool] = RUNNERS[tool](fn, args)
            else:
                row[tool] = RUNNERS[tool](fn, args)
        rows.append(row)
        print(
            f"| {label} | " + " | ".join(row.get(t, "-") for t in ("gradverify", "gradcheck", "check_grads")) + " |",
            flush=True,
        )
    return rows


def catalogue_suite() -> dict:
    import bench_catalogue as cat

    caught = {"gradverify": 0, "gradcheck (fast)": 0, "check_grads": 0}
    alarms = dict.fromkeys(caught, 0)
    bugs = correct = 0
    for case in cat.catalogue():
        results = {
            "gradverify": cat.run_gradverify(case),
            "gradcheck (fast)": cat.run_gradcheck(case, fast=True),
            "check_grads": cat.run_check_grads(case),
        }
        if case.buggy:
            bugs += 1
            for k, detected in results.items():
                caught[k] += bool(detected)
        else:
            correct += 1
            for k, detected in results.items():
                alarms[k] += bool(detected)
    return {"bugs": bugs, "correct": correct, "caught": caught, "alarms": alarms}


def _totals(rows: list[dict]) -> None:
    total = {t: sum(r[t]["fail"] for r in rows if t in r) for t in COLUMNS}
    inputs = {t: sum(r["inputs"] for r in rows if t in r) for t in total}
    print("\ntotal: " + ", ".join(f"{t} {total[t]} of {inputs[t]}" for t in total if inputs[t]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--examples", type=int, default=50, help="examples per seed")
    p.add_argument("--only", choices=("torch", "jax"), default=None, help="one backend of the naive suite")
    p.add_argument("--skip-naive", action="store_true")
    p.add_argument("--batched", action="store_true", help="gradverify with batched=True too, on the naive suite")
    p.add_argument("--tail-points", type=int, default=2000, help="points of gelu's tail a backend and dtype (0: none)")
    a = p.parse_args()
    torch.set_num_threads(1)
    header = "| function | inputs | gradverify failures | gradverify batched failures | gradcheck failures "
    header += "| check_grads failures |\n|---|---|---|---|---|---|"
    if not a.skip_naive:
        print(f"## naive strategy: {a.seeds} seeds x {a.examples} examples\n")
        print(header)
        rows = naive_suite(a.seeds, a.examples, a.only, a.batched)
        _totals(rows)
    if a.tail_points:
        print(f"\n## gelu's tail: {a.tail_points} points a backend and dtype\n")
        print(header)
        _totals(tail_suite(a.tail_points))
    print("\n## real library functions\n")
    print("| function | gradverify | gradcheck | check_grads |")
    print("|---|---|---|---|")
    library_suite()
    print("\n## bug catalogue\n")
    c = catalogue_suite()
    for tool in c["caught"]:
        caught, alarms = c["caught"][tool], c["alarms"][tool]
        print(f"{tool}: {caught}/{c['bugs']} bugs caught, {alarms}/{c['correct']} correct ops failed")


if __name__ == "__main__":
    main()
