"""The runnable examples in the detection core's docstrings (River's style) run, so they cannot rot.

Every module of ``stepwatch.models`` (its sub-packages too) is run through ``doctest``; the public
detector classes must each carry an example.
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import pkgutil

import pytest

import stepwatch.models

MODULES = sorted(info.name for info in pkgutil.walk_packages(stepwatch.models.__path__, "stepwatch.models."))
#: The rules an operator tunes: each shows in its docstring what it consumes and what it emits.
WITH_EXAMPLES = {"StragglerDetector", "LongStragglerDetector", "HangDetector", "CommSlowdownDetector",
                 "ImbalanceDetector", "ThroughputDetector", "CheckpointDetector"}


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"


def test_the_public_detectors_carry_an_example():
    found = {}
    for name in MODULES:
        for cls_name, cls in inspect.getmembers(importlib.import_module(name), inspect.isclass):
            if cls.__module__ == name and cls_name in WITH_EXAMPLES:
                found[cls_name] = sum(len(t.examples) for t in doctest.DocTestFinder(recurse=False).find(cls))
    assert found.keys() == WITH_EXAMPLES, WITH_EXAMPLES - found.keys()
    assert all(found.values()), {cls: n for cls, n in found.items() if not n}
