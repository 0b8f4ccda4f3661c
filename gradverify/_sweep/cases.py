"""The verification matrix: independent cases (target, backend, impl, dtype,
order, seed), each built into a function and a strategy and run through
``gv.verify``, each giving a plain JSON-ready record.

A case's seed is derived from the base seed and the case's own id, so a case
gives the same result alone, in any order and on any worker.

gradverify.strategies is imported inside the function that builds a case's
strategy: it imports Hypothesis (~90 ms at start-up), which merging,
rendering, listing and the pytest plugin (through the reports) do not need.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import math
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .. import _io, ops
from .._check.steps import kink_distance as distance
from .._errors import ArgumentValueError, UsageError, explain
from .._verify import MAX_SHRINKING_SECONDS, derive_seed, generated, literal, verify
from ..backends import BACKENDS, backend_name_of
from .examples import BUILDERS
from .probe import failure_views

__all__ = [
    "EXAMPLES",
    "IMPLS",
    "NORMS",
    "Case",
    "Skip",
    "arrays_of",
    "build",
    "bundled_targets",
    "case_code",
    "case_of",
    "cases",
    "expand_targets",
    "installed",
    "kink_distance",
    "materialize",
    "resolve",
    "run_case",
    "seconds",
    "summary",
    "user_strategies",
]

IMPLS = ("reference", "fused")
NORMS = ("layer_norm", "rms_norm", "group_norm", "instance_norm", "batch_norm")
EXAMPLES = {
    "examples": "the correct fused swish(x + b) rules of gradverify._sweep.examples",
    "example:seed-bug": "NNlib's bias_act! seed bug: swish' evaluated at x, not x + b",
}


@dataclasses.dataclass(frozen=True)
class Case:
    target: str  # "bias_act:swish", "layer_norm", "pkg.mod:fn"
    op: str  # "bias_act", a normalization, or "user"
    activation: str | None
    backend: str
    impl: str
    dtype: str
    order: int
    seed: int
    max_examples: int
    strategy: str | None = None  # "pkg.mod:name" for a user target
    path: str | None = None  # a user target: the directory its modules import from (the sweep's)
    batched: bool = False  # the JVP and VJP under vmap too (gv.check's batched)
    max_shrinking_seconds: float | None = MAX_SHRINKING_SECONDS  # gv.verify's shrink budget

    @property
    def id(self) -> str:
        return f"{self.target}[{self.backend},{self.impl},{self.dtype}]"


def installed(backend: str) -> bool:
    return backend == "numpy" or importlib.util.find_spec(backend) is not None


def bundled_targets() -> list[str]:

    return [f"bias_act:{name}" for name in ops.names()] + list(NORMS)


def expand_targets(targets: Sequence[str]) -> list[str]:
    """``all`` and ``bias_act`` expand to their cases; others are checked."""

    out: list[str] = []
    for t in targets:
        if t == "all":
            out += bundled_targets()
        elif t == "bias_act":
            out += [f"bias_act:{n}" for n in ops.names()]
        elif t.startswith("bias_act:"):
            ops.activation(t.split(":", 1)[1])  # raises with the close names
            out.append(f"bias_act:{ops.activation(t.split(':', 1)[1]).name}")
        elif t in NORMS or t in EXAMPLES or (":" in t and not t.startswith("bias_act")):
            out.append(t)
        else:
            raise ArgumentValueError(
                explain(
                    "target",
                    "all, bias_act, bias_act:NAME, a normalization (" + ", ".join(NORMS) + ") or module:function",
                    repr(t),
                    "see `gradverify list`",
                )
            )
    return list(dict.fromkeys(out))


def user_strategies(targets: Sequence[str], strategies: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """The targets without their inline strategies, and each user target's
    strategy: ``MODULE:FN=MODULE:STRATEGY`` inline, else the ``--strategy``
    values in the order of the user targets that have none (one value
    serves them all)."""
    plain, inline = [], {}
    for t in targets:
        target, eq, strategy = t.partition("=")
        if eq and not strategy:
            raise ArgumentValueError(
                explain("TARGET=STRATEGY", "MODULE:FN=MODULE:STRATEGY", repr(t), "name the strategy after =")
            )
        plain.append(target)
        if eq:
            inline[target] = strategy
    user = [t for t in dict.fromkeys(plain) if _is_user(t) and t not in inline]
    given = list(strategies)
    if len(given) == 1:
        given = given * len(user)
    if user and given and len(given) != len(user):
        raise ArgumentValueError(
            explain(
                "--strategy",
                f"one per module:function target without its own ({len(user)}: {', '.join(user)}), or one for all",
                f"{len(given)}",
                "write each target as MODULE:FN=MODULE:STRATEGY, or give --strategy once per target, in their order",
            )
        )
    return plain, {**inline, **dict(zip(user, given))}


def _is_user(target: str) -> bool:
    """A ``module:function`` target (not a bundled op or an example)."""
    return ":" in target and target not in EXAMPLES and not target.startswith("bias_act")


def cases(
    targets: Sequence[str],
    *,
    backends: Sequence[str] = BACKENDS,
    impls: Sequence[str] = IMPLS,
    dtypes: Sequence[str] = ("float64",),
    order: int = 1,
    seed: int = 0,
    max_examples: int = 10,
    strategy: str | Sequence[str] | None = None,
    batched: bool = False,
    max_shrinking_seconds: float | None = MAX_SHRINKING_SECONDS,
) -> list[Case]:
    """Every (target, backend, impl, dtype) case. A user target's backend and
    dtype are those of its strategy's arrays (see ``resolve``)."""
    given = [strategy] if isinstance(strategy, str) else list(strategy or ())
    targets, strategies = user_strategies(targets, given)
    out = []
    for target in expand_targets(targets):
        user = _is_user(target)
        op = "user" if user else "example" if target in EXAMPLES else target.split(":")[0]
        act = target.split(":", 1)[1] if op == "bias_act" else "swish" if op == "example" else None
        for backend in ("-",) if user else backends:
            for impl in ("-",) if user else ("fused",) if op == "example" else impls:
                for dtype in ("-",) if user else dtypes:
                    key = f"{target}[{backend},{impl},{dtype}]/order{order}" + ("/batched" if batched else "")
                    case = Case(
                        target,
                        op,
                        act,
                        backend,
                        impl,
                        dtype,
                        order,
                        derive_seed(seed, key),
                        max_examples,
                        batched=batched,
                        max_shrinking_seconds=max_shrinking_seconds,
                    )
                    out.append(resolve(dataclasses.replace(case, strategy=strategies.get(target))) if user else case)
    return out


