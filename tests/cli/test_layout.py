"""The package layout: every folder that is a package is installed, and nothing outside it is imported.

pyproject.toml lists the packages by hand (the roots models/, streams/ and producers/ sit beside
stepwatch/ and are mapped into it by ``package-dir``, which setuptools' discovery does not follow);
a sub-package missing from the list would work in a checkout and be absent from the wheel.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_package_folder_is_in_pyprojects_packages_list():
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = set()
    for package, folder in setuptools["package-dir"].items():
        for init in (REPO / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO / folder)
            on_disk.add(".".join((package, *rel.parts)))
    assert on_disk == set(setuptools["packages"])
    # the scan itself works: the roots and the command package are there
    assert {"stepwatch", "stepwatch.commands", "stepwatch.models", "stepwatch.streams",
            "stepwatch.producers"} <= on_disk


def test_every_module_under_a_root_is_in_a_package():
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    orphans = [str(py.relative_to(REPO)) for folder in setuptools["package-dir"].values()
               for py in (REPO / folder).rglob("*.py") if not (py.parent / "__init__.py").is_file()]
    assert orphans == []
