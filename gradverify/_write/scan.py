"""Tests for a package without a recording: its custom gradient rules
(``torch.autograd.Function`` subclasses, ``jax.custom_jvp`` /
``jax.custom_vjp`` functions) and ``nn.Module`` classes, their arguments
drawn from the shapes and dtypes their jaxtyping annotations carry (read
with jaxtyping itself). Where the signature carries none, the test is
written with a marked place for the shapes, and fails until they are given.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import keyword
import pkgutil
import sys
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .module import Written, assemble, finish, header
from .recorded import docstring
from .records import Unwritten
from .source import Call, Source, laid_out, quoted, snake, test_lines

__all__ = ["DRAWN", "Rule", "rules_of", "scanned"]

DRAWN = [
    "Each test draws the arguments with the shapes and dtypes their jaxtyping",
    "annotations say (a dimension named in several arguments drawn once), and checks",
    "the derivatives with gv.verify, which shrinks a failure to a minimal input. A",
    "test whose signature does not say its shapes fails until they are given (TODO).",
]

#: Names a written strategy uses itself; a dimension of one of these names is renamed.
_RESERVED = {"draw", "st", "arrays", "pytest", "torch", "jax", "jnp", "np", "math", "shapes"}


@dataclasses.dataclass
class Rule:
    """A function of the package whose derivatives a test checks."""

    name: str  # how the test names it
    path: str  # module:qualname of what is imported
    call: str  # the expression that is checked, given the import
    framework: str  # torch or jax
    parameters: list[tuple[str, Any]]  # (name, annotation or inspect.Parameter.empty)
    kind: str
    needs_building: bool = False  # an nn.Module whose constructor takes arguments


def rules_of(package: str) -> tuple[list[Rule], list[Unwritten]]:
    """Every custom rule and module the package's modules define."""
    rules: list[Rule] = []
    unwritten: list[Unwritten] = []
    for module_name in _modules(package, unwritten):
        module = sys.modules[module_name]
        for attr, obj in sorted(vars(module).items()):
            rule = _rule(module_name, attr, obj)
            if rule is not None:
                rules.append(rule)
    return rules, unwritten


def _modules(package: str, unwritten: list[Unwritten]) -> list[str]:
    top = importlib.import_module(package)
    names = [package]
    for info in pkgutil.walk_packages(getattr(top, "__path__", []), prefix=f"{package}."):
        try:
            importlib.import_module(info.name)
        except Exception as e:  # noqa: BLE001 -- a module that does not import is said, not fatal
            unwritten.append(Unwritten(info.name, f"does not import: {type(e).__name__}: {e}", []))
            continue
        names.append(info.name)
    return names


def _rule(module: str, attr: str, obj: Any) -> Rule | None:
    torch = sys.modules.get("torch")
    jax = sys.modules.get("jax")
    if inspect.isclass(obj) and getattr(obj, "__module__", None) == module and torch is not None:
        if issubclass(obj, torch.autograd.Function) and obj is not torch.autograd.Function:
            forward = obj.forward
            params = list(inspect.signature(forward).parameters.values())
            own_context = obj.setup_context is not torch.autograd.Function.setup_context
            params = params if own_context else params[1:]  # (forward(ctx, ...) unless setup_context takes it)
            return Rule(
                f"{attr}.apply",
                f"{module}:{attr}",
                f"{attr}.apply",
                "torch",
                _annotated(forward, params),
                "autograd.Function",
            )
        if issubclass(obj, torch.nn.Module):
            params = list(inspect.signature(obj.forward).parameters.values())[1:]
            init = [
                p
                for p in list(inspect.signature(obj.__init__).parameters.values())[1:]
                if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            ]
            rule = Rule(attr, f"{module}:{attr}", attr, "torch", _annotated(obj.forward, params), "nn.Module")
            rule.needs_building = bool(init)
            return rule
    if jax is not None and isinstance(obj, (jax.custom_jvp, jax.custom_vjp)):
        fun = getattr(obj, "fun", None)
        if fun is None or getattr(fun, "__module__", module) != module:
            return None
        params = list(inspect.signature(fun).parameters.values())
        nondiff = set(getattr(obj, "nondiff_argnums", ()) or ())
        params = [p for k, p in enumerate(params) if k not in nondiff]
        kind = "custom_jvp" if isinstance(obj, jax.custom_jvp) else "custom_vjp"
        if nondiff:
            return Rule(attr, f"{module}:{attr}", attr, "jax", [(p.name, None) for p in params], kind)
        return Rule(attr, f"{module}:{attr}", attr, "jax", _annotated(fun, params), kind)
    return None


def _annotated(fn: Any, params: list[inspect.Parameter]) -> list[tuple[str, Any]]:
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # noqa: BLE001 -- an annotation that does not resolve: read as none
        hints = {}
    out = []
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.default is not inspect.Parameter.empty:
            continue  # (defaults are kept; *args cannot be drawn)
        out.append((p.name, hints.get(p.name)))
    return out


def scanned(package: str, output: Path, max_examples: int, except_: Sequence[str] = ()) -> Written:
    """Write the tests of ``package``'s rules to ``output`` (a :class:`Written`)."""
    rules, unwritten = rules_of(package)
    source = Source(output)
    source.refuse(except_)
    codes, tests, needs = [], [], []
    for rule in rules:
        code, complete = _test(rule, source)
        codes.append(code)
        tests.append(f"test_{snake(rule.name)}: {rule.name} ({rule.kind})")
        if not complete:
            needs.append(rule.name)
    top = header(f"the custom rules and modules of the package {package}", unwritten, DRAWN)
    finish(output, assemble(top, source, codes, max_examples), source)
    return Written(output, tests, unwritten, 0, needs)


