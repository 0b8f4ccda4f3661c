"""The written module: its header, imports in isort's order, the helper
that reads large recorded points, and the file written whole or not at all."""

from __future__ import annotations

import dataclasses
import os
import re
import tempfile
from pathlib import Path

from .records import Unwritten
from .source import Source

#: The line length isort (and ruff's isort rule) wraps imports at by default.
IMPORT_WIDTH = 88

__all__ = ["RECORDED", "Written", "assemble", "finish", "header"]


@dataclasses.dataclass
class Written:
    """What ``write`` wrote: the module, a line for each test, what it could not write."""

    output: Path
    tests: list[str]
    unwritten: list[Unwritten]
    calls: int
    needs_shapes: list[str] = dataclasses.field(default_factory=list)

    def summary(self) -> str:
        source = f" from {self.calls} recorded call(s)" if self.calls else ""
        lines = [f"wrote {self.output}: {len(self.tests)} test(s){source}"]
        lines += [f"  {t}" for t in self.tests]
        if self.needs_shapes:
            lines.append(f"{len(self.needs_shapes)} test(s) fail until given what their signatures do not say (TODO):")
            lines += [f"  {name}" for name in self.needs_shapes]
        if self.unwritten:
            lines.append(f"not written ({len(self.unwritten)}):")
            lines += [f"  {u.name}: {u.why}" for u in self.unwritten]
        return "\n".join(lines)


def assemble(header: str, source: Source, codes: list[str], max_examples: int) -> str:
    imports = {"import pytest", "from hypothesis import strategies as st"}
    body = "\n\n\n".join(codes)
    for needed, line in (
        ("torch.", "import torch"),
        ("jnp.", "import jax.numpy as jnp"),
        ("jax.enable_x64", "import jax"),
    ):
        if needed in body:
            imports.add(line)
    strategies = {name for name in ("arrays", "complex_arrays") if re.search(rf"\b{name}\(", body)}
    if source.uses_points:
        strategies.add("to_backend")
        imports |= {"from pathlib import Path", "import numpy as np"}
    if strategies:
        imports.add(f"from gradverify.strategies import {', '.join(sorted(strategies))}")
    if source.uses_math:
        imports.add("import math")
    helpers = ""
    if source.uses_points:
        helpers = (
            f"POINTS = Path(__file__).with_name({source.points.name!r})\n\n\n"
            "def recorded(file, leaf, backend, dtype):\n"
            '    """A leaf of a recorded point, exactly as recorded."""\n'
            "    with np.load(POINTS / file) as saved:\n"
            "        return to_backend(saved[leaf], backend, dtype)\n\n\n"
        )
    imports |= source.imports
    return (
        header
        + "\n"
        + _sorted_imports(imports)
        + f"\nMAX_EXAMPLES = {int(max_examples)}  # drawn inputs per test (recorded points run first)\n"
        + (
            "# fn raises these at inputs outside its contract: drawn inputs it raises them at are rejected\n"
            f"REFUSED = ({', '.join(source.refused)}{',' if len(source.refused) == 1 else ''})\n"
            if source.refused
            else ""
        )
        + "\n\n"
        + helpers
        + body
        + "\n"
    )


def finish(output: Path, module: str, source: Source) -> None:
    """Write the module whole or not at all, with the points it reads."""
    output.parent.mkdir(parents=True, exist_ok=True)
    source.save_points()
    fd, tmp = tempfile.mkstemp(dir=output.parent, prefix=f".{output.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(module)
        os.replace(tmp, output)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


RECORDED = [
    "Each test draws the arguments with the recorded structure, dtypes and shapes,",
    "and values over ranges widened from the recorded ones (signs and zeros the",
    "recorded points never had), and checks the derivatives with gv.verify, which",
    "shrinks a failure to a minimal input; every recorded point runs first, as an",
    "@example.",
]


def header(what: str, unwritten: list[Unwritten], how: list[str] = RECORDED) -> str:
    lines = ["Property-based gradient tests, written by ``gradverify write``", f"from {what}.", "", *how]
    if unwritten:
        lines += ["", "Not written:"]
        for u in unwritten:
            lines.append(f"  - {u.name}: {u.why}")
            lines += [f"      (in {t})" for t in u.tests[:3]]
            if len(u.tests) > 3:
                lines.append(f"      (and {len(u.tests) - 3} more tests)")
    text = "\n".join(lines).replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    return f'"""{text}\n"""\n'


def _sorted_imports(imports: set[str]) -> str:
    """Standard library, third party, then the project's, as isort orders them."""
    stdlib = {"math", "pathlib"}

    def module(line: str) -> str:
        return line.split()[1]

    def first(line: str) -> tuple[int, str, str]:
        """A statement's first imported name, as isort orders statements of one module by it."""
        return _by_type(line.partition(" import ")[2].split(",")[0]) if line.startswith("from ") else (0, "", "")

    def group(line: str) -> int:
        top = module(line).split(".")[0]
        if top in stdlib:
            return 0
        if top in {"pytest", "hypothesis", "numpy", "torch", "jax", "gradverify"}:
            return 1
        return 2

    merged: dict[str, set[str]] = {}
    for line in [i for i in imports if i.startswith("from ")]:
        imports.discard(line)
        module_, _, names = line[5:].partition(" import ")
        for name in (n.strip() for n in names.split(",")):
            if " as " in name:  # (an alias stands in a statement of its own, as isort writes it)
                imports.add(f"from {module_} import {name}")
            else:
                merged.setdefault(module_, set()).add(name)
    imports |= {f"from {m} import {', '.join(sorted(n, key=_by_type))}" for m, n in merged.items()}
    out = []
    for g in range(3):
        chosen = sorted(
            (i for i in imports if group(i) == g), key=lambda i: (i.startswith("from "), module(i), first(i))
        )
        if chosen:
            out.append("\n".join(_wrapped(i) for i in chosen))
    return "\n\n".join(out) + "\n"


def _wrapped(line: str) -> str:
    """An import longer than isort's default line (88) split one name a line."""
    if len(line) <= IMPORT_WIDTH or not line.startswith("from "):
        return line
    head, _, names = line.partition(" import ")
    return f"{head} import (\n" + "".join(f"    {n},\n" for n in names.split(", ")) + ")"


def _by_type(name: str) -> tuple[int, str, str]:
    """isort's order of imported names: constants, classes, then the rest."""
    local = name.split(" as ")[0]
    kind = 0 if local.isupper() and len(local) > 1 else 1 if local[:1].isupper() else 2
    return kind, local.lower(), local
