"""No import cycles among stepwatch's modules (issue 40 item 4): models/, streams/, producers/ and stepwatch/.

The graph is read from the source (tests/import_graph.py): every import of one of stepwatch's own modules counts,
also one inside a function, since moving an import into a function hides a cycle without removing it.
"""

from __future__ import annotations

import random

import pytest

from import_graph import cycle_path, cycles, graph

#: Edges allowed to close a cycle, each with its reason (none: every cycle of issue 40 is gone; the test fails on
#: an exception that no longer closes one, so a stale entry cannot linger).
KNOWN: dict[tuple[str, str], str] = {}


@pytest.fixture(scope="module")
def edges() -> dict[str, set[str]]:
    return graph()


def _without_known(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    return {m: {d for d in deps if (m, d) not in KNOWN} for m, deps in edges.items()}


def test_no_import_cycle(edges):
    found = cycles(_without_known(edges))
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(cycle_path(edges, c)) for c in found)


def test_each_known_exception_still_closes_a_cycle(edges):
    """An exception whose edge is gone, or no longer part of a cycle, is stale: remove it from ``KNOWN``."""
    base = _without_known(edges)
    for (a, b), why in KNOWN.items():
        assert b in edges.get(a, ()), f"{a} -> {b} ({why}) is gone: remove it from KNOWN"
        with_it = {m: set(d) for m, d in base.items()}
        with_it[a].add(b)
        assert any(a in c and b in c for c in cycles(with_it)), f"{a} -> {b} ({why}) closes no cycle now: remove it"


def test_the_graph_sees_the_tree(edges):
    """The graph knows every package and reads imports of each kind (a relative one, an absolute one, one in a
    function): a broken reader would pass the cycle test on an empty graph."""
    assert {"stepwatch.cli", "stepwatch.models.engine", "stepwatch.streams.worker", "stepwatch.producers.agent"} <= set(edges)
    assert "stepwatch.models.registry" in edges["stepwatch.models.engine"]  # from .registry import ...
    assert "stepwatch.recording" in edges["stepwatch.commands.common"]  # inside a function
    assert sum(len(d) for d in edges.values()) > 500


def test_a_reverse_edge_is_a_cycle(edges):
    """Generated variants: for a sample of imports a -> b where b does not reach a, adding b -> a is reported."""
    rng = random.Random(40)
    pairs = sorted((a, b) for a, deps in _without_known(edges).items() for b in deps)
    for a, b in rng.sample(pairs, 25):
        planted = {m: set(d) for m, d in _without_known(edges).items()}
        planted[b].add(a)
        assert any(a in c and b in c for c in cycles(planted)), (a, b)


#: Imports of stepwatch's own modules inside a function of models/ (a hidden dependency): none but these.
LAZY_KNOWN: dict[tuple[str, str], str] = {}


def test_models_import_their_own_modules_at_load_time():
    """A function-level import is for an optional dependency (torch, pyarrow), not to hide a cycle."""
    import ast

    from import_graph import REPO, ROOTS, _resolve

    found = set()
    for path in sorted(ROOTS["stepwatch.models"].rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        name = "stepwatch." + rel[:-3].replace("/", ".").removesuffix(".__init__")
        for fn in ast.walk(ast.parse(path.read_text())):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("stepwatch")):
                        found.add((rel, _resolve(name, path.name == "__init__.py", node) if node.level else node.module))
    assert found == set(LAZY_KNOWN), sorted(found ^ set(LAZY_KNOWN))


def test_the_job_rule_engine_knows_no_telemetry_and_no_oncall(edges):
    """Issue 40 item 1: models/engine.py judges jobs; node telemetry and the outlet chain are composed around it
    (models/detection.py). Its own imports name neither package, nor the composition."""
    direct = edges["stepwatch.models.engine"]
    banned = ("stepwatch.models.telemetry", "stepwatch.models.oncall")
    assert not {m for m in direct if m.startswith(banned) or m in ("stepwatch.models.detection",
                                                                    "stepwatch.models.outlet",
                                                                    "stepwatch.models.jobs_view")}, direct
    assert "stepwatch.models.engine_output" in direct  # what leaves it: typed records and an observer protocol
    assert "stepwatch.models.engine" in edges["stepwatch.models.detection"]
