"""Shadow settings: a candidate set of runtime settings tried on the live stream without paging anyone.

Broker-free. The candidate travels on the config topic (stepwatch/runtime_config.py) under its own key,
``SHADOW_KEY``, as a config message marked ``"shadow": true``; it holds overrides for the ``*`` scope only
(what ``stepwatch config promote-shadow`` would make live). A worker that reads one runs a second engine with
the candidate on top of the live settings, and publishes only the alerts of the rules under trial (the rules
whose settings class is a section the candidate changes) to the ``shadow-alerts`` topic (streams/shadow.py).

This module says which sections differ, which rules and alert types that puts under trial, what identifies a
candidate, and compares the live and shadow alerts of a window (``compare``, ``stepwatch report --shadow``).

>>> trial_types(("hang",))
('hang',)
>>> identity({"straggler": {"ratio_threshold": 1.3}}) == identity({"straggler": {"ratio_threshold": 1.3}})
True
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from .registry import all_specs
from .rule import RuleSpec
from .settings import DetectionSettings
from .wire.feedback import Verdict

_SECTIONS = frozenset(f.name for f in dataclasses.fields(DetectionSettings))
#: The config topic key of the candidate (a job id never starts with ``~``; the ``*`` scope is the live one).
SHADOW_KEY = "~shadow"


def identity(overrides: Mapping[str, Mapping[str, Any]]) -> str:
    """A short fingerprint of a candidate: the same overrides always give the same id (alerts are tagged with it)."""
    return hashlib.sha1(orjson.dumps(overrides, option=orjson.OPT_SORT_KEYS)).hexdigest()[:12]


def encode(overrides: Mapping[str, Mapping[str, Any]] | None, *, now: float | None = None) -> bytes | None:
    """The config topic message of a candidate (None: the tombstone that drops it)."""
    if not overrides:
        return None
    return orjson.dumps({"v": 1, "kind": "config", "shadow": True, **overrides, "id": identity(overrides),
                         "updated_at": time.time() if now is None else now})


def merged(live: Mapping[str, Mapping[str, Any]], shadow: Mapping[str, Mapping[str, Any]]) -> dict[str, dict]:
    """The ``*`` scope's overrides with the candidate on top (what ``promote-shadow`` writes)."""
    out = {section: dict(values) for section, values in live.items()}
    for section, values in shadow.items():
        out.setdefault(section, {}).update(values)
    return {section: values for section, values in out.items() if values}


def differing_sections(base: Any, live: Mapping[str, Mapping[str, Any]],
                       shadow: Mapping[str, Mapping[str, Any]]) -> tuple[str, ...]:
    """The sections whose settings the candidate changes, on top of ``base`` (``stepwatch.config.Settings``) and
    the live ``*`` overrides: a candidate value equal to the live one puts no rule under trial."""
    out = []
    for section in sorted(shadow):
        now = dataclasses.replace(getattr(base, section), **live.get(section, {}))
        then = dataclasses.replace(now, **shadow[section])
        if then != now:
            out.append(section)
    return tuple(out)


def rules_under_trial(sections: Iterable[str]) -> tuple[RuleSpec, ...]:
    """The registered rules (job, node and outlet) whose settings class is one of ``sections``' (sections of
    ``DetectionSettings``; ``KeyError`` for another name)."""
    defaults = DetectionSettings()
    classes = set()
    for section in sections:
        if section not in _SECTIONS:
            raise KeyError(section)
        classes.add(type(getattr(defaults, section)))
    return tuple(spec for spec in all_specs() if spec.settings in classes)


def trial_types(sections: Iterable[str]) -> tuple[str, ...]:
    """The alert types the rules under trial own, sorted: only these go to the shadow-alerts topic and are
    compared (an alert type also made from them downstream, e.g. a node incident of stragglers, comes along)."""
    return tuple(sorted({str(t) for spec in rules_under_trial(sections) for t in spec.alert_types}))


# -- the comparison (stepwatch report --shadow) ---------------------------------------------------------------


