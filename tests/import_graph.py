"""stepwatch's module import graph, from the source: which of its own modules each one imports.

Every import counts, in the module's body or inside a function: an import moved into a function to break a
cycle at load time still makes the two modules depend on each other (issue 40 item 4). Only one under
``if TYPE_CHECKING:`` is left out (it never runs). tests/models/test_import_cycles.py fails on a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: Package name -> its folder (pyproject.toml ``package-dir``).
ROOTS = {"stepwatch": REPO / "stepwatch", "stepwatch.models": REPO / "models", "stepwatch.streams": REPO / "streams",
         "stepwatch.producers": REPO / "producers"}


def modules() -> dict[str, Path]:
    """Module name -> file, of every module under ``ROOTS`` (a package is its ``__init__.py``)."""
    out: dict[str, Path] = {}
    for package, folder in ROOTS.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join((package, *parts))
            if package == "stepwatch" and parts and parts[0] in ("models", "streams", "producers"):
                continue  # (no such folders there; the sub-packages live at the repository root)
            out[name] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """Every import statement of ``tree`` but those under ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            for other in node.orelse:
                yield from _imports(other)
        else:
            yield from _imports(node)


def _resolve(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def graph() -> dict[str, set[str]]:
    """Module -> the stepwatch modules it imports (a ``from P import x`` of a submodule ``x``: P.x)."""
    mods = modules()
    out: dict[str, set[str]] = {}
    for name, path in mods.items():
        deps: set[str] = set()
        tree = ast.parse(path.read_text(), str(path))
        for node in _imports(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                target = _resolve(name, path.name == "__init__.py", node)
                targets = [f"{target}.{a.name}" if f"{target}.{a.name}" in mods else target for a in node.names]
            for target in targets:
                while target and target not in mods:  # ``import a.b.c``: the deepest module of ours it names
                    target = target.rpartition(".")[0]
                if target and target != name:
                    deps.add(target)
        out[name] = deps
    return out


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (each a cycle or several), sorted (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # iterative depth would be nicer; the graph is a few hundred modules deep at most
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(found)


def cycle_path(edges: dict[str, set[str]], component: list[str]) -> list[str]:
    """One cycle through the component's first module, for the failure message."""
    members = set(component)
    start = component[0]
    path, seen = [start], {start}
    while True:
        nxt = sorted(w for w in edges[path[-1]] if w in members)
        back = [w for w in nxt if w == start]
        if back and len(path) > 1:
            return path + [start]
        step = next((w for w in nxt if w not in seen), None)
        if step is None:
            return path + [nxt[0]] if nxt else path
        path.append(step)
        seen.add(step)
