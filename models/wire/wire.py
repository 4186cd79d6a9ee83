"""The wire format's common ground: its version, size limits, :class:`InvalidEvent`, and the field
checks every event kind is validated with (see docs/events.md)."""

from __future__ import annotations

import math
import sys
from typing import Any

WIRE_VERSION = 1
#: Longest duration accepted, seconds: a day. Longer values are clock or unit bugs.
MAX_DURATION = 86_400.0
#: Largest rank / step / sequence number accepted (beyond any real job, below float precision).
MAX_COUNTER = 2**53
MAX_NAME_LEN = 256
#: Messages larger than this are rejected before parsing.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
MAX_BATCH_EVENTS = 100_000


class InvalidEvent(ValueError):
    """An event that does not follow the wire format; ``str(exc)`` is the reason."""


# -- field checks -------------------------------------------------------------------------

_MAX_FLOAT = sys.float_info.max  # below it: finite


def _str(obj: dict, name: str, *, required: bool) -> str | None:
    value = obj.get(name)
    if type(value) is str and 0 < len(value) <= MAX_NAME_LEN:  # the common case first
        return value
    if value is None:
        if required:
            raise InvalidEvent(f"missing required field '{name}'")
        return None
    if not isinstance(value, str) or not value:
        raise InvalidEvent(f"'{name}' must be a non-empty string")
    if len(value) > MAX_NAME_LEN:
        raise InvalidEvent(f"'{name}' is longer than {MAX_NAME_LEN} characters")
    return value


def _int(obj: dict, name: str, *, required: bool) -> int | None:
    value = obj.get(name)
    if type(value) is int and 0 <= value <= MAX_COUNTER:  # the common case first
        return value
    if value is None:
        if required:
            raise InvalidEvent(f"missing required field '{name}'")
        return None
    # bool is an int subclass; a float like 3.0 is a sender bug worth accepting.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidEvent(f"'{name}' must be an integer")
    if isinstance(value, float):
        if not value.is_integer():
            raise InvalidEvent(f"'{name}' must be an integer")
        value = int(value)
    if value < 0 or value > MAX_COUNTER:
        raise InvalidEvent(f"'{name}' out of range: {value}")
    return value


def _num(obj: dict, name: str, *, required: bool, duration: bool = False) -> float | None:
    value = obj.get(name)
    if type(value) is float and 0.0 <= value <= (MAX_DURATION if duration else _MAX_FLOAT):  # the common case first
        return value
    if value is None:
        if required:
            raise InvalidEvent(f"missing required field '{name}'")
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidEvent(f"'{name}' must be a number")
    value = float(value)
    if not math.isfinite(value):
        raise InvalidEvent(f"'{name}' must be finite")
    if value < 0:
        raise InvalidEvent(f"'{name}' must not be negative")
    if duration and value > MAX_DURATION:
        raise InvalidEvent(f"'{name}' is absurd: {value} s")
    return value


def _phase(obj: dict, *, allowed: frozenset[str], required: bool, default: str | None) -> str | None:
    value = obj.get("phase")
    if value is None:
        if required:
            raise InvalidEvent("missing required field 'phase'")
        return default
    if type(value) is not str or value not in allowed:  # (a list or an object is no phase: not looked up, unhashable)
        raise InvalidEvent(f"unknown phase {value!r} (expected one of {sorted(allowed)})")
    return value


def _extra(obj: dict, known: frozenset[str]) -> dict[str, Any]:
    if len(obj) <= len(known) and obj.keys() <= known:
        return {}
    return {k: v for k, v in obj.items() if k not in known}