class Change(StrEnum):
    """What the candidate would have done to one alert."""

    ADDED = "added"  # the shadow fired it, the live rules did not
    DROPPED = "dropped"  # the live rules fired it, the shadow did not
    CHANGED = "changed"  # both, but not alike (severity, ranks, nodes, how it ended)


@dataclass(frozen=True, slots=True)
class Outcome:
    """One alert id's life on one side, folded from its records: the worst severity, every rank and node named,
    its last status and end."""

    id: str
    type: str
    job: str
    starts_at: float
    severity: str
    ranks: tuple[int, ...]
    nodes: tuple[str, ...]
    status: str
    ends_at: float | None
    #: When it was first published (its record's ``_at``, the broker's timestamp, where the reader added it;
    #: else ``starts_at``): what the window is about, since an alert may start before its rule is sure.
    seen_at: float = 0.0


_SEVERITY = {"info": 0, "warning": 1, "critical": 2}


def outcomes(alerts: Iterable[Mapping[str, Any]]) -> dict[str, Outcome]:
    """Alert records (as on a topic, in order) folded per id; records without an id or type are passed over."""
    out: dict[str, Outcome] = {}
    for a in alerts:
        ident, kind = a.get("id"), a.get("type")
        if not isinstance(ident, str) or not isinstance(kind, str):
            continue
        ranks = tuple(r for r in a.get("ranks") or () if isinstance(r, int))
        nodes = tuple(n for n in a.get("nodes") or () if isinstance(n, str))
        severity = str(a.get("severity", ""))
        ends = a.get("ends_at") if isinstance(a.get("ends_at"), (int, float)) else None
        starts = a.get("starts_at") if isinstance(a.get("starts_at"), (int, float)) else 0.0
        seen = a.get("_at") if isinstance(a.get("_at"), (int, float)) else starts
        old = out.get(ident)
        if old is not None:
            if _SEVERITY.get(old.severity, -1) > _SEVERITY.get(severity, -1):
                severity = old.severity
            ranks = tuple(sorted(set(old.ranks) | set(ranks)))
            nodes = tuple(sorted(set(old.nodes) | set(nodes)))
            starts, seen = old.starts_at, old.seen_at
        out[ident] = Outcome(ident, kind, str(a.get("job", "")), float(starts), severity, tuple(sorted(ranks)),
                             tuple(sorted(nodes)), str(a.get("status", "")), ends, float(seen))
    return out


def differences(live: Outcome, shadow: Outcome) -> tuple[str, ...]:
    """The fields in which one alert's two lives differ (ends compared to the second)."""
    out = [name for name in ("severity", "ranks", "nodes", "status") if getattr(live, name) != getattr(shadow, name)]
    if live.ends_at is not None and shadow.ends_at is not None and abs(live.ends_at - shadow.ends_at) >= 1.0:
        out.append("ends_at")
    return tuple(out)


@dataclass(frozen=True, slots=True)
class AlertChange:
    """One alert the candidate adds, drops or changes, with the feedback on it (for an added one: whether a live
    alert on the same job and one of its ranks or nodes was confirmed)."""

    change: Change
    id: str
    type: str
    job: str
    starts_at: float
    verdict: Verdict | None
    fields: tuple[str, ...] = ()
    near_confirmed: bool = False

    def as_dict(self) -> dict[str, Any]:
        out = {"change": str(self.change), "id": self.id, "type": self.type, "job": self.job,
               "starts_at": self.starts_at, "verdict": None if self.verdict is None else str(self.verdict)}
        if self.fields:
            out["fields"] = list(self.fields)
        if self.change is Change.ADDED:
            out["near_confirmed"] = self.near_confirmed
        return out


