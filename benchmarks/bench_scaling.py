"""Scaling benchmark: time, peak memory and function evaluations
of one check of a correct tanh(x + b) rule (float64) from n = 10^2 to 10^7
elements, under gradverify, torch.autograd.gradcheck (fast and slow mode) and
jax.test_util.check_grads.

Every measurement runs in a fresh process (so peak memory is its own), after
one warm-up check of 3 elements (imports, first-call set-up): the wall time
of the check and its peak resident memory above what the process held before
it (inputs included). Evaluations are calls of the primal and of its rules,
counted by the function itself. gradcheck's slow mode builds the dense n x n
Jacobian (8 n^2 bytes: 80 GB at n = 10^5): it is run up to --slow-max.

    python benchmarks/bench_scaling.py [--sizes 100 1000 ... 10000000] [--slow-max 10000]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

CHECKERS = ("gradverify", "gradcheck (fast)", "gradcheck (slow)", "check_grads")


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def one(checker: str, n: int) -> dict:
    """In a fresh process: one check of n elements."""
    import numpy as np

    rng = np.random.default_rng(0)
    x0, b0 = rng.standard_normal(n), rng.standard_normal(1)
    calls = {"primal": 0, "rule": 0}
    if checker == "check_grads":
        import jax
        import jax.numpy as jnp
        from jax.test_util import check_grads

        jax.config.update("jax_enable_x64", True)

        @jax.custom_vjp
        def f(x, b):
            calls["primal"] += 1
            return jnp.tanh(x + b)

        def fwd(x, b):
            y = f(x, b)
            return y, y

        def bwd(y, g):
            calls["rule"] += 1
            gx = g * (1 - y * y)
            return gx, gx.sum(keepdims=True)

        f.defvjp(fwd, bwd)

        def run(x, b):
            check_grads(f, (jnp.asarray(x), jnp.asarray(b)), order=1, modes=("rev",))
    else:
        import torch

        torch.set_num_threads(1)

        class TanhBias(torch.autograd.Function):  # reverse mode only, as most custom Functions
            @staticmethod
            def forward(x, b):
                calls["primal"] += 1
                return torch.tanh(x + b)

            @staticmethod
            def setup_context(ctx, inputs, output):
                ctx.save_for_backward(output)

            @staticmethod
            def backward(ctx, g):
                calls["rule"] += 1
                (y,) = ctx.saved_tensors
                gx = g * (1 - y * y)
                return gx, gx.sum(0, keepdim=True)

        import gradverify as gv

        def run(x, b):
            args = [torch.from_numpy(x), torch.from_numpy(b)]
            if checker == "gradverify":
                assert gv.check(TanhBias.apply, *args).ok
            else:
                inputs = [a.clone().requires_grad_() for a in args]
                assert torch.autograd.gradcheck(TanhBias.apply, inputs, fast_mode=checker == "gradcheck (fast)")

    run(x0[:3].copy(), b0.copy())  # warm up: imports and first-call set-up are not the check's cost
    calls.update(primal=0, rule=0)
    base = peak_mib()
    t0 = time.perf_counter()
    run(x0, b0)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "peak_mib": max(0.0, peak_mib() - base), "calls": calls["primal"] + calls["rule"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[10**k for k in range(2, 8)])
    p.add_argument("--slow-max", type=int, default=10**4)
    p.add_argument("--one", nargs=2, metavar=("CHECKER", "N"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print(json.dumps(one(args.one[0], int(args.one[1]))))
        return
    rows = {}
    for n in args.sizes:
        for checker in CHECKERS:
            if checker == "gradcheck (slow)" and n > args.slow_max:
                rows[(n, checker)] = f"not run: dense Jacobian {8 * n * n / 2**30:.3g} GiB"
                continue
            done = subprocess.run(
                [sys.executable, __file__, "--one", checker, str(n)], capture_output=True, text=True, check=False
            )
            if done.returncode != 0:
                rows[(n, checker)] = "failed: " + (done.stderr.strip().splitlines() or ["?"])[-1][:60]
                continue
            r = json.loads(done.stdout.strip().splitlines()[-1])
            rows[(n, checker)] = f"{r['seconds']:.3g} s, {r['peak_mib']:.0f} MiB, {r['calls']} calls"
        print(f"n = {n:.0e} done", file=sys.stderr, flush=True)
    print("| n | " + " | ".join(CHECKERS) + " |")
    print("|---|" + "---|" * len(CHECKERS))
    for n in args.sizes:
        print(f"| 1e{len(str(n)) - 1} | " + " | ".join(rows[(n, c)] for c in CHECKERS) + " |")


if __name__ == "__main__":
    main()
