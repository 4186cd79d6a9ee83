"""The only tests that may skip in CI (``CI=true``), each with the reason it may.

In CI every other skipped test fails the run (tests/conftest.py: ``pytest_sessionfinish``),
so a missing package, browser or data set cannot quietly shrink the suite. Outside CI a skip
is allowed and listed in the summary (``scripts/test`` passes ``-rs``).

Keys are test node ids as pytest prints them (``tests/test_x.py::test_name``), a test without
its parameters (``tests/test_x.py::test_name`` covers ``test_name[a]``), or a whole file
(``tests/test_x.py``). Add an entry only with a reason a reviewer can check.
"""

from __future__ import annotations

#: node id -> why skipping it in CI is acceptable. Empty: in CI nothing may skip. CI installs the
#: ``test`` and ``train-test`` extras (torch, Lightning, transformers, pyarrow) and Debian's chromium
#: (scripts/test), and checks out ../shared/data beside the clone.
ALLOWED_SKIPS: dict[str, str] = {}


def allowed(nodeid: str, allow: dict[str, str] = ALLOWED_SKIPS) -> str | None:
    """The documented reason ``nodeid`` may skip in CI, or None."""
    for key, reason in allow.items():
        if nodeid == key or nodeid.startswith(key + "::") or nodeid.startswith(key + "["):
            return reason
    return None
