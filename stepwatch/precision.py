"""Precision per rule: how many of an alert type's alerts were right, by settings version (``stepwatch report``).

Per alert type, and per settings version within it: ``alerts``, ``with_feedback`` (a verdict, a person's or
automatic), ``confirmed``, ``false``, ``duplicate``, ``transient`` (automatic, shown apart, never false),
``precision`` = confirmed / (confirmed + false) with its Wilson score interval (95 %), and the median time to
detect. A person's verdict beats an automatic one (stepwatch/feedback.py ``latest``).

The settings version: alerts do not carry one (the record stays as it is, so replay stays byte-identical);
the config topic does: each runtime change (``stepwatch config set``) has its ``updated_at``. An alert's
version is the latest change at or before its start (``config@<time>``, UTC), ``before <first change>`` when
older than every change the compacted topic still holds, ``-`` when no change is known (a file read alone).

>>> round(wilson(9, 10)[0], 3), round(wilson(9, 10)[1], 3)
(0.596, 0.982)
>>> wilson(0, 0)
(None, None)
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from stepwatch.models.wire.feedback import Feedback, Verdict

#: z of a two-sided 95 % interval.
Z95 = 1.959963984540054
#: No settings change known: the version is unknown, not "the defaults".
UNKNOWN_VERSION = "-"


def wilson(successes: int, trials: int, z: float = Z95) -> tuple[float | None, float | None]:
    """The Wilson score interval of ``successes`` in ``trials`` (None, None without trials)."""
    if trials <= 0:
        return None, None
    p = successes / trials
    denom = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    # At 0 or all successes the bound is exactly the edge (rounding would leave a hair off it).
    low = 0.0 if successes <= 0 else max(0.0, centre - half)
    high = 1.0 if successes >= trials else min(1.0, centre + half)
    return low, high


@dataclass(frozen=True, slots=True)
class Judged:
    """One alert as the precision table sees it."""

    id: str
    type: str
    starts_at: float
    onset: float | None = None


class Versions:
    """Which settings version was in force at a time, from the config changes' times."""

    def __init__(self, changes: Iterable[float] = ()) -> None:
        self.changes = sorted({float(c) for c in changes})

    def at(self, ts: float) -> str:
        if not self.changes:
            return UNKNOWN_VERSION
        k = bisect.bisect_right(self.changes, ts)
        if k == 0:
            return f"before {_iso(self.changes[0])}"
        return f"config@{_iso(self.changes[k - 1])}"


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%dT%H:%MZ")


def _row(group: Sequence[Judged], verdicts: Mapping[str, Feedback]) -> dict[str, Any]:
    said = [verdicts[a.id] for a in group if a.id in verdicts]
    count = {v: sum(1 for f in said if f.verdict is v) for v in Verdict}
    confirmed, false = count[Verdict.CONFIRMED], count[Verdict.FALSE]
    low, high = wilson(confirmed, confirmed + false)
    detect = [a.starts_at - a.onset for a in group if a.onset is not None]
    return {"alerts": len(group), "with_feedback": len(said), "confirmed": confirmed, "false": false,
            "duplicate": count[Verdict.DUPLICATE], "transient": count[Verdict.TRANSIENT],
            "automatic": sum(1 for f in said if f.automatic),
            "precision": round(confirmed / (confirmed + false), 4) if confirmed + false else None,
            "interval": [round(low, 4), round(high, 4)] if low is not None else None,
            "median_detect_seconds": round(statistics.median(detect), 3) if detect else None}


def precision_table(alerts: Iterable[Judged], verdicts: Mapping[str, Feedback],
                    versions: Versions | None = None) -> dict[str, dict[str, Any]]:
    """Type -> its row (``alerts``, ``confirmed``, ``false``, ``precision``, ...) with ``versions``: settings
    version -> the same row for that version's alerts. ``verdicts``: alert id -> the verdict that counts."""
    versions = versions or Versions()
    by_type: dict[str, list[Judged]] = {}
    for a in alerts:
        by_type.setdefault(a.type, []).append(a)
    out: dict[str, dict[str, Any]] = {}
    for kind, group in sorted(by_type.items()):
        by_version: dict[str, list[Judged]] = {}
        for a in group:
            by_version.setdefault(versions.at(a.starts_at), []).append(a)
        out[kind] = {**_row(group, verdicts), "versions": {v: _row(g, verdicts) for v, g in sorted(by_version.items())}}
    return out


def read_config_changes(settings, *, timeout: float = 10.0) -> list[float]:
    """When the runtime settings changed, as far as the compacted config topic still tells: each record's
    ``updated_at`` (its broker timestamp for a tombstone, an unset)."""
    import orjson

    from stepwatch.feedback import read_all
    from stepwatch.models.shadow import SHADOW_KEY

    kafka = settings.kafka
    out = []
    for record in read_all(settings, kafka.topic(kafka.config_topic), timeout=timeout):
        if record.key == SHADOW_KEY.encode():  # a candidate on trial is not the settings in force
            continue
        when = None
        if record.value is not None:
            try:
                value = orjson.loads(record.value)
            except orjson.JSONDecodeError:
                value = None
            if isinstance(value, dict) and isinstance(value.get("updated_at"), (int, float)):
                when = float(value["updated_at"])
        if when is None and record.timestamp and record.timestamp > 0:
            when = record.timestamp / 1000.0
        if when is not None:
            out.append(when)
    return out


def low_precision(confirmed: int, false: int, *, threshold: float, min_feedback: int) -> bool:
    """Whether a rule's precision is low with enough feedback to say so: at least ``min_feedback`` verdicts
    and the Wilson interval's upper bound under ``threshold`` (chance alone does not explain it)."""
    n = confirmed + false
    if n < max(1, min_feedback):
        return False
    high = wilson(confirmed, n)[1]
    return high is not None and high < threshold
