"""The naive-strategy workload (tests/check/test_naive_slow.py's cases:
plain floats in [-10, 10], shapes 1-5) timed on a slice of its case/dtype
pairs: every PARTS-th pair from PART, one seed of EXAMPLES examples after a
warm-up, in one compiling session a pair, one torch thread. Prints the total
seconds.

It times the checkout it imports gradverify from; to compare two commits,
run it alternately from each, several times, and compare medians
(``PYTHONPATH=/path/to/other/checkout python benchmarks/bench_naive_workload.py``):

    python benchmarks/bench_naive_workload.py [--part 0] [--parts 8] [--examples 120] [--seed 1]
"""

from __future__ import annotations

import argparse
import time

import gradverify as gv
from gradverify._sweep.examples import naive_cases, naive_strategy


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--part", type=int, default=0)
    p.add_argument("--parts", type=int, default=8)
    p.add_argument("--examples", type=int, default=120)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass
    jobs = [(c, d) for c in naive_cases() for d in ("float64", "float32")][args.part :: args.parts]
    total = 0.0
    for case, dtype in jobs:
        with gv.compiling():
            gv.verify(case.fn, naive_strategy(case, dtype), max_examples=20, seed=0)  # warm-up: compile, import
            t = time.perf_counter()
            r = gv.verify(case.fn, naive_strategy(case, dtype), max_examples=args.examples, seed=args.seed)
            total += time.perf_counter() - t
        assert r.ok, str(r)
    print(f"{len(jobs)} case/dtype pairs x {args.examples} examples: {total:.2f} s ({gv.__file__})")


if __name__ == "__main__":
    main()
