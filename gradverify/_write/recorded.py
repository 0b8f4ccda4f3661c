"""A property-based test for each recorded function: its arguments drawn
with the recorded structure, dtypes and shapes over widened ranges, every
recorded point replayed first as an ``@example``, at the suite's order and
tolerances."""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import importlib
import inspect
import textwrap
from typing import Any

import numpy as np

from .records import Subject, Unwritten, constant_digest, point_leaf, range_key, widened
from .source import WIDTH, Call, Item, Source, flat, laid_out, literal, quoted, snake, test_lines

__all__ = ["Test", "written"]

#: gradcheck's defaults, which gradgradcheck shares.
TORCH_TOLERANCES = (1e-5, 1e-3)
REAL = ("float64", "float32", "float16", "bfloat16")
COMPLEX = ("complex128", "complex64")


@dataclasses.dataclass
class Test:
    name: str
    code: str
    subject: Subject
    examples: int


def written(subject: Subject, source: Source) -> Test | Unwritten:
    """The test of one subject, or why none can be written."""
    why = _why_not(subject)
    if why:
        return Unwritten(subject.name, why, subject.tests)
    test = source.name(f"test_{snake(subject.name)}", f"{subject.path} {subject.built!r} {id(subject)}")
    stem = test.removeprefix("test_")
    fn = source.function(subject.path)
    jax = subject.framework == "jax"
    ranges = subject.ranges()
    kinks = _activation_kinks(subject)
    branches = [_strategy(subject.framework, v, ranges, kinks, source) for v in subject.variants()]
    examples, missing = _examples(subject, source)
    options = _options(subject)
    lines = [
        f"def {stem}_args():",
        docstring(
            f"Arguments of {subject.name} as the suite passed them ({_shapes_said(subject)}), "
            "values over ranges widened from the recorded ones.",
            4,
        ),
    ]
    strategy = branches[0] if len(branches) == 1 else Call("st.one_of(", branches)
    lines.append("    return " + laid_out(strategy, 4))
    lines += ["", "", f"def {stem}_examples():", f'    """The {len(examples)} recorded point(s), exactly."""']
    if missing:
        lines.append(f"    # ({missing} recorded point(s) not saved are not replayed)")
    lines.append("    return [")
    lines += [f"        {laid_out(e, 8)}," for e in examples]
    lines += ["    ]", "", ""]
    tests_said = ", ".join(subject.tests[:3]) + (
        f" and {len(subject.tests) - 3} more" if len(subject.tests) > 3 else ""
    )
    body = [
        docstring(
            f"{subject.name}, as {tests_said} checked it at fixed points ({len(subject.calls)} recorded "
            "call(s)); here at drawn ones.",
            4,
        ).lstrip()
    ]
    if subject.kind == "nn.Module":
        fn = _built(subject, fn, body)
    arguments = [fn, f"{stem}_args()", f"examples={stem}_examples()", *[f"{k}={v}" for k, v in options.items()]]
    arguments += source.verify_options()
    x64 = "  # (the suite recorded 64-bit arguments)" if jax and _wide(subject) else None
    lines += test_lines(test, body, arguments, x64)
    return Test(test, "\n".join(lines), subject, len(examples))


def docstring(text: str, indent: int) -> str:
    """A docstring at ``indent``, wrapped to the written module's width."""
    pad = " " * indent
    quotes = '"' * 3
    lines = textwrap.wrap(text.replace(quotes, "'" * 3), width=WIDTH - indent - 6, break_on_hyphens=False)
    return pad + quotes + f"\n{pad}".join(lines) + quotes


def _why_not(subject: Subject) -> str | None:
    for call in subject.calls:
        for leaf in call["arguments"]:
            if leaf.get("differentiated") and leaf["kind"] == "array" and leaf["dtype"] not in REAL + COMPLEX:
                return f"argument {leaf['path']} is differentiated in {leaf['dtype']}, which no strategy draws"
    for call in subject.variants():
        for leaf in call["arguments"]:
            if leaf["kind"] == "array" and not leaf.get("differentiated") and point_leaf(call, leaf["path"]) is None:
                why = call.get("point_missing") or "its file is gone"
                return f"the constant argument {leaf['path']} was not saved ({why}), so it cannot be held"
    if subject.kind == "nn.Module":
        return _unbuildable(subject)
    if subject.kind == "nn.Module" and isinstance(subject.calls[0]["function"].get("dtype"), list):
        return f"the {subject.name}'s parameters mix dtypes"
    return None