def _backends_used(fn: Any) -> set[str]:
    """The array libraries (torch, jax) the module defining ``fn`` imports."""
    import sys

    module = sys.modules.get(getattr(inspect.unwrap(fn), "__module__", None) or "")
    names = {getattr(v, "__name__", "").split(".")[0] for v in vars(module).values()} if module else set()
    return names & {"torch", "jax"}


def _first_example(strategy: Any) -> tuple[Any, ...]:
    """The strategy's first example at a fixed seed: the same on every run (its
    arrays name the case's backend and dtype)."""
    found: list[Any] = []
    generated(strategy, 0, 1, found.append)
    example = found[0]
    return example if isinstance(example, tuple) else (example,)


def resolve(case: Case) -> Case:
    """A user case with its backend and dtype: those of the arrays its
    strategy draws (impl "user"). An fn whose module uses one array library
    given another's arrays is a usage error, not a gradient failure."""

    if case.strategy is None:
        raise UsageError(
            explain(
                f"target {case.target}",
                "a strategy for a module:function target (MODULE:FN=MODULE:STRATEGY, or --strategy MODULE:STRATEGY)",
                "none",
                "pass --strategy mypkg.tests:args, a Hypothesis strategy of argument tuples",
            )
        )
    fn, strategy = _loaded(case)
    example = _first_example(strategy)
    arrays = [a for a in example if backend_name_of(a) is not None and hasattr(a, "dtype")]
    backends = sorted({backend_name_of(a) for a in arrays})
    if len(backends) != 1:
        raise UsageError(
            explain(
                f"--strategy {case.strategy}",
                "tuples of arrays of one backend (numpy, torch or jax)",
                f"{[type(a).__name__ for a in example]}",
                "draw the arguments of fn as one backend's arrays, e.g. gradverify.strategies.arrays('torch')",
            )
        )
    backend, used = backends[0], _backends_used(fn)
    if len(used) == 1 and backend not in used:
        (own,) = used
        raise UsageError(
            explain(
                f"{case.target} with --strategy {case.strategy}",
                f"{own} arrays (the module of {case.target} uses {own})",
                f"{backend} arrays",
                f"give this target a strategy of {own} arrays: {case.target}=MODULE:STRATEGY",
            )
        )
    dtype = str(getattr(arrays[0], "dtype", "-")).removeprefix("torch.")
    return dataclasses.replace(case, backend=backend, impl="user", dtype=dtype, path=str(Path.cwd()))


