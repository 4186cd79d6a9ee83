"""Backtests: what a settings change would have done to the alerts of recordings, and how right each side is.

``stepwatch backtest`` replays recordings twice, under the current settings and under a candidate (the same
assignments ``stepwatch config set`` takes, for every job: ``*``), and compares the two runs' alerts here:

- :func:`diff`: alerts matched by id (a stable fingerprint of what is alerted on): **new** (only the
  candidate raises it), **dropped** (only the current settings), **changed** (both, but the last firing
  version differs in severity, ranks, nodes or cause);
- :func:`score`: with labels, each side's precision and recall, of the alerts that page (warning, critical).
  Labels are either feedback records (``stepwatch feedback --export``, models/wire/feedback.py: ``confirmed``
  ids are true, ``false`` ids false, ``duplicate`` and ``transient`` are neither) or a labelled scenario's
  JSON (stepwatch/sim/scenarios.py ``labels``: an alert is true when it fires in a problem's window for its
  job or nodes, of the problem's type or one it accepts; a problem is found when one of its type does).

Pure: lists of alert records (``Alert.to_dict``) in, plain dicts out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import orjson

#: An alert that fires up to this long after a labelled problem's end still belongs to it (bench/quality.py's).
GRACE_S = 15.0
_SEVERITY = {"info": 0, "warning": 1, "critical": 2}


def firing(alerts: list[dict]) -> dict[str, dict]:
    """Each alert id's last firing version, in the order the ids first fired."""
    out: dict[str, dict] = {}
    for a in alerts:
        if a.get("status") == "firing":
            out[a["id"]] = a
    return out


def cause(alert: dict) -> str:
    """What an alert says caused it: its first suspected cause (category, node, component), else its evidence's
    or labels' ``cause``; '' when it says none."""
    evidence = alert.get("evidence") or {}
    causes = evidence.get("suspected_causes") or []
    if causes and isinstance(causes[0], dict):
        first = causes[0]
        return ":".join(str(first.get(k) or "") for k in ("category", "node", "component"))
    return str(evidence.get("cause") or (alert.get("labels") or {}).get("cause") or "")


def _shape(alert: dict) -> dict:
    return {"severity": alert.get("severity"), "ranks": list(alert.get("ranks") or ()),
            "nodes": list(alert.get("nodes") or ()), "cause": cause(alert)}


def _brief(alert: dict) -> dict:
    return {"id": alert["id"], "type": alert.get("type"), "job": alert.get("job"), **_shape(alert),
            "starts_at": alert.get("starts_at"), "summary": (alert.get("summary") or "")[:200]}


def diff(current: list[dict], candidate: list[dict]) -> dict:
    """``{"new": [...], "dropped": [...], "changed": [...], "same": n}``: alerts by id (see the module doc);
    a changed one lists ``what`` changed, with ``before`` and ``after``."""
    before, after = firing(current), firing(candidate)
    changed = []
    for alert_id in before.keys() & after.keys():
        old, new = _shape(before[alert_id]), _shape(after[alert_id])
        what = [k for k in old if old[k] != new[k]]
        if what:
            changed.append({"id": alert_id, "type": after[alert_id].get("type"), "job": after[alert_id].get("job"),
                            "what": what, "before": {k: old[k] for k in what}, "after": {k: new[k] for k in what}})
    order = {alert_id: i for i, alert_id in enumerate([*before, *after])}
    return {"new": [_brief(after[i]) for i in after if i not in before],
            "dropped": [_brief(before[i]) for i in before if i not in after],
            "changed": sorted(changed, key=lambda c: order[c["id"]]),
            "same": len(before.keys() & after.keys()) - len(changed)}


# -- labels ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Labels:
    """What is known to be right: feedback verdicts by alert id, or a labelled scenario's problems."""

    verdicts: dict[str, str] = field(default_factory=dict)
    problems: tuple[dict, ...] = ()

    @property
    def kind(self) -> str:
        return "problems" if self.problems else "feedback"


def read_labels(path: str) -> Labels:
    """Feedback JSON Lines (the latest verdict per alert id counts) or a labelled scenario's JSON (``problems``);
    ``ValueError`` with a one-line reason otherwise."""
    from stepwatch.models.wire.feedback import Feedback

    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or type(exc).__name__}") from None
    try:
        whole = orjson.loads(raw)
    except orjson.JSONDecodeError:
        whole = None
    if isinstance(whole, dict) and isinstance(whole.get("problems"), list):
        return Labels(problems=tuple(p for p in whole["problems"] if isinstance(p, dict)))
    verdicts: dict[str, str] = {}
    for n, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = Feedback.from_json(line)
        except ValueError as exc:
            raise ValueError(f"{path}: line {n}: {exc} (expected feedback JSON Lines, 'stepwatch feedback "
                             "--export', or a labelled scenario's JSON)") from None
        verdicts[record.alert_id] = str(record.verdict)
    if not verdicts:
        raise ValueError(f"{path}: no feedback record and no 'problems' (expected feedback JSON Lines or a labelled "
                         "scenario's JSON)")
    return Labels(verdicts=verdicts)


def _in_window(alert: dict, p: dict) -> bool:
    t = alert.get("starts_at")
    onset, end = p.get("onset_ts"), p.get("end_ts")
    if t is None or onset is None or end is None:
        return False
    mine = p.get("job") == alert.get("job") or (
        not alert.get("job") and set(alert.get("nodes") or ()) & set(p.get("right_node") or ()))
    kinds = {p.get("alert_type"), *p.get("accepts", ())}
    return bool(mine) and alert.get("type") in kinds and onset <= t <= end + GRACE_S


def pages(alerts: list[dict]) -> list[dict]:
    """The alerts that page someone: severity warning or critical (an ``info`` alert is a note on the dashboard)."""
    return [a for a in alerts if _SEVERITY.get(a.get("severity"), 1) >= _SEVERITY["warning"]]


def score(alerts: list[dict], labels: Labels) -> dict:
    """One run's precision and recall against ``labels``, of the alerts that page (``pages``): ``{"true", "false",
    "unlabelled", "precision", "recall", "found", "known"}`` (precision, recall: None when nothing to divide by)."""
    alerts = pages(alerts)
    fired = firing(alerts)
    if labels.problems:
        from stepwatch.models.alert_types import DERIVED_TYPES

        judged = {i: a for i, a in fired.items() if a.get("type") not in DERIVED_TYPES}
        first: dict[str, dict] = {}  # each id's first firing version: when it fired
        for a in alerts:
            if a.get("status") == "firing" and a["id"] in judged:
                first.setdefault(a["id"], a)
        true = {i for i, a in first.items() if any(_in_window(a, p) for p in labels.problems)}
        found = sum(any(_in_window(a, p) and a.get("type") == p.get("alert_type") for a in first.values())
                    for p in labels.problems)
        known, wrong, unlabelled = len(labels.problems), len(judged) - len(true), 0
    else:
        verdicts = labels.verdicts
        true = {i for i in fired if verdicts.get(i) == "confirmed"}
        wrong = sum(verdicts.get(i) == "false" for i in fired)
        unlabelled = sum(i not in verdicts for i in fired)
        found = len(true)
        known = sum(v == "confirmed" for v in verdicts.values())
    return {"true": len(true), "false": wrong, "unlabelled": unlabelled,
            "precision": round(len(true) / (len(true) + wrong), 4) if true or wrong else None,
            "recall": round(found / known, 4) if known else None, "found": found, "known": known}
