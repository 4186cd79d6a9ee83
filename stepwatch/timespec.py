"""``--since`` and ``--until`` of every command: one parser for durations and times alike.

A runbook written during an incident says ``--since 30m``; a postmortem says ``--since
2026-11-30T21:30:00Z``. Both work in every command: a duration counts back from the command's
reference time (now for ``record``, the newest alert for ``report``), a time is taken as is.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from datetime import datetime, timezone

#: Units of a duration: 30s, 30m, 2h, 7d, 1w.
UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0, "w": 604_800.0}

#: A bare number at least this large is Unix seconds (2001-09-09); a smaller one is a duration in seconds.
#: No real duration is 31 years long, and no recording is older than 2001.
UNIX_FROM = 1e9

_DURATION = re.compile(r"(?P<n>\d+(?:\.\d*)?|\.\d+)\s*(?P<unit>[smhdw])")

EXAMPLES = "e.g. 30m, 2h, 7d, 1764540000 or 2026-11-30T21:30:00Z"


@dataclass(frozen=True, slots=True)
class When:
    """A point in time given either as ``seconds`` before a reference (``relative``) or as Unix seconds."""

    seconds: float
    relative: bool

    def at(self, reference: float) -> float:
        """Unix seconds: a duration counted back from ``reference``, a time as is."""
        return reference - self.seconds if self.relative else self.seconds


def parse_when(text: str) -> When:
    """``30m``, ``2h30m``, ``7d``, ``90`` (seconds), ``1764540000`` (Unix seconds) or ISO 8601 (UTC unless it says
    otherwise). Raises ``argparse.ArgumentTypeError`` (a ``ValueError``) with the accepted forms."""
    s = text.strip()
    try:
        number = float(s)
    except ValueError:
        number = None
    if number is not None:
        if number != number or number in (float("inf"), float("-inf")) or number < 0:
            raise argparse.ArgumentTypeError(f"not a time or duration: {text!r} ({EXAMPLES})")
        return When(number, relative=number < UNIX_FROM)
    compact = s.lower().replace(" ", "")
    parts = list(_DURATION.finditer(compact))
    if parts and "".join(p.group(0) for p in parts) == compact:
        return When(sum(float(p.group("n")) * UNITS[p.group("unit")] for p in parts), relative=True)
    try:
        when = datetime.fromisoformat(s.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a time or duration: {text!r} ({EXAMPLES})") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return When(when.timestamp(), relative=False)


HELP = ("a duration back from now (30m, 2h, 7d) or a time (Unix seconds, or ISO 8601, UTC unless it says "
        "otherwise)")