# -- building a case ------------------------------------------------------------------------
class Skip(Exception):
    """The case cannot run here (a backend not installed, numpy without AD)."""


def _load(spec: str, what: str) -> Any:
    module, _, name = spec.partition(":")
    if not module or not name:
        raise UsageError(explain(what, "module:name", repr(spec), "e.g. mypkg.kernels:fused_gelu"))
    try:
        obj = importlib.import_module(module)
    except Exception as e:  # not found, or the module itself fails (a syntax error, an exception at import)
        raise UsageError(
            explain(
                what,
                "an importable module:name",
                f"{spec!r} ({type(e).__name__}: {e})",
                "fix the module, or the spelling",
            )
        ) from e
    try:
        for part in name.split("."):
            obj = getattr(obj, part)
    except AttributeError as e:
        raise UsageError(explain(what, "an importable module:name", f"{spec!r} ({e})", "check the spelling")) from e
    return obj


def _loaded(case: Case) -> tuple[Callable[..., Any], Any]:
    """A user case's function and strategy, each what it must be."""
    from hypothesis.strategies import SearchStrategy

    fn, strategy = _load(case.target, "target"), _load(case.strategy, "--strategy")
    if not callable(fn):
        raise UsageError(
            explain(
                f"target {case.target}",
                "a function (module:function)",
                f"{type(fn).__name__} {fn!r:.60}",
                "name the function to check, e.g. mypkg.kernels:fused_gelu",
            )
        )
    if not isinstance(strategy, SearchStrategy):
        made = " (a function: name the strategy it returns, args = make_args())" if callable(strategy) else ""
        raise UsageError(
            explain(
                f"--strategy {case.strategy}",
                "a Hypothesis strategy of argument tuples",
                f"{type(strategy).__name__} {strategy!r:.60}{made}",
                "name a strategy, e.g. args = st.tuples(gradverify.strategies.arrays('torch'))",
            )
        )
    return fn, strategy


def build(case: Case) -> tuple[Callable[..., Any], Any]:
    """(fn, strategy) for a case, or Skip."""
    from hypothesis import strategies as st

    from .. import strategies as gst  # (imports hypothesis: only where a case's strategy is built)

    if case.op == "user":
        if case.strategy is None:
            resolve(case)  # (raises: no strategy)
        return _loaded(case)
    if not installed(case.backend):
        raise Skip(f"{case.backend} is not installed (pip install gradverify[{case.backend}])")
    if case.backend == "numpy" and case.impl == "reference" and case.op != "example":
        raise Skip("numpy has no AD: its reference has no derivative to check (the fused op brings rules)")
    if case.dtype == "bfloat16" and case.backend == "numpy":
        raise Skip("numpy has no bfloat16")
    # XLA compiles every operation anew for each shape (~1 s a new shape on
    # the CPU, 0.1 s a check after): jax cases draw from three shapes.
    shapes = st.sampled_from([(1, 1), (2, 3), (3, 4)]) if case.backend == "jax" else None
    if case.op == "example":
        fn = BUILDERS[case.backend](case.target == "example:seed-bug")
        return fn, gst.bias_act_args("swish", case.backend, case.dtype, shapes)
    if case.op == "bias_act":
        act = ops.activation(case.activation)
        strategy = gst.bias_act_args(act, case.backend, case.dtype, shapes)
        if case.backend == "numpy":
            return ops.bias_act_rule(act), strategy
        impl = case.impl

        def fn(x: Any, b: Any) -> Any:
            return ops.bias_act(act, x, b, impl=impl)

        fn.__name__ = f"bias_act_{act.name}_{impl}"
        return fn, strategy
    strategy = gst.normalization_args(case.op, case.backend, case.dtype, max_side=2 if case.backend == "jax" else 4)
    return gst.normalization_call(case.op, case.impl, backend=case.backend), strategy


