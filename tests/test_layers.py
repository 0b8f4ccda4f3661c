"""The package's layers, read from its imports (with ``ast``, every import
statement, in functions too, except those under ``if TYPE_CHECKING:``): the
core - one check and gv.verify - never imports a tool (reports, sweeps,
triage, the command, the plugin), and no module imports itself back
through others. ARCHITECTURE.md describes the same layers."""

from __future__ import annotations

import ast
from pathlib import Path

import gradverify

PACKAGE = Path(gradverify.__file__).parent
TOOLS = {
    "_distribute",
    "_examples",
    "_reports",
    "_reports_triage",
    "_sweep",
    "_triage_junit",
    "_triage_node",
    "_triage_rerun",
    "cli",
    "pytest_plugin",
}
FACADE = {"__init__"}  # the public namespace re-exports both layers


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        out[".".join(parts).removesuffix(".__init__") or "__init__"] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` imports at run time."""
    package = name.rsplit(".", 1)[0] if "." in name and path.name != "__init__.py" else ""
    if path.name == "__init__.py" and name != "__init__":
        package = name
    tree = ast.parse(path.read_text())
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for child in node.body for n in ast.walk(child)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                target = ".".join([*base, *([node.module] if node.module else [])])
            elif (node.module or "").startswith("gradverify"):
                target = (node.module or "").removeprefix("gradverify").lstrip(".")
            else:
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}".lstrip(".")
                found.add(sub if sub in modules else (target or "__init__"))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "gradverify" or alias.name.startswith("gradverify."):
                    found.add(alias.name.removeprefix("gradverify").lstrip(".") or "__init__")
    return {m for m in found if m in modules and m != name}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def test_every_module_is_core_or_a_tool():
    graph = _graph()
    assert TOOLS <= set(graph), sorted(TOOLS - set(graph))
    assert "_check" in graph and "backends" in graph and "_triage_rerun" in graph["__init__"]  # (the reader works)


def test_the_core_never_imports_a_tool():
    graph = _graph()
    core = set(graph) - TOOLS - FACADE
    wrong = {m: sorted(graph[m] & (TOOLS | FACADE)) for m in sorted(core) if graph[m] & (TOOLS | FACADE)}
    assert not wrong, f"core modules importing tools: {wrong}"


def test_there_is_no_import_cycle():
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
