"""Marking which settings may change while the worker runs.

A settings dataclass of the core marks a field ``runtime(default)`` when the config topic may
change it on a running worker (``stepwatch config set``, stepwatch/runtime_config.py); a plain
field is read once, at start-up (it sizes buffers or names jobs). The mark lives on the field, so
adding a setting never means editing a second list.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

_RUNTIME = "stepwatch_runtime"
_RANGE = "stepwatch_range"
#: The widest range a runtime number may take unless its field says otherwise: finite, not negative
#: (inf, NaN or a negative timeout would switch a detector off without a word; issue 27 finding 9).
DEFAULT_RANGE = (0.0, 1e9)


def runtime(default: Any, *, low: float = DEFAULT_RANGE[0], high: float = DEFAULT_RANGE[1]) -> Any:
    """A dataclass field with ``default`` that the config topic may change while running, within
    ``[low, high]`` (numbers; always finite)."""
    return dataclasses.field(default=default, metadata={_RUNTIME: True, _RANGE: (low, high)})


def check_runtime_value(cls: type, name: str, value: Any) -> None:
    """``ValueError`` (saying why) unless ``value`` is a finite number in field ``name``'s range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    field = next((f for f in dataclasses.fields(cls) if f.name == name), None)
    low, high = field.metadata.get(_RANGE, DEFAULT_RANGE) if field is not None else DEFAULT_RANGE
    if not math.isfinite(value):
        raise ValueError(f"{name}={value!r}: expected a finite number")
    if not low <= value <= high:
        raise ValueError(f"{name}={value!r}: expected {low:g} to {high:g}")


def runtime_fields(cls: type) -> tuple[str, ...]:
    """Names of ``cls``'s fields marked :func:`runtime`, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get(_RUNTIME))


def startup_fields(cls: type) -> tuple[str, ...]:
    """Names of ``cls``'s fields that only the environment sets (not marked :func:`runtime`)."""
    return tuple(f.name for f in dataclasses.fields(cls) if not f.metadata.get(_RUNTIME))
