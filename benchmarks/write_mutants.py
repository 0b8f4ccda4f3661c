"""Wrong rules injected into a project's recorded functions: is each caught
by the project's own fixed-point gradient tests, or by the tests
``gradverify write`` wrote from them?

Used as a pytest plugin (``-p write_mutants``, with ``benchmarks/`` on
PYTHONPATH): ``GRADVERIFY_MUTANT="module:qualname:kind:T"``
replaces the function, wherever a loaded module holds it, by the same
function whose gradient with respect to its first differentiable tensor
argument is 10% too large at the elements where the kind says:

* ``everywhere``: at every element (a wrong constant);
* ``beyond``: where ``|x| > T``, T 10% past the largest ``|x|`` of the
  recorded points (a rule wrong only past the values the suite tries; 10%
  past, as suites that draw their points afresh reach a little further on
  another run);
* ``negative``: where ``x < 0`` (a sign the suite's points may never have).

The forward is unchanged; the wrong rule sits in an identity inserted on
that argument, so torch's gradcheck and gradverify see the same function.

As a script it runs the table: for each recorded function and kind, the
suite's own tests that called it and the written test, each with the mutant::

    python benchmarks/write_mutants.py RECORDS WRITTEN.py --cwd PROJECT [--functions N]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

FACTOR = 1.1
KINDS = ("everywhere", "beyond", "negative")


def _perturbing(kind: str, threshold: float):
    import torch

    class Perturb(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.view_as(x)

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            if kind == "everywhere":
                where = torch.ones_like(x, dtype=torch.bool)
            elif kind == "beyond":
                where = x.abs() > threshold
            else:
                where = x < 0
            return torch.where(where, FACTOR * g, g)

    return Perturb.apply


def mutant(fn, kind: str, threshold: float):
    import functools

    import torch

    perturb = _perturbing(kind, threshold)

    @functools.wraps(fn)
    def wrong(*args, **kwargs):
        args = list(args)
        for k, a in enumerate(args):
            if isinstance(a, torch.Tensor) and a.is_floating_point() and a.requires_grad:
                args[k] = perturb(a)
                break
        return fn(*args, **kwargs)

    return wrong


def pytest_configure(config):
    spec = os.environ.get("GRADVERIFY_MUTANT")
    if not spec:
        return
    module_name, qualname, kind, threshold = spec.split(":")
    owner = importlib.import_module(module_name)
    head, _, attr = qualname.rpartition(".")
    holder = owner
    for part in filter(None, head.split(".")):
        holder = getattr(holder, part)
    original = getattr(holder, attr)
    wrong = mutant(original, kind, float(threshold))
    top = module_name.split(".")[0]
    importlib.import_module(top)  # (its subpackages re-export the function: replace it there too)
    for module in list(sys.modules.values()):
        if module is None or not getattr(module, "__name__", "").startswith(top):
            continue
        for name, value in list(vars(module).items()):
            if value is original:
                setattr(module, name, wrong)
    if holder is not owner or getattr(holder, attr) is original:
        setattr(holder, attr, wrong)


def _outcome(cmd: list[str], cwd: str, env: dict[str, str]) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    tail = done.stdout.strip().splitlines()[-1:] or [""]
    if done.returncode == 0:
        return "passed"
    if done.returncode == 1:
        return "failed"
    return f"error ({tail[0][:60]})"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("records")
    p.add_argument("written")
    p.add_argument("--cwd", required=True, help="the project's checkout, where its tests run")
    p.add_argument("--functions", type=int, default=8, help="at most this many functions")
    p.add_argument("--passing", required=True, help="JSON report of the written module's run: its passing tests")
    p.add_argument("--pytest-args", default="", help="extra arguments for both runs")
    args = p.parse_args()
    from gradverify._write.records import grouped, load
    from gradverify._write.source import snake

    subjects, _ = grouped(load(args.records))
    report = json.loads(Path(args.passing).read_text())
    passing = {r["nodeid"].split("::")[-1] for r in report["records"] if r["ok"]}
    repo = str(Path(__file__).resolve().parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH", "")]))}
    extra = args.pytest_args.split()
    rows = []
    candidates = [
        s
        for s in subjects
        if f"test_{snake(s.name)}" in passing and s.kind != "nn.Module" and "." not in s.path.split(":")[1]
    ]
    stride = max(1, len(candidates) // args.functions)  # (spread over the suite, not its first module)
    chosen = candidates[::stride][: args.functions]
    for subject in chosen:
        first = next(a for a in subject.calls[0]["arguments"] if a.get("differentiated") and a["kind"] == "array")
        largest = max(
            max(abs(a.get("min", 0.0)), abs(a.get("max", 0.0)))
            for c in subject.calls
            for a in c["arguments"]
            if a["path"] == first["path"]
        )
        module, qualname = subject.path.split(":")
        for kind in KINDS:
            spec = f"{module}:{qualname}:{kind}:{1.1 * largest!r}"
            run_env = {**env, "GRADVERIFY_MUTANT": spec}
            base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "write_mutants"]
            t0 = time.perf_counter()
            original = _outcome([*base, *extra, *subject.tests], args.cwd, run_env)
            t1 = time.perf_counter()
            written = _outcome(
                [*base, *extra, args.written, "-k", f"test_{snake(subject.name)} and not test_{snake(subject.name)}_"],
                args.cwd,
                run_env,
            )
            t2 = time.perf_counter()
            rows.append((subject.name, kind, original, written, t1 - t0, t2 - t1))
            print(f"| {subject.name} | {kind} | {original} | {written} |", flush=True)
    caught = {k: [sum(r[c] == "failed" for r in rows if r[1] == k) for c in (2, 3)] for k in KINDS}
    print("\n| kind | mutants | caught by the suite's tests | caught by the written tests |")
    print("|---|---|---|---|")
    for k in KINDS:
        n = sum(r[1] == k for r in rows)
        print(f"| {k} | {n} | {caught[k][0]} | {caught[k][1]} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
