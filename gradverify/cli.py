"""The ``gradverify`` command. For now: ``gradverify check examples`` checks the
built-in fused swish(x + b) rules on every installed backend; ``example:seed-bug``
shows the seed bug being caught. Issue #5 grows this into the full command.

Exit status: 0 all passed, 1 a gradient check failed, 2 usage or internal error.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Sequence

BACKENDS = ("numpy", "torch", "jax")
TARGETS = {
    "examples": (False, "the correct fused swish(x + b) rules"),
    "example:seed-bug": (True, "NNlib's bias_act! seed bug: swish' evaluated at x, not x + b"),
}


def _installed(backend: str) -> bool:
    return backend == "numpy" or importlib.util.find_spec(backend) is not None


def _run_check(args: argparse.Namespace) -> int:
    from . import check
    from ._examples import BUILDERS, example_inputs

    backends = BACKENDS if args.backend == "all" else (args.backend,)
    passed = failed = skipped = inconclusive = 0
    for target in args.targets:
        if target not in TARGETS:
            print(
                f"gradverify: unknown target {target!r}; expected one of {', '.join(TARGETS)}",
                file=sys.stderr,
            )
            return 2
        bug, what = TARGETS[target]
        print(f"== {target}: {what}")
        for backend in backends:
            if not _installed(backend):
                print(f"-- {backend}: skipped (not installed; pip install gradverify[{backend}])")
                skipped += 1
                continue
            fn = BUILDERS[backend](bug)
            for dtype in args.dtype:
                inputs = example_inputs(backend, dtype, seed=args.seed)
                result = check(fn, *inputs, seed=args.seed, order=args.order)
                print(f"-- {backend} {dtype}")
                print(result)
                if result.ok:
                    passed += 1
                    inconclusive += result.inconclusive
                else:
                    failed += 1
    tail = f", {skipped} skipped" if skipped else ""
    tail += f", {inconclusive} inconclusive" if inconclusive else ""
    print(f"{passed} passed, {failed} failed{tail}")
    return 1 if failed else 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gradverify", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="check gradients of built-in targets")
    c.add_argument("targets", nargs="+", metavar="TARGET", help=f"one of: {', '.join(TARGETS)}")
    c.add_argument("--backend", choices=(*BACKENDS, "all"), default="all")
    c.add_argument("--dtype", nargs="+", choices=("float64", "float32"), default=["float64", "float32"])
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--order", type=int, choices=(1, 2), default=1)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0) and 2
    try:
        return _run_check(args)
    except Exception as e:  # an internal error: say so, exit 2
        print(f"gradverify: internal error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