# -- running a case -------------------------------------------------------------------------
def run_case(case: Case, report_dir: str | Path | None = None) -> dict[str, Any]:
    """Run one case through gv.verify: a JSON-ready record (never raises for
    the case's own failures; a usage error is recorded as status "error").

    The record depends on the case alone, not on the process, worker or
    directory it ran in: a failure's files are named relative to a report
    directory (``cases/NAME-seedS.npz`` and ``.py``) and written by
    :func:`materialize` from the record's exact values - with ``report_dir``
    here, or by whoever collects the records (a pool, a Dask client, a merge)."""

    record: dict[str, Any] = {
        "id": case.id,
        **dataclasses.asdict(case),
        "status": None,
        "reason": None,
        "examples_run": 0,
        "inconclusive": 0,
        "worst_ratio": None,
        "seconds": 0.0,
        "failure": None,
    }
    t0 = time.perf_counter()
    try:
        fn, strategy = build(case)
    except Skip as e:
        record.update(status="skipped", reason=str(e))
        return record
    except UsageError as e:
        record.update(status="error", reason=str(e))
        return record
    with tempfile.TemporaryDirectory(prefix="gradverify-case-") as scratch:
        res = verify(
            fn,
            strategy,
            max_examples=case.max_examples,
            seed=case.seed,
            order=case.order,
            report_dir=scratch,
            batched=case.batched,
            max_shrinking_seconds=case.max_shrinking_seconds,
        )
        record.update(
            status="passed" if res.ok else "failed",
            examples_run=res.examples_run,
            inconclusive=res.inconclusive,
            worst_ratio=res.worst_ratio,
            seconds=round(time.perf_counter() - t0, 3),
        )
        if not res.ok:
            record["failure"] = _failure(case, res)
    if report_dir is not None:
        materialize(record, report_dir)
    return record


def _failure(case: Case, res: Any) -> dict[str, Any]:

    err = res.result.errors[0]
    args = [np.asarray(_io.to_numpy(a)) for a in res.counterexample]
    npz = f"cases/{Path(res.saved).name}"  # relative to the report directory
    failure = {
        "kind": err.kind,
        "message": err.message,
        "pair": list(err.pair) if err.pair else None,
        "argument": err.argument,
        "input_index": list(err.input_index) if err.input_index is not None else None,
        "output_index": list(err.output_index) if err.output_index is not None else None,
        "values": dict(err.values),
        "error": err.error,
        "bound": err.bound,
        "counterexample": [{"name": f"arg{i}", **_io.exact(a)} for i, a in enumerate(args)],
        "literals": [literal(a) for a in res.counterexample],
        "kink_distance": kink_distance(case, args),
        "npz": npz,
        "script": npz[: -len(".npz")] + ".py",
        "report": str(dataclasses.replace(res, saved=npz)),
        "check": res.result.to_dict(),
        "shrink_cut": res.shrink_cut,
    }
    fn = build(case)[0] if case.op != "user" else _load(case.target, "target")
    failure.update(failure_views(fn, res, err))  # (the report's plots: see probe)
    return failure


def case_of(record: dict[str, Any]) -> Case:
    """The case a record was made from (records carry every field of their case)."""
    return Case(**{f.name: record.get(f.name, f.default) for f in dataclasses.fields(Case)})


def arrays_of(failure: dict[str, Any]) -> list[np.ndarray]:
    """A failure's counterexample, bit for bit, from its exact values (float.hex)."""
    out = []
    for a in failure["counterexample"]:
        values = [float.fromhex(h) for h in a["hex"]] if a.get("hex") else a["values"]
        dtype = np.dtype(a["dtype"])
        if np.issubdtype(dtype, np.complexfloating):  # (parts in turn: see _io.exact)
            out.append(np.array(values, dtype=np.empty(0, dtype).real.dtype).view(dtype).reshape(a["shape"]))
            continue
        out.append(np.array(values, dtype=dtype).reshape(a["shape"]))
    return out


