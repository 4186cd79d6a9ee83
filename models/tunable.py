"""Marking which settings may change while the worker runs.

A settings dataclass of the core marks a field ``runtime(default)`` when the config topic may
change it on a running worker (``stepwatch config set``, stepwatch/runtime_config.py); a plain
field is read once, at start-up (it sizes buffers or names jobs). The mark lives on the field, so
adding a setting never means editing a second list.
"""

from __future__ import annotations

import dataclasses
from typing import Any

_RUNTIME = "stepwatch_runtime"


def runtime(default: Any) -> Any:
    """A dataclass field with ``default`` that the config topic may change while running."""
    return dataclasses.field(default=default, metadata={_RUNTIME: True})


def runtime_fields(cls: type) -> tuple[str, ...]:
    """Names of ``cls``'s fields marked :func:`runtime`, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get(_RUNTIME))


def startup_fields(cls: type) -> tuple[str, ...]:
    """Names of ``cls``'s fields that only the environment sets (not marked :func:`runtime`)."""
    return tuple(f.name for f in dataclasses.fields(cls) if not f.metadata.get(_RUNTIME))
