"""A real project's gradient tests, the checkers timed per test: its own checker alone, then gradverify alone.

    python benchmarks/bench_suite.py [--rounds R] [--out DIR] [--directional] -- PYTEST ARGUMENTS...

runs ``python -m pytest PYTEST ARGUMENTS`` from the current directory (a
project's checkout), once as it is and once with ``--gradverify-replace=replace``
(every ``gradcheck``/``gradgradcheck``/``check_grads`` call checked by
gradverify alone), R rounds alternating the two, and times the checker's
calls in each test (a plugin, ``_suite_timer.py``, wraps them where the
suite binds them: the test's own work and pytest's around them are left
out). It prints, over the tests that called a checker as often in both
runs: the totals, the median ratio per test (gradverify / the project's
checker) with its quartiles, the ratio by the project's checker's time,
and the tests whose outcome differs. Each test's time is its fastest
round's.

Why two runs and not ``--gradverify-replace=compare`` (both checkers on each
call, one after the other): in one process each checker's first call at a
shape warms the framework's caches for the other. jax compiles each eager
operation once per shape, dtype and context, so the checker called second
finds the programs of the first compiled, and its time understates a
switch: on jax's ``lax_autodiff_test.py -k testOpGrad1`` the compare table
put gradverify at 1.64x ``check_grads`` per call where the two runs alone
put it at 2.59x. Compare mode is for verdicts; this script is for time.

``--directional`` runs gradverify with its checks of small inputs made
along random directions, as of large ones, rather than by the full
Jacobian (a plugin, ``_directional.py``): what the full Jacobian costs on
the suite. Its verdicts are not gradverify's own; it is for time only.

Each round's per-test times are written to ``DIR/<round>-{original,gradverify}.json``.
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

#: A pytest plugin, loaded by name from this folder, that times each test's
#: checker calls and writes {nodeid: [seconds, calls, outcome]} to $BENCH_SUITE_OUT.
PLUGIN = "_suite_timer"


def run(args: list[str], out: Path, replace: bool, directional: bool = False) -> dict[str, list]:
    env = dict(os.environ)
    here = str(Path(__file__).resolve().parent)
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["BENCH_SUITE_OUT"] = str(out)
    command = [sys.executable, "-m", "pytest", "-p", PLUGIN, *args]
    if replace:
        command.append("--gradverify-replace=replace")
        if directional:
            command += ["-p", "_directional"]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if not out.exists():
        raise SystemExit(
            f"bench_suite: pytest wrote no timings ({' '.join(command)}); exit {done.returncode}\n"
            + (done.stdout[-2000:] + done.stderr[-2000:])
        )
    return json.loads(out.read_text())


def quartiles(values: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
    return q[0], statistics.median(values), q[2]


def report(original: dict[str, list], gradverify: dict[str, list]) -> str:
    both = [t for t in original if t in gradverify and original[t][1] == gradverify[t][1] and original[t][0] > 0]
    if not both:
        return "no test called a checker as often in both runs"
    ratios = [gradverify[t][0] / original[t][0] for t in both]
    p25, median, p75 = quartiles(ratios)
    lines = [
        f"{len(both)} tests, {sum(original[t][1] for t in both)} checker calls: "
        f"original {sum(original[t][0] for t in both):.2f} s, "
        f"gradverify {sum(gradverify[t][0] for t in both):.2f} s "
        f"({sum(gradverify[t][0] for t in both) / sum(original[t][0] for t in both):.2f}x)",
        f"per test: median {median:.2f}x (p25 {p25:.2f}x, p75 {p75:.2f}x)",
        "",
        "| original's time | tests | median ratio |",
        "|---|---|---|",
    ]
    for low, high in ((0, 0.002), (0.002, 0.02), (0.02, 0.2), (0.2, 2.0), (2.0, float("inf"))):
        band = [r for t, r in zip(both, ratios) if low <= original[t][0] < high]
        if band:
            label = f"{low * 1e3:g}-{high * 1e3:g} ms" if high != float("inf") else f">= {low:g} s"
            lines.append(f"| {label} | {len(band)} | {statistics.median(band):.3g}x |")
    differ = [t for t in both if original[t][2] != gradverify[t][2]]
    lines.append("")
    lines.append(f"outcomes differ in {len(differ)} test(s)" + (":" if differ else ""))
    lines += [f"  {t}: original {original[t][2]}, gradverify {gradverify[t][2]}" for t in differ]
    left = (set(original) | set(gradverify)) - set(both)
    if left:
        lines.append(f"left out: {len(left)} test(s) that called a checker in one run only, or not as often")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="where each run's timings are written")
    parser.add_argument(
        "--directional",
        action="store_true",
        help="gradverify checks small inputs along random directions, not by the full Jacobian "
        "(what the full Jacobian costs; timing only: the verdicts are not gradverify's own)",
    )
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER)
    options = parser.parse_args()
    args = options.pytest_args[1:] if options.pytest_args[:1] == ["--"] else options.pytest_args
    if not args:
        parser.error("expected the pytest arguments after --, e.g. -- tests/lax_autodiff_test.py")
    out = options.out or Path(tempfile.mkdtemp(prefix="bench-suite-"))
    out.mkdir(parents=True, exist_ok=True)
    original: dict[str, list] = {}
    gradverify: dict[str, list] = {}
    for r in range(options.rounds):
        for replace, into in ((False, original), (True, gradverify)):
            times = run(args, out / f"{r}-{'gradverify' if replace else 'original'}.json", replace, options.directional)
            for test, held in times.items():  # (each test's fastest round)
                if test not in into or held[0] < into[test][0]:
                    into[test] = held
    directional = "; gradverify directional on small inputs" if options.directional else ""
    print(f"pytest {' '.join(args)}  ({options.rounds} round(s){directional}; timings in {out})")
    print(report(original, gradverify))


if __name__ == "__main__":
    main()