def _unbuildable(subject: Subject) -> str | None:
    """Why the module cannot be built again from its extra_repr (None if it can):
    the text must read as literal arguments its class's constructor takes."""
    said = f"how the {subject.name} was built cannot be read back (extra_repr: {subject.built or 'empty'!r})"
    if subject.built and _arguments(subject.built) is None:
        return said
    try:
        module, qualname = subject.path.split(":", 1)
        cls = importlib.import_module(module)
        for part in qualname.split("."):
            cls = getattr(cls, part)
        call = ast.parse(f"f({subject.built or ''})", mode="eval").body
        args = [ast.literal_eval(a) for a in call.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
        inspect.signature(cls).bind(*args, **kwargs)
    except TypeError as e:
        return f"{said}: {e}"
    except Exception as e:  # noqa: BLE001 -- the class does not import here: said, not written
        return f"{subject.path} does not import: {type(e).__name__}: {e}"
    return None


def _arguments(built: str) -> str | None:
    """``built`` (an extra_repr) where it reads as the constructor's literal arguments."""
    try:
        tree = ast.parse(f"f({built})", mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(tree, ast.Call):
        return None
    try:
        for node in [*tree.args, *(k.value for k in tree.keywords)]:
            ast.literal_eval(node)
    except ValueError:
        return None
    return built


def _built(subject: Subject, cls: str, body: list[str]) -> str:
    recorded = subject.calls[0]["function"]
    dtype = recorded.get("dtype")
    to = f".to(torch.{dtype})" if dtype else ""
    to += ".eval()" if recorded.get("training") is False else ""  # (as the suite checked it)
    body += ["torch.manual_seed(0)  # (the module's initial weights)", f"module = {cls}({subject.built or ''}){to}"]
    return "module"


def _options(subject: Subject) -> dict[str, str]:
    """gv.verify's options for the suite's: its order, the widest of its
    tolerances (as a floor under gradverify's bound), which leaves are
    differentiated."""
    calls = subject.calls
    out: dict[str, str] = {}
    order = max(int(c["options"].get("order", 1)) for c in calls)
    if order != 1:
        out["order"] = str(order)
    if subject.framework == "torch":
        names = sorted({_wrt(leaf["path"]) for c in calls for leaf in c["arguments"] if leaf.get("differentiated")})
        out["wrt"] = "[" + ", ".join(quoted(n) for n in names) + "]"
        atol = max(float(c["options"].get("atol", TORCH_TOLERANCES[0])) for c in calls)
        rtol = max(float(c["options"].get("rtol", TORCH_TOLERANCES[1])) for c in calls)
        nondet = max(float(c["options"].get("nondet_tol", 0.0)) for c in calls)
        if nondet:
            out["nondet_tol"] = literal(nondet)
        if any(c["options"].get("check_batched_grad") for c in calls):
            out["batched"] = "True"
    else:
        atol, rtol = _jax_tolerances(calls)
    out["suite_tol"] = f"({literal(atol)}, {literal(rtol)})"
    return out


def _wrt(path: str) -> str:
    """A record's leaf path (``[0]['w']``) as gv.check names it (``arg0['w']``)."""
    head, _, rest = path[1:].partition("]")
    return f"arg{head}{rest}"


def _jax_tolerances(calls: list[dict[str, Any]]) -> tuple[float, float]:
    """check_grads's tolerance for the recorded calls: a number, a dict by
    dtype over jax's defaults, or the defaults; the widest over the calls'
    floating dtypes."""
    import jax.numpy as jnp
    from jax._src import public_test_util as ptu  # (jax's own defaults, by dtype)

    def resolve(tol: Any, dtype: np.dtype) -> float:
        if isinstance(tol, dict):
            tol = {np.dtype(getattr(jnp, _dtype_named(k))): v for k, v in tol.items() if _dtype_named(k)}
        merged = ptu._merge_tolerance(tol, ptu.default_gradient_tolerance)
        return float(ptu.tolerance(dtype, merged))

    atol = rtol = 0.0
    for call in calls:
        dtypes = {leaf["dtype"] for leaf in call["arguments"] if leaf.get("differentiated") and "dtype" in leaf}
        dtypes |= {"float64" if _wide(None, call) else "float32"} if not dtypes else set()
        for name in dtypes:
            d = np.dtype(getattr(jnp, name))
            atol = max(atol, resolve(call["options"].get("atol"), d))
            rtol = max(rtol, resolve(call["options"].get("rtol"), d))
    return atol, rtol


def _dtype_named(key: str) -> str | None:
    for name in ("bfloat16", "float16", "float32", "float64", "complex64", "complex128"):
        if name in key:
            return name
    return None


def _wide(subject: Subject | None, call: dict[str, Any] | None = None) -> bool:
    """Whether the calls hold 64-bit values (jax needs x64 for them)."""
    calls = [call] if call is not None else subject.calls if subject else []
    return any(leaf.get("dtype", "").endswith(("64", "128")) for c in calls for leaf in c["arguments"])


def _activation_kinks(subject: Subject) -> tuple[float, ...]:
    """The kinks of the bundled activation table's function of the same name,
    where the subject is that function of torch.nn.functional or jax.nn."""
    module, qualname = subject.path.split(":", 1)
    if not module.startswith(("torch.nn.functional", "jax.nn", "jax._src.nn", "gradverify.ops")):
        return ()
    from gradverify.ops import ACTIVATIONS  # (the activation table: only for a function of a framework's nn)

    for act in ACTIVATIONS:
        if qualname in (act.name, act.torch, act.jax):
            return tuple(sorted(float(k) for k, _ in act.kink_points()))
    return ()


def _strategy(
    framework: str,
    call: dict[str, Any],
    ranges: dict[tuple[str, str], tuple[float, float]],
    kinks: tuple[float, ...],
    source: Source,
) -> str:
    """The strategy of one recorded layout: the argument tree with a
    strategy at each leaf."""
    leaves = iter(call["arguments"])
    backend = "torch" if framework == "torch" else "jax"
    alone = sum(bool(leaf.get("differentiated")) for leaf in call["arguments"]) == 1

    def leaf_strategy(leaf: dict[str, Any]) -> Any:
        if leaf["kind"] == "none":
            return "st.none()"
        if not leaf.get("differentiated"):
            return Call("st.just(", [_value(framework, call, leaf, source)])
        lo, hi = widened(*ranges.get(range_key(leaf), (0.0, 0.0)))
        finite = ["allow_nan=False", "allow_infinity=False"]
        if leaf["kind"] == "scalar":
            # (jax takes a Python number where check_grads did; gv.check takes arrays: a 0-d one)
            to_array = ".map(jnp.asarray)" if framework == "jax" else ""
            if isinstance(leaf.get("value"), list):
                return Call("st.complex_numbers(", [f"max_magnitude={literal(max(-lo, hi))}", *finite], ")" + to_array)
            if framework != "jax":
                return Call("st.floats(", [literal(lo), literal(hi), *finite, "allow_subnormal=False"], ")")
            # (a number jax takes is float32 unless x64 is on: none subnormal there either)
            lo32, hi32 = _float32_outward(lo, hi)
            return Call(
                "st.floats(",
                [literal(lo32), literal(hi32), *finite, "allow_subnormal=False", "width=32"],
                ")" + to_array,
            )
        head = [quoted(backend), quoted(leaf["dtype"]), repr(tuple(leaf["shape"]))]
        if leaf["dtype"] in COMPLEX:
            return Call("complex_arrays(", [*head, f"max_magnitude={literal(max(-lo, hi))}"])
        extra = [f"kinks={kinks!r}"] if kinks and alone else []
        return Call("arrays(", [*head, f"min_value={literal(lo)}", f"max_value={literal(hi)}", *extra])

    return _tree(call["skeleton"], leaves, leaf_strategy, strategy=True, source=source)


def _examples(subject: Subject, source: Source) -> tuple[list[str], int]:
    """Each distinct recorded point as source, and how many had no point saved."""
    out, seen, missing = [], set(), 0
    for call in subject.calls:
        arrays_ = [a for a in call["arguments"] if a["kind"] == "array"]
        if any(point_leaf(call, a["path"]) is None for a in arrays_):
            missing += 1
            continue
        key = hashlib.sha256(
            repr([(a["path"], a.get("value"), constant_digest(call, a)) for a in call["arguments"]]).encode()
        ).hexdigest()
        if key in seen:
            continue
        seen.add(key)
        leaves = iter(call["arguments"])
        out.append(
            _tree(
                call["skeleton"],
                leaves,
                lambda leaf, c=call: _value(subject.framework, c, leaf, source),
                strategy=False,
                source=source,
            )
        )
    return out, missing


def _value(framework: str, call: dict[str, Any], leaf: dict[str, Any], source: Source) -> Any:
    if leaf["kind"] == "none":
        return "None"
    if leaf["kind"] == "scalar":
        value = leaf["value"]
        text = literal(complex(*value)) if isinstance(value, list) else literal(value)
        source.uses_math |= "math." in flat(text)
        if framework == "jax" and leaf.get("differentiated"):
            return Call("jnp.asarray(", [text])
        return text
    array = point_leaf(call, leaf["path"])
    if array is None:
        raise LookupError(f"the recorded point of {call.get('nodeid')} has no leaf {leaf['path']}")
    return source.array(framework, array, leaf["dtype"], call, leaf["path"])


def _tree(node: list[Any], leaves: Any, at_leaf: Any, *, strategy: bool, source: Source) -> Any:
    """The argument tree as source: strategies combined (``strategy``) or values."""

    def walk(n: list[Any]) -> Any:
        kind = n[0]
        if kind == "leaf":
            return at_leaf(next(leaves))
        if kind == "none":
            return "st.none()" if strategy else "None"
        if kind in ("tuple", "list"):
            parts = [walk(c) for c in n[1]]
            if strategy:
                return Call("st.tuples(", parts, ")" + (".map(list)" if kind == "list" else ""))
            return Call("[", parts, "]") if kind == "list" else Call("(", parts, ")")
        if kind == "dict":
            body = Call("{", [Item(f"{_key(k)}: ", walk(c)) for k, c in zip(n[1], n[2])], "}")
            return Call("st.fixed_dictionaries(", [body]) if strategy else body
        if kind == "namedtuple":
            cls = source.function(n[1])
            parts = [walk(c) for c in n[3]]
            return Call(f"st.builds({cls}, " if strategy else f"{cls}(", parts)
        raise ValueError(f"a {kind} node cannot be written")

    return walk(node)


def _key(k: Any) -> str:
    return quoted(k) if isinstance(k, str) else repr(k)


def _shapes_said(subject: Subject) -> str:
    shapes = []
    for call in subject.variants():
        s = ", ".join(str(tuple(a["shape"])) for a in call["arguments"] if a.get("differentiated") and "shape" in a)
        if s not in shapes:
            shapes.append(s)
    if len(shapes) == 1:
        return f"the recorded shape(s) {shapes[0]}" if shapes[0] else "the recorded structure"
    return f"{len(shapes)} recorded layouts"


def _float32_outward(lo: float, hi: float) -> tuple[float, float]:
    """The float32 range that holds [lo, hi] (Hypothesis's width=32 takes
    bounds a float32 represents exactly)."""
    a, b = np.float32(lo), np.float32(hi)
    if float(a) > lo:
        a = np.nextafter(a, np.float32(-np.inf))
    if float(b) < hi:
        b = np.nextafter(b, np.float32(np.inf))
    return float(a), float(b)