def materialize(record: dict[str, Any], report_dir: str | Path) -> None:
    """Write a failed record's counterexample (.npz) and reproduce script (.py)
    under ``report_dir``, atomically; nothing for other records."""
    failure = record.get("failure")
    if not failure or not failure.get("npz"):
        return

    path = Path(report_dir) / failure["npz"]
    path.parent.mkdir(parents=True, exist_ok=True)
    _io.write_npz(path, arrays_of(failure))
    _write_script(case_of(record), path)


def kink_distance(case: Case, args: list[np.ndarray]) -> float | None:
    """How far x + b came to the activation's nearest kink (None: no kinks)."""
    if case.op != "bias_act":
        return None

    kinks = [k for k, _ in ops.activation(case.activation).kink_points()]
    return distance(args, kinks, lambda x, b=0.0: x.astype(np.float64) + np.asarray(b, dtype=np.float64))


def case_code(case: Case) -> str:
    """Python lines that rebuild the case's function as ``fn``."""
    if case.op == "user":
        module, _, name = case.target.partition(":")
        head, _, rest = name.partition(".")
        lines = (
            ["import sys", f"sys.path.insert(0, {case.path!r})  # where the sweep imported it from"]
            if case.path
            else []
        )
        lines.append(f"from {module} import {head} as fn")
        lines += [f"fn = fn.{part}" for part in rest.split(".") if part]
        return "\n".join(lines)
    if case.op == "example":
        bug = case.target == "example:seed-bug"
        return f"from gradverify._sweep.examples import BUILDERS\nfn = BUILDERS[{case.backend!r}]({bug})"
    if case.op == "bias_act":
        if case.backend == "numpy":
            return f"from gradverify import ops\nfn = ops.bias_act_rule({case.activation!r})"
        return (
            f"from gradverify import ops\nfn = lambda x, b: ops.bias_act({case.activation!r}, x, b, impl={case.impl!r})"
        )
    return (
        "from gradverify import strategies\n"
        f"fn = strategies.normalization_call({case.op!r}, {case.impl!r}, backend={case.backend!r})"
    )


_CONVERT = {
    "numpy": "arrays = [a for a in arrays]",
    "torch": "import torch\narrays = [torch.from_numpy(a) for a in arrays]",
    "jax": "import jax\njax.config.update('jax_enable_x64', True)\n"
    "import jax.numpy as jnp\narrays = [jnp.asarray(a) for a in arrays]",
}


def _write_script(case: Case, npz: Path) -> str:
    """A short script next to the .npz that reproduces the failure."""
    backend = case.backend if case.backend in _CONVERT else "numpy"
    lines = [
        f'"""Reproduce {case.id} (seed {case.seed}): python {npz.with_suffix(".py").name}"""',
        "from pathlib import Path",
        "",
        "import numpy as np",
        "",
        "import gradverify as gv",
        case_code(case),
        "",
        f"data = np.load(Path(__file__).with_name({npz.name!r}))",
        "arrays = [data[k] for k in sorted(data.files, key=lambda k: int(k[3:]))]",
        _CONVERT[backend],
        f"result = gv.check(fn, *arrays, seed={case.seed}, order={case.order}"
        + (", batched=True)" if case.batched else ")"),
        "print(result)",
        "raise SystemExit(0 if result.ok else 1)  # 1 while the failure persists",
        "",
    ]
    path = npz.with_suffix(".py")
    _io.atomic_write(path, "\n".join(lines))
    return str(path)


def summary(records: Sequence[dict[str, Any]]) -> dict[str, int]:
    counts = {k: 0 for k in ("passed", "failed", "skipped", "error")}
    for r in records:
        counts[r["status"]] += 1
    counts["inconclusive"] = sum(int(r.get("inconclusive") or 0) for r in records)
    counts["cases"] = len(records)
    return counts


def seconds(records: Sequence[dict[str, Any]]) -> float:
    return math.fsum(float(r.get("seconds") or 0.0) for r in records)
