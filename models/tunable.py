"""Marking which settings may change while the worker runs, and the range each may take.

A settings dataclass of the core marks a field ``runtime(default, low=..., high=...)`` when the config
topic may change it on a running worker (``stepwatch config set``, stepwatch/runtime_config.py); a plain
field is read once, at start-up (it sizes buffers or names jobs). The mark lives on the field, so
adding a setting never means editing a second list.

Every runtime number states its own range: one that keeps the worker's memory and CPU bounded (a
window of 10^9 steps is a ring of 10^9 floats per rank; issue 44 finding 3) and its meaning sane (a
slowdown ratio of 1 or less flags every rank; a timeout of 0 fires at once). ``above=True`` makes the
low end exclusive; ``why`` says in a few words what an out-of-range value would do.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

_RUNTIME = "stepwatch_runtime"
_RANGE = "stepwatch_range"
_OWN_RANGE = "stepwatch_own_range"
#: The widest range a runtime number may take unless its field says otherwise: finite, not negative
#: (inf, NaN or a negative timeout would switch a detector off without a word; issue 27 finding 9).
DEFAULT_RANGE = (0.0, 1e9)
#: The longest time setting a runtime field takes (30 days), seconds.
MAX_SECONDS = 30 * 86400.0


@dataclasses.dataclass(frozen=True)
class Range:
    """A runtime field's allowed values: ``low`` (exclusive when ``above``) to ``high``, inclusive."""

    low: float
    high: float
    above: bool = False
    why: str = ""

    def __str__(self) -> str:
        return f"{'more than ' if self.above else ''}{_num(self.low)} to {_num(self.high)}"

    def holds(self, value: float) -> bool:
        return (self.low < value if self.above else self.low <= value) and value <= self.high


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def runtime(default: Any, *, low: float | None = None, high: float | None = None, above: bool = False,
            why: str = "") -> Any:
    """A dataclass field with ``default`` that the config topic may change while running, within
    ``[low, high]`` (``(low, high]`` when ``above``; numbers; always finite)."""
    own = low is not None or high is not None
    bounds = Range(DEFAULT_RANGE[0] if low is None else low, DEFAULT_RANGE[1] if high is None else high, above, why)
    return dataclasses.field(default=default, metadata={_RUNTIME: True, _RANGE: bounds, _OWN_RANGE: own})


def runtime_range(cls: type, name: str) -> Range:
    """Field ``name``'s range (the default range for a field that states none)."""
    field = next((f for f in dataclasses.fields(cls) if f.name == name), None)
    bounds = field.metadata.get(_RANGE) if field is not None else None
    return bounds if isinstance(bounds, Range) else Range(*DEFAULT_RANGE)


def has_own_range(cls: type, name: str) -> bool:
    """Whether field ``name`` states its own range (every runtime number should: tests/cli/test_runtime_config_bounds.py)."""
    field = next((f for f in dataclasses.fields(cls) if f.name == name), None)
    return bool(field is not None and field.metadata.get(_OWN_RANGE))


def check_runtime_value(cls: type, name: str, value: Any) -> None:
    """``ValueError`` (saying why) unless ``value`` is a finite number in field ``name``'s range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if not math.isfinite(value):
        raise ValueError(f"{name}={value!r}: expected a finite number")
    bounds = runtime_range(cls, name)
    if not bounds.holds(value):
        raise ValueError(f"{name}={value!r}: expected {bounds}" + (f" ({bounds.why})" if bounds.why else ""))


@functools.cache  # read for each new job's rules: a class's fields do not change
def runtime_fields(cls: type) -> tuple[str, ...]:
    """Names of ``cls``'s fields marked :func:`runtime`, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get(_RUNTIME))


@functools.cache
def startup_fields(cls: type) -> tuple[str, ...]:
    """Names of ``cls``'s fields that only the environment sets (not marked :func:`runtime`)."""
    return tuple(f.name for f in dataclasses.fields(cls) if not f.metadata.get(_RUNTIME))
