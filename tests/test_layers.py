"""The package's shape, read from its folders and its imports (with ``ast``,
every import statement: in functions and under ``if TYPE_CHECKING:`` too).

A module's wing is its folder under ``gradverify/``; a top-level module is
either a face (public name: ``cli``, ``pytest_plugin``, ``__init__``),
``_verify``, or the vocabulary every wing shares. The wings stand in this
order, each importing only those below it and itself:

    base      the vocabulary (top-level private modules) and ``backends/``
    _check    one check, its stages and finite differences
    _verify   gv.verify over the check
    _sweep, _triage, _audit, _write   the tools, peers that never import each other
    faces     the command, the plugin, the public namespace

ARCHITECTURE.md draws the same picture."""

from __future__ import annotations

import ast
from pathlib import Path

import gradverify
from gradverify import ops, strategies

PACKAGE = Path(gradverify.__file__).parent
#: the companion packages, installed inside gradverify from their own folders
COMPANIONS = {"ops": Path(ops.__file__).parent, "strategies": Path(strategies.__file__).parent}
ORDER = ("base", "_check", "_verify", "companions", "tools", "faces")
TOOLS = ("_sweep", "_triage", "_audit", "_write")
MAX_TOP_LEVEL = 14
MAX_FILE_LINES, MAX_CLASS_LINES, MAX_FUNCTION_LINES = 600, 300, 120


def _modules(companions: bool = False) -> dict[str, Path]:
    out = {}
    roots = [("", PACKAGE)] + ([(k + ".", v) for k, v in COMPANIONS.items()] if companions else [])
    for prefix, root in roots:
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            name = prefix + ".".join(parts)
            out[name.removesuffix(".__init__").removesuffix(".") or "__init__"] = path
    return out


def wing(module: str) -> str:
    """The folder a module lives in ('' for the top level)."""
    head = module.split(".")[0]
    return head if "." in module or (PACKAGE / module).is_dir() or head in COMPANIONS else ""


def floor(module: str) -> str:
    w = wing(module)
    if w in COMPANIONS:
        return "companions"
    if w in TOOLS:
        return "tools"
    if w in ("_check", "_verify") or module == "_verify":
        return "_check" if w == "_check" else "_verify"
    if w == "backends":
        return "base"
    if not module.startswith("_") or module == "__init__":
        return "faces"
    return "base"


def _imports(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, str, ast.stmt]]:
    """(module imported, name imported, the statement) for every import of the
    package's own modules in ``name``."""
    package = name if path.name == "__init__.py" and name != "__init__" else name.rpartition(".")[0]
    if name == "__init__":
        package = ""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                target = ".".join([*base, *([node.module] if node.module else [])])
            elif (node.module or "").split(".")[0] == "gradverify":
                target = (node.module or "").removeprefix("gradverify").lstrip(".")
            else:
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}".lstrip(".")
                if sub in modules:
                    found.append((sub, "", node))
                else:
                    found.append((target or "__init__", alias.name, node))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "gradverify":
                    found.append((alias.name.removeprefix("gradverify").lstrip(".") or "__init__", "", node))
    return [(m, n, s) for m, n, s in found if m in modules and m != name]


def _graph() -> dict[str, set[str]]:
    modules = _modules(companions=True)
    return {name: {m for m, _, _ in _imports(name, path, modules)} for name, path in modules.items()}


def test_the_reader_sees_the_wings():
    graph = _graph()
    assert {"_check.pipeline", "_check.fd", "_sweep.cases", "_triage.rerun", "backends"} <= set(graph)
    assert "_check.pipeline" in graph["__init__"] and floor("_check.compare") == "_check"
    assert floor("cli") == "faces" and floor("_io") == "base" and floor("_triage.junit") == "tools"


def test_each_wing_imports_only_those_below_it():
    graph = _graph()
    wrong = {}
    for m, targets in graph.items():
        for t in targets:
            above = ORDER.index(floor(t)) > ORDER.index(floor(m))
            peers = floor(m) == floor(t) == "tools" and wing(m) != wing(t)
            if above or peers:
                wrong.setdefault(m, []).append(t)
    assert not wrong, f"imports of a wing above (or of a peer tool): {wrong}"


def test_there_is_no_import_cycle_type_checking_imports_included():
    graph = _graph()
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*path[path.index(n) :], n]))
            if n not in state:
                visit(n)
        path.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_no_private_name_is_imported_across_wings():
    """Across wings only plain names: a wing's module, or what a module lists
    in ``__all__``; the top-level private modules are the shared vocabulary,
    and the companions' own modules are private to them (their names are
    imported from the companion itself)."""
    modules = _modules(companions=True)
    wrong = []
    for name, path in modules.items():
        for target, imported, _ in _imports(name, path, modules):
            if wing(target) in ("", wing(name)):
                continue
            inner = target.split(".")[1:]
            if imported.startswith("_") or any(p.startswith("_") for p in inner):
                wrong.append(f"{name}: {target}.{imported}".rstrip("."))
    assert not wrong, wrong


def test_every_wing_module_declares_its_surface():
    missing = []
    for name, path in _modules().items():
        if wing(name) and path.name != "__init__.py" or name in ("_result", "_errors", "_io", "_rule", "_observe"):
            tree = ast.parse(path.read_text())
            assigned = {
                t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)
            }
            if "__all__" not in assigned:
                missing.append(name)
    assert not missing, f"modules without __all__: {missing}"


def test_imports_inside_functions_say_why():
    """An import of the package's own modules (the companions' included)
    inside a function is there for a heavy dependency, and says so in a
    comment on its line."""
    modules = _modules(companions=True)
    silent = []
    for name, path in modules.items():
        lines = path.read_text().splitlines()
        tree = ast.parse(path.read_text())
        nested = {
            n.lineno
            for f in ast.walk(tree)
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
            for n in ast.walk(f)
            if isinstance(n, (ast.Import, ast.ImportFrom))
        }
        for _, _, stmt in _imports(name, path, modules):
            if stmt.lineno in nested and "#" not in lines[stmt.lineno - 1]:
                silent.append(f"{name}:{stmt.lineno}")
    assert not silent, f"in-function imports without a reason: {sorted(set(silent))}"


def test_the_rooms_are_small():
    top = [n for n in _modules() if "." not in n and not (PACKAGE / n).is_dir()]
    assert len(top) <= MAX_TOP_LEVEL, top
    wings = {w for w in map(wing, _modules()) if w}
    roomy = [w for w in wings if sum(1 for n in _modules() if n.startswith(w + ".")) >= 3]
    assert len(roomy) >= 3, roomy
    big = []
    for name, path in _modules().items():
        text = path.read_text()
        if len(text.splitlines()) > MAX_FILE_LINES:
            big.append(f"{name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            limit = {ast.ClassDef: MAX_CLASS_LINES, ast.FunctionDef: MAX_FUNCTION_LINES}.get(type(node))
            if limit and node.end_lineno - node.lineno + 1 > limit:
                big.append(f"{name}.{node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert not big, big
