"""No silent skips: in CI a skip not on the allow-list fails the run (tests/conftest.py, tests/allowed_skips.py).

Runs pytest on a two-test file written here, with this suite's conftest loaded as a plugin, in one process and
in pytest-xdist workers (``scripts/test``'s ``STEPWATCH_TEST_WORKERS``): the controller sees every worker's skips.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from allowed_skips import ALLOWED_SKIPS, allowed

TESTS = Path(__file__).resolve().parents[1]

PROBE = """
import pytest

def test_runs():
    assert True

def test_skips():
    pytest.skip("no such device here")
"""


#: Broker tests (the ``kafka`` marker) beside pure ones: each notes the xdist worker it ran in.
GROUPED_PROBE = """
import os
import pytest

def _note(name):
    with open(os.path.join(os.environ["PROBE_NOTES"], name), "w") as f:
        f.write(os.environ.get("PYTEST_XDIST_WORKER", "main"))
""" + "".join(f"""
@pytest.mark.kafka
def test_broker_{i}():
    _note("broker-{i}")

def test_pure_{i}():
    _note("pure-{i}")
""" for i in range(6)) + """
@pytest.mark.kafka
def test_broker_skips():
    pytest.skip("no broker here")
"""

#: ``-n N`` for each way scripts/test runs the suite: one process, and xdist workers.
WORKERS = [[], ["-n", "2", "--dist", "loadgroup"]]


def run_probe(tmp_path: Path, *args: str, probe: str = PROBE, **env: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_probe.py").write_text(probe)
    environ = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_XDIST_WORKER")}
    environ.update(env, PYTHONPATH=os.pathsep.join([str(TESTS), environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider",
                           "-W", "ignore::pytest.PytestUnknownMarkWarning", "--rootdir", str(tmp_path), *args,
                           str(tmp_path / "test_probe.py")],
                          cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("workers", WORKERS, ids=lambda w: f"n{w[1] if w else 1}")
def test_a_skip_fails_the_run_in_ci_and_is_listed_with_its_reason(tmp_path, workers):
    """Invariant: however many processes run the suite, a skip not on the allow-list fails a CI run and is listed
    (on the controller, which sees every worker's reports)."""
    result = run_probe(tmp_path, *workers, CI="true")
    assert result.returncode == 1, result.stdout[-3000:]
    assert "test_probe.py::test_skips: no such device here [NOT ALLOWED IN CI]" in result.stdout
    assert "FAIL: 1 skipped test(s) not on the allow-list" in result.stdout


@pytest.mark.parametrize("workers", WORKERS, ids=lambda w: f"n{w[1] if w else 1}")
def test_outside_ci_a_skip_is_listed_but_passes(tmp_path, workers):
    result = run_probe(tmp_path, *workers)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "test_probe.py::test_skips: no such device here [would fail in CI]" in result.stdout


@pytest.mark.parametrize("workers", [*WORKERS, ["-n", "3", "--dist", "loadgroup"]], ids=lambda w: f"n{w[1] if w else 1}")
def test_broker_tests_run_in_one_worker_and_their_skips_are_listed_by_their_own_id(tmp_path, workers):
    """Invariant: under any worker count every test that needs the broker runs in one process (so one broker
    starts), and a grouped test's skip is listed (and matched against the allow-list) by its id without the
    ``@kafka`` that xdist's loadgroup appends."""
    notes = tmp_path / "notes"
    notes.mkdir()
    result = run_probe(tmp_path, *workers, probe=GROUPED_PROBE, CI="true", PROBE_NOTES=str(notes))
    assert result.returncode == 1, result.stdout[-3000:]
    assert "12 passed, 1 skipped" in result.stdout, result.stdout[-3000:]
    assert "test_probe.py::test_broker_skips: no broker here [NOT ALLOWED IN CI]" in result.stdout
    assert not re.search(r"SKIPPED \S*@", result.stdout), result.stdout[-3000:]
    noted = {p.name: p.read_text() for p in notes.iterdir()}
    assert len(noted) == 12, noted
    assert len({worker for name, worker in noted.items() if name.startswith("broker-")}) == 1, noted


def test_allow_list_matches_tests_files_and_parameters_and_gives_reasons():
    allow = {"tests/test_x.py::test_a": "reason a", "tests/test_y.py": "reason y"}
    assert allowed("tests/test_x.py::test_a", allow) == "reason a"
    assert allowed("tests/test_x.py::test_a[faust]", allow) == "reason a"
    assert allowed("tests/test_x.py::test_ab", allow) is None
    assert allowed("tests/test_y.py::test_b", allow) == "reason y"
    assert allowed("tests/test_z.py::test_a", allow) is None
    assert all(reason.strip() for reason in ALLOWED_SKIPS.values())  # every entry says why