@dataclass(frozen=True, slots=True)
class Comparison:
    """Live against shadow over ``[start, end]`` for the rules under trial (``types``)."""

    shadow_id: str
    types: tuple[str, ...]
    start: float
    end: float
    live_alerts: int
    shadow_alerts: int
    changes: tuple[AlertChange, ...]

    def of(self, change: Change) -> list[AlertChange]:
        return [c for c in self.changes if c.change is change]

    def summary(self) -> str:
        """One sentence: "drops 11 alerts, 9 of them marked false; adds 2, 2 on ranks later confirmed; ..."."""
        dropped, added, changed = self.of(Change.DROPPED), self.of(Change.ADDED), self.of(Change.CHANGED)
        parts = [f"drops {len(dropped)} alert{'s' if len(dropped) != 1 else ''}" + _verdicts(dropped),
                 f"adds {len(added)}" + (f", {sum(c.near_confirmed for c in added)} of them on ranks or nodes later "
                                         f"confirmed" if added else ""),
                 f"changes {len(changed)}" + _verdicts(changed)]
        return "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        counts: dict[str, Any] = {}
        for change in Change:
            items = self.of(change)
            verdicts: dict[str, int] = {}
            for c in items:
                name = "none" if c.verdict is None else str(c.verdict)
                verdicts[name] = verdicts.get(name, 0) + 1
            counts[str(change)] = {"alerts": len(items), "verdicts": verdicts}
            if change is Change.ADDED:
                counts[str(change)]["near_confirmed"] = sum(c.near_confirmed for c in items)
        return {"shadow_id": self.shadow_id, "types": list(self.types), "start": self.start, "end": self.end,
                "live_alerts": self.live_alerts, "shadow_alerts": self.shadow_alerts, "counts": counts,
                "summary": self.summary(), "changes": [c.as_dict() for c in self.changes]}


def _verdicts(items: list[AlertChange]) -> str:
    said = {}
    for c in items:
        if c.verdict is not None:
            said[c.verdict] = said.get(c.verdict, 0) + 1
    if not said:
        return ""
    words = [f"{n} of them {'marked ' if i == 0 else ''}{v}" for i, (v, n) in
             enumerate(sorted(said.items(), key=lambda kv: (-kv[1], kv[0])))]
    return ", " + ", ".join(words)


def compare(live: Iterable[Mapping[str, Any]], shadow: Iterable[Mapping[str, Any]], *, types: Iterable[str],
            feedback: Mapping[str, Verdict], start: float, end: float, shadow_id: str = "") -> Comparison:
    """The candidate's effect on the alerts of ``types`` first published within ``[start, end]`` (``_at``, else
    ``starts_at``), by alert id; each joined
    with the latest verdict on it (``feedback``: alert id -> verdict). Live alerts of other types are only read to
    tell whether an added alert's job and ranks were later confirmed."""
    types = tuple(sorted(set(types)))
    live_all = outcomes(live)
    confirmed = [o for i, o in live_all.items() if feedback.get(i) is Verdict.CONFIRMED]

    def within(o: Outcome) -> bool:
        return o.type in types and start <= o.seen_at <= end

    lives = {i: o for i, o in live_all.items() if within(o)}
    shadows = {i: o for i, o in outcomes(shadow).items() if within(o)}
    changes: list[AlertChange] = []
    for i in sorted(set(lives) | set(shadows), key=lambda i: ((lives.get(i) or shadows[i]).starts_at, i)):
        o, s = lives.get(i), shadows.get(i)
        if o is None:
            near = any(c.job == s.job and (set(c.ranks) & set(s.ranks) or set(c.nodes) & set(s.nodes))
                       for c in confirmed)
            changes.append(AlertChange(Change.ADDED, i, s.type, s.job, s.starts_at, feedback.get(i),
                                       near_confirmed=near))
        elif s is None:
            changes.append(AlertChange(Change.DROPPED, i, o.type, o.job, o.starts_at, feedback.get(i)))
        elif fields := differences(o, s):
            changes.append(AlertChange(Change.CHANGED, i, o.type, o.job, o.starts_at, feedback.get(i), fields))
    return Comparison(shadow_id, types, start, end, len(lives), len(shadows), tuple(changes))
