"""No silent skips: in CI a skip not on the allow-list fails the run (tests/conftest.py, tests/allowed_skips.py).

Runs pytest on a two-test file written here, with this suite's conftest loaded as a plugin.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from allowed_skips import ALLOWED_SKIPS, allowed

TESTS = Path(__file__).resolve().parents[1]

PROBE = """
import pytest

def test_runs():
    assert True

def test_skips():
    pytest.skip("no such device here")
"""


def run_probe(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_probe.py").write_text(PROBE)
    environ = {k: v for k, v in os.environ.items() if k != "CI"}
    environ.update(env, PYTHONPATH=os.pathsep.join([str(TESTS), environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), str(tmp_path / "test_probe.py")],
                          cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=120)


def test_a_skip_fails_the_run_in_ci_and_is_listed_with_its_reason(tmp_path):
    result = run_probe(tmp_path, CI="true")
    assert result.returncode == 1, result.stdout[-3000:]
    assert "test_probe.py::test_skips: no such device here [NOT ALLOWED IN CI]" in result.stdout
    assert "FAIL: 1 skipped test(s) not on the allow-list" in result.stdout


def test_outside_ci_a_skip_is_listed_but_passes(tmp_path):
    result = run_probe(tmp_path)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "test_probe.py::test_skips: no such device here [would fail in CI]" in result.stdout


def test_allow_list_matches_tests_files_and_parameters_and_gives_reasons():
    allow = {"tests/test_x.py::test_a": "reason a", "tests/test_y.py": "reason y"}
    assert allowed("tests/test_x.py::test_a", allow) == "reason a"
    assert allowed("tests/test_x.py::test_a[faust]", allow) == "reason a"
    assert allowed("tests/test_x.py::test_ab", allow) is None
    assert allowed("tests/test_y.py::test_b", allow) == "reason y"
    assert allowed("tests/test_z.py::test_a", allow) is None
    assert all(reason.strip() for reason in ALLOWED_SKIPS.values())  # every entry says why
