"""Python source for written tests: imports that do not collide, values
written exactly, strategies built from a recorded argument tree.

Every value a written test holds is exact: a float64 is written by its
``repr`` (which round-trips), a float32 / float16 / bfloat16 by the float64
that holds it exactly; a leaf of more than ``INLINE`` elements is read back
from a copy of its recorded ``.npz``.
"""

from __future__ import annotations

import builtins
import dataclasses
import importlib
import keyword
import math
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import ArgumentValueError, explain

__all__ = ["INLINE", "WIDTH", "Call", "Item", "Source", "flat", "laid_out", "literal", "quoted", "snake", "test_lines"]

#: The line length written modules keep to.
WIDTH = 100


@dataclasses.dataclass
class Call:
    """``head`` args ``tail`` (a call, a list, a tuple), on one line where it
    fits, else one argument a line."""

    head: str
    args: list[Any]
    tail: str = ")"


@dataclasses.dataclass
class Item:
    """``prefix`` then a value: a keyword argument, a dict entry."""

    prefix: str
    value: Any


def flat(e: Any) -> str:
    if isinstance(e, Item):
        return e.prefix + flat(e.value)
    if isinstance(e, Call):
        parts = [flat(a) for a in e.args]
        one = "," if e.head.endswith("(") and e.head == "(" and len(parts) == 1 else ""
        return e.head + ", ".join(parts) + one + e.tail
    return str(e)


def laid_out(e: Any, indent: int = 0) -> str:
    """``e`` as source starting at column ``indent``, lines within WIDTH where they can be."""
    text = flat(e)
    if indent + len(text) <= WIDTH or not isinstance(e, (Call, Item)):
        return text
    if isinstance(e, Item):
        return e.prefix + laid_out(e.value, indent)
    pad = " " * (indent + 4)
    inner = ",\n".join(pad + laid_out(a, indent + 4) for a in e.args)
    return f"{e.head}\n{inner},\n{' ' * indent}{e.tail}"


def test_lines(test: str, body: list[str], arguments: list[str], x64: str | None) -> list[str]:
    """A written test: ``body``, then gv.verify through the fixture on
    ``arguments`` (one a line: the options are what a reader looks for) and
    its assertion; inside ``jax.enable_x64`` where ``x64`` (a comment, or "")
    is given."""
    call = ["result = gradverify.verify(", *[f"    {a}," for a in arguments], ")"]
    if x64 is not None:
        call = [f"with jax.enable_x64(True):{x64}", *["    " + c for c in call]]
    body = [*body, *call, "assert result.ok, result"]
    return [
        "@pytest.mark.gradverify(max_examples=MAX_EXAMPLES)",
        f"def {test}(gradverify):",
        *["    " + b for b in body],
    ]


def quoted(text: str) -> str:
    """A string literal in double quotes."""
    r = repr(text)
    if r.startswith("'") and '"' not in text:
        r = '"' + r[1:-1].replace("\\'", "'") + '"'
    return r


#: Elements above which a leaf is read from its .npz instead of written inline.
INLINE = 24

#: Public modules a function defined in a framework's private module is imported from, where they hold it.
PUBLIC = (
    "jax.numpy",
    "jax.lax",
    "jax.nn",
    "jax.numpy.linalg",
    "jax.scipy.special",
    "jax.scipy.linalg",
    "jax.numpy.fft",
    "torch",
    "torch.nn.functional",
    "torch.special",
    "torch.linalg",
    "torch.fft",
)


def snake(name: str) -> str:
    """``BiasSwish.apply`` -> ``bias_swish_apply``; a valid identifier."""
    s = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name.replace(".", "_"))
    s = re.sub(r"\W+", "_", s).strip("_").lower() or "fn"
    return f"fn_{s}" if s[0].isdigit() or keyword.iskeyword(s) else s


def literal(value: Any) -> Any:
    """A Python number or string (or a nested list of them) as exact source."""
    if isinstance(value, (list, tuple)):
        return Call("[", [literal(v) for v in value], "]")
    if isinstance(value, str):
        return quoted(value)
    if isinstance(value, (bool, np.bool_)):
        return repr(bool(value))
    if isinstance(value, (int, np.integer)):
        return repr(int(value))
    if isinstance(value, (complex, np.complexfloating)):
        return f"complex({literal(float(value.real))}, {literal(float(value.imag))})"
    v = float(value)
    if math.isnan(v):
        return "math.nan"
    if math.isinf(v):
        return "math.inf" if v > 0 else "-math.inf"
    return repr(v)


