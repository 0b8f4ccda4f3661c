"""What one check costs against an earlier version of gradverify, side by side.

One check at n = 10^6 (float64, one torch thread) of two correct functions:
a ``torch.autograd.Function`` for tanh(x + b) with a backward only (reverse
mode against FD projections), and plain ``torch.tanh(x + b)`` (both modes).
The earlier version is checked out from git into a temporary worktree; each
round runs every (version, function) pair once in a fresh process, rounds
alternate, and the table gives medians over rounds and the ratio.

    python benchmarks/bench_check_cost.py --against af54bde [--n 1000000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
import numpy as np, torch
torch.set_num_threads(1)
import gradverify as gv

class TanhBias(torch.autograd.Function):
    @staticmethod
    def forward(x, b):
        return torch.tanh(x + b)
    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)
    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        gz = g * (1 - y * y)
        return gz, gz.sum(0)

fns = {"Function, backward only": TanhBias.apply, "torch.tanh(x + b)": lambda x, b: torch.tanh(x + b)}
fn = fns[sys.argv[1]]
n, reps = int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(0)
x = torch.tensor(rng.standard_normal((n // 10, 10)))
b = torch.tensor(rng.standard_normal(10))
gv.check(fn, x[:3], b)
times = []
for _ in range(reps):
    t = time.perf_counter()
    r = gv.check(fn, x, b)
    times.append(time.perf_counter() - t)
print(json.dumps({"time": min(times), "ok": r.ok, "calls": sum(r.evaluations.values()), "file": gv.__file__}))
"""

FUNCTIONS = ("Function, backward only", "torch.tanh(x + b)")


def run(path: Path, function: str, n: int, reps: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(path)}
    # -P: no current directory in front of PYTHONPATH (it would shadow the tree under test)
    out = subprocess.run(
        [sys.executable, "-P", "-c", CHILD, function, str(n), str(reps)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert Path(result["file"]).resolve().is_relative_to(path.resolve()), (result["file"], path)
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--against", required=True, help="git revision to compare with")
    p.add_argument("--n", type=int, default=10**6)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=3, help="checks per process (its minimum is the round's time)")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "old"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(old), a.against],
            check=True,
            capture_output=True,
        )
        try:
            samples: dict[tuple[str, str], list[dict]] = {}
            for _ in range(a.rounds):
                for version, path in (("this", ROOT), (a.against, old)):
                    for f in FUNCTIONS:
                        samples.setdefault((version, f), []).append(run(path, f, a.n, a.reps))
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)], check=True)
    print(
        f"One check at n = {a.n:.0e}, float64, one torch thread; median over {a.rounds} rounds "
        f"(each the minimum of {a.reps} checks in a fresh process)\n"
    )
    print(f"| function | {a.against}: s (calls) | this: s (calls) | ratio |")
    print("|---|---:|---:|---:|")
    for f in FUNCTIONS:
        before = statistics.median(s["time"] for s in samples[(a.against, f)])
        now = statistics.median(s["time"] for s in samples[("this", f)])
        calls_b, calls_n = samples[(a.against, f)][0]["calls"], samples[("this", f)][0]["calls"]
        assert all(s["ok"] for k in samples for s in samples[k]), "a correct function failed"
        print(f"| {f} | {before:.3f} ({calls_b}) | {now:.3f} ({calls_n}) | {now / before:.2f}x |")


if __name__ == "__main__":
    main()