def _test(rule: Rule, source: Source) -> tuple[str, bool]:
    """A test of one rule, and whether its shapes are all known."""
    test = source.name(f"test_{snake(rule.name)}", rule.path)
    stem = test.removeprefix("test_")
    head = source.function(rule.path)
    call = head + rule.call[len(rule.call.split(".")[0]) :]
    backend = rule.framework
    drawn = [_drawn(name, ann) for name, ann in rule.parameters]
    known = all(d is not None for d in drawn) and bool(drawn)
    said = ", ".join(f"{name}: {_said(ann)}" for name, ann in rule.parameters) or "no parameters"
    lines = [
        f"def {stem}_args():" if not known else "@st.composite",
        *([] if not known else [f"def {stem}_args(draw):"]),
    ]
    if known:
        lines.append(docstring(f"Arguments of {rule.name}, from its annotations ({said}).", 4))
        dims: dict[str, str] = {}
        for d in drawn:
            for name, kind in d[1]:
                dims.setdefault(name, kind)
        for name, kind in dims.items():
            if kind == "variadic":
                lines.append(f"    {name} = draw(st.lists(st.integers(1, 3), max_size=2).map(tuple))")
            else:
                lines.append(f"    {name} = draw(st.integers(1, 4))")
        leaves = [d[0].format(backend=quoted(backend)) for d in drawn]
        lines.append("    return " + laid_out(Call("(", [Call("draw(", [leaf]) for leaf in leaves]), 4))
    else:
        names = [name for name, _ in rule.parameters]
        lines += [
            docstring(f"Arguments of {rule.name}: its signature ({said}) does not say every shape and dtype.", 4),
            f"    # TODO(gradverify): the shapes of {', '.join(names) or 'its arguments'}, in order, "
            f"e.g. [{', '.join(['(3, 4)'] * max(len(names), 1))}]",
            "    shapes = None",
            "    if shapes is None:",
            f"        pytest.fail({quoted(f'give the shapes of the arguments of {rule.name} in {stem}_args()')})",
            f"    return st.tuples(*(arrays({quoted(backend)}, {quoted('float64')}, shape) for shape in shapes))",
        ]
    lines += ["", ""]
    body = [docstring(f"{rule.name} ({rule.kind} in {rule.path.split(':')[0]}) at drawn arguments.", 4).lstrip()]
    if rule.kind == "nn.Module":
        body += ["torch.manual_seed(0)  # (the module's initial weights)"]
        if rule.needs_building:
            body += [
                f"# TODO(gradverify): build {rule.name} as the package uses it",
                "module = None",
                "if module is None:",
                f"    pytest.fail({quoted(f'build the {rule.name} to check in {test}()')})",
            ]
        else:
            body += [f"module = {call}().to(torch.float64)"]
        call = "module"
    arguments = [call, f"{stem}_args()", *source.verify_options()]
    lines += test_lines(test, body, arguments, "" if backend == "jax" else None)
    return "\n".join(lines), known and not rule.needs_building


def _said(ann: Any) -> str:
    if ann is None or ann is inspect.Parameter.empty:
        return "not annotated"
    if _is_jaxtyping(ann):
        kind = getattr(ann.array_type, "__name__", str(ann.array_type)).rsplit(".", 1)[-1]
        return f'{_dtype_kind(ann)}[{kind}, "{ann.dim_str}"]'
    return getattr(ann, "__name__", str(ann))


def _is_jaxtyping(ann: Any) -> bool:
    try:
        import jaxtyping
    except ImportError:
        return False
    return inspect.isclass(ann) and issubclass(ann, jaxtyping.AbstractArray)


def _dtype_kind(ann: Any) -> str:
    return getattr(ann, "__name__", "Shaped").split("[")[0]


def _drawn(name: str, ann: Any) -> tuple[str, list[tuple[str, str]]] | None:
    """(the strategy of one argument, with ``{backend}`` to fill; the
    dimensions it names) from its annotation, or None where it says too little."""
    if ann is float:
        return "st.floats(-3.0, 3.0, allow_nan=False, allow_infinity=False, allow_subnormal=False)", []
    if not _is_jaxtyping(ann):
        return None
    dtype = next((d for d in ("float64", "float32") if d in ann.dtypes), None)
    if dtype is None:
        return None  # (integer, boolean or low-precision-only arrays: what values they take is the user's to say)
    parts: list[str] = []
    dims: list[tuple[str, str]] = []
    for dim in ann.dims:
        kind = type(dim).__name__
        if kind == "_FixedDim":
            parts.append(str(dim.size))
        elif kind in ("_NamedDim", "_NamedVariadicDim"):
            var = _identifier(dim.name)
            if var is None:
                return None
            variadic = kind == "_NamedVariadicDim"
            dims.append((var, "variadic" if variadic else "size"))
            parts.append(f"*{var}" if variadic else var)
        elif kind == "_SymbolicDim":
            expr = getattr(dim, "elem", None)
            if not isinstance(expr, str) or not _simple(expr):
                return None
            parts.append(expr)
        else:  # (anonymous dimensions "_", "...": no other argument shares them)
            return None
    shape = "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
    return "arrays({backend}, " + f"{quoted(dtype)}, {shape})", dims


def _identifier(name: str) -> str | None:
    if not name.isidentifier() or keyword.iskeyword(name):
        return None
    return f"{name}_" if name in _RESERVED else name


def _simple(expr: str) -> bool:
    """An arithmetic expression of names and integers (``n + 1``, ``2*n``)."""
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError:
        return False
    allowed = (ast.Expression, ast.BinOp, ast.Name, ast.Constant, ast.Load, ast.Add, ast.Sub, ast.Mult, ast.FloorDiv)
    return all(isinstance(n, allowed) for n in ast.walk(tree))