class Source:
    """The module being written: its imports, the names it has taken, the
    recorded points it copies beside itself."""

    def __init__(self, output: Path) -> None:
        self.output = output
        self.points = output.with_name(f"{output.stem}_points")
        self.imports: set[str] = set()
        self.taken: dict[str, str] = {}  # name -> what it names
        self.copied: dict[str, str] = {}  # original .npz -> its name in self.points
        self.uses_points = False
        self.uses_math = False
        self.refused: tuple[str, ...] = ()  # the exceptions that mean an input is outside fn's contract

    def refuse(self, names: Sequence[str]) -> None:
        """Have every test reject drawn inputs fn raises one of ``names`` at
        (gv.verify's ``except_``): builtin exception names, or dotted paths
        (``package.module.Error``) imported by the module."""
        exprs = []
        for name in names:
            module, _, attr = name.rpartition(".")
            try:
                owner = importlib.import_module(module) if module else builtins
                kind = getattr(owner, attr)
            except (ImportError, AttributeError, ValueError):
                kind = None
            if not (isinstance(kind, type) and issubclass(kind, Exception)):
                raise ArgumentValueError(
                    explain(
                        "write(except_)",
                        "exception types by name: a builtin (AssertionError) or a dotted path (package.module.Error)",
                        repr(name),
                        "e.g. --except AssertionError ValueError",
                    )
                )
            if module:
                self.imports.add(f"import {module}")
            exprs.append(name)
        self.refused = tuple(exprs)

    def verify_options(self) -> list[str]:
        """The options every written gv.verify call takes from the module."""
        return ["except_=REFUSED"] if self.refused else []

    def name(self, wanted: str, what: str) -> str:
        """``wanted``, or ``wanted_2``, ... where another thing holds it."""
        candidate, k = wanted, 1
        while self.taken.get(candidate, what) != what:
            k += 1
            candidate = f"{wanted}_{k}"
        self.taken[candidate] = what
        return candidate

    def function(self, path: str) -> str:
        """An expression for the function at ``module:qualname``, imported."""
        module, qualname = path.split(":", 1)
        module = _public(module, qualname)
        head, _, rest = qualname.partition(".")
        wanted = head if not hasattr(builtins, head) else f"{module.rsplit('.', 1)[-1]}_{head}"  # (lax.pow)
        local = self.name(wanted, f"{module}.{head}")
        self.imports.add(f"from {module} import {head}" + (f" as {local}" if local != head else ""))
        return local + (f".{rest}" if rest else "")

    def array(self, framework: str, value: np.ndarray, dtype: str, call: dict[str, Any], path: str) -> Call:
        """An array of ``framework`` holding ``value`` exactly."""
        if value.size > INLINE:
            self.uses_points = True
            name = self.copy(Path(call["directory"]) / call["point"])
            backend = "torch" if framework == "torch" else "jax"
            return Call("recorded(", [quoted(name), quoted(path or "()"), quoted(backend), quoted(dtype)])
        data = literal(value.tolist())
        self.uses_math |= "math." in flat(data)
        if framework == "torch":
            return Call("torch.tensor(", [data, f"dtype=torch.{dtype}"])
        return Call("jnp.asarray(", [data, f"dtype=jnp.{dtype}"])

    def copy(self, original: Path) -> str:
        key = str(original.resolve())
        if key not in self.copied:
            name = original.name
            if name in self.copied.values():
                name = f"{len(self.copied)}-{name}"
            self.copied[key] = name
        return self.copied[key]

    def save_points(self) -> None:
        """Copy the recorded points the module reads (replacing an earlier copy)."""
        if self.points.exists():
            shutil.rmtree(self.points)
        if not self.copied:
            return
        self.points.mkdir(parents=True)
        for original, name in self.copied.items():
            shutil.copyfile(original, self.points / name)


def _public(module: str, qualname: str) -> str:
    """The public module that holds the same object, for a function defined
    in a framework's private module (``jax._src.lax.lax`` -> ``jax.lax``)."""
    if not (module.startswith(("jax._src", "torch._", "torch.nn.functional")) and "." not in qualname):
        return module
    try:
        obj = getattr(importlib.import_module(module), qualname)
    except (ImportError, AttributeError):
        return module
    for public in PUBLIC:
        try:
            if getattr(importlib.import_module(public), qualname, None) is obj:
                return public
        except ImportError:
            continue
    return module
