"""No silent swallowing (issue 25 item 7): a broad ``except`` (bare, ``Exception``, ``BaseException``) whose
body only passes, continues, breaks, returns or assigns a plain value (no call: nothing logged or counted)
must say why in a ``# silent: <why>`` comment on its lines. Every other broad handler logs or counts
(producers: the monitor's ``errors`` counter through ``_error``)."""

from __future__ import annotations

import ast
from pathlib import Path

from support import REPO

PACKAGES = ("models", "streams", "producers", "stepwatch")
BROAD = {"Exception", "BaseException"}
MARK = "# silent:"


def _broad(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(n, ast.Name) and n.id in BROAD or isinstance(n, ast.Attribute) and n.attr in BROAD
               for n in names)


def _quiet(stmt: ast.stmt) -> bool:
    """A statement that neither logs nor counts (no call anywhere in it)."""
    if isinstance(stmt, (ast.Pass, ast.Continue, ast.Break)):
        return True
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):  # ``...`` or a string
        return True
    if isinstance(stmt, (ast.Return, ast.Assign, ast.AnnAssign)):
        return not any(isinstance(n, (ast.Call, ast.Await, ast.Yield, ast.YieldFrom)) for n in ast.walk(stmt))
    return False


def silent_handlers(source: str) -> list[int]:
    """Line numbers of the broad handlers in ``source`` that swallow silently without a ``# silent:`` reason."""
    lines = source.splitlines()
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ExceptHandler) and _broad(node) and all(_quiet(s) for s in node.body):
            if not any(MARK in line for line in lines[node.lineno - 1:node.end_lineno]):
                out.append(node.lineno)
    return out


def test_the_scan_finds_a_silent_handler_and_accepts_a_reason():
    silent = "try:\n    f()\nexcept Exception:\n    pass\n"
    assert silent_handlers(silent) == [3]
    assert silent_handlers("try:\n    f()\nexcept:\n    x = None\n") == [3]
    assert silent_handlers("try:\n    f()\nexcept (ValueError, BaseException):\n    return\n") == [3]
    assert silent_handlers("try:\n    f()\nexcept Exception:\n    pass  # silent: a probe\n") == []
    assert silent_handlers("try:\n    f()\nexcept Exception:  # silent: a probe\n    return None\n") == []
    assert silent_handlers("try:\n    f()\nexcept Exception as exc:\n    log.warning('%r', exc)\n") == []
    assert silent_handlers("try:\n    f()\nexcept ValueError:\n    pass\n") == []  # narrow: fine


def test_no_broad_except_swallows_silently():
    found = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            for line in silent_handlers(path.read_text()):
                found.append(f"{path.relative_to(REPO)}:{line}")
    assert not found, ("broad except that neither logs nor counts; log it, count it, or say why not with "
                       f"'{MARK} <why>': " + ", ".join(found))


def test_the_packages_scanned_exist():
    assert all(Path(REPO / p).is_dir() for p in PACKAGES)
