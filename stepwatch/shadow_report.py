"""``stepwatch report --shadow``: what the candidate settings would have done, against the live alerts.

Reads the shadow-alerts topic (streams/shadow.py), the alerts topic and the feedback topic, and compares, for the
latest candidate on the shadow-alerts topic and the alert types of its rules under trial, the alerts that began
within the window (``--since``, counted back from now; never before the candidate started): added, dropped and
changed by alert id, each with the latest verdict on it (models/shadow.py ``compare``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator

import orjson

from stepwatch.models.shadow import Comparison, compare
from stepwatch.models.wire.feedback import Verdict


def _records(settings, topic: str, *, timeout: float = 10.0) -> Iterator[tuple[bytes | None, bytes | None, float]]:
    """(key, value, broker timestamp in seconds) of every record of ``topic``, from its beginning to its end as of
    now (none if it is absent): stepwatch/feedback.py's ``read_all``."""
    from stepwatch.feedback import read_all

    for record in read_all(settings, topic, timeout=timeout):
        yield record.key, record.value, record.timestamp / 1000


def _alerts(settings, topic: str) -> list[dict]:
    out = []
    for _, value, at in _records(settings, topic):
        try:
            obj = orjson.loads(value) if value else None
        except orjson.JSONDecodeError:
            continue
        if isinstance(obj, dict) and obj.get("id"):
            obj["_at"] = at  # when it was published: the window is about that (models/shadow.py)
            out.append(obj)
    return out


def read_feedback(settings) -> dict[str, Verdict]:
    """The verdict in force per alert id (stepwatch/feedback.py's reader: a person's word beats the
    machine's, a tombstone takes a verdict back)."""
    from stepwatch.feedback import read_feedback as read_all_feedback

    return {alert_id: record.verdict for alert_id, record in read_all_feedback(settings).items()}


def shadow_comparison(live: list[dict], shadow: list[dict], feedback: dict[str, Verdict], *, since: float,
                      now: float, current: dict | None = None) -> Comparison | None:
    """The comparison for the candidate on trial now (``current``: ``{"id", "sections", "since"}`` from the config
    topic; a candidate that fired nothing still drops every live alert of its rules), else for the latest one
    among ``shadow``'s records; None: neither."""
    tagged = [a for a in shadow if isinstance(a.get("shadow"), dict) and isinstance(a["shadow"].get("id"), str)]
    if current is None and not tagged:
        return None
    tag = current if current is not None else tagged[-1]["shadow"]
    mine = [a for a in tagged if a["shadow"]["id"] == tag["id"]]
    # When this candidate started: on the workers (its alerts say), else when it was written.
    started = min([float(a["shadow"].get("since") or 0.0) for a in mine] or [float(tag.get("since") or 0.0)])
    types = set(_types(tag)) or {a.get("type") for a in mine}
    return compare(live, mine, types=types, feedback=feedback, start=max(now - since, started), end=now,
                   shadow_id=tag["id"])


def current_candidate(settings) -> dict | None:
    """The candidate on the config topic now, as a shadow alert's tag (``id``, ``settings``, ``sections``: those
    that differ from the live ``*`` settings, ``since``: when it was written); None: none on trial."""
    from stepwatch.models.shadow import SHADOW_KEY, differing_sections, identity
    from stepwatch.runtime_config import GLOBAL, decode

    kafka = settings.kafka
    found: dict[str, tuple[dict | None, float]] = {}
    for key, value, at in _records(settings, kafka.topic(kafka.config_topic)):
        scope = key.decode("utf-8", "replace") if key else GLOBAL
        if scope not in (GLOBAL, SHADOW_KEY):
            continue
        try:
            found[scope] = (decode(value), at)
        except ValueError:
            continue
    overrides, at = found.get(SHADOW_KEY, (None, 0.0))
    if not overrides:
        return None
    live = found.get(GLOBAL, (None, 0.0))[0] or {}
    return {"id": identity(overrides), "settings": overrides,
            "sections": list(differing_sections(settings, live, overrides)), "since": at}


def _types(tag: dict) -> list[str]:
    from stepwatch.models.shadow import trial_types

    sections = [s for s in tag.get("sections") or () if isinstance(s, str)]
    try:
        return list(trial_types(sections))
    except KeyError:  # a section this version does not know
        return []


def format_text(c: Comparison) -> str:
    lines = [f"shadow {c.shadow_id} (types {', '.join(c.types)}), from {_iso(c.start)} to {_iso(c.end)}: "
             f"{c.live_alerts} live alerts, {c.shadow_alerts} shadow alerts",
             f"the candidate {c.summary()}"]
    for change in c.changes:
        said = f" [{change.verdict}]" if change.verdict is not None else ""
        extra = f" ({', '.join(change.fields)})" if change.fields else ""
        lines.append(f"  {change.change:<7} {change.type:<15} {change.job} {change.id}{extra}{said}")
    return "\n".join(lines) + "\n"


def _iso(ts: float) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def cmd_shadow_report(settings, since: float, *, as_json: bool) -> int:
    kafka = settings.kafka
    shadow = _alerts(settings, kafka.topic(kafka.shadow_alerts_topic))
    live = _alerts(settings, kafka.topic(kafka.alerts_topic))
    result = shadow_comparison(live, shadow, read_feedback(settings), since=since, now=time.time(),
                               current=current_candidate(settings))
    if result is None:
        print(f"stepwatch report: no shadow settings on trial and no shadow alerts on "
              f"{kafka.topic(kafka.shadow_alerts_topic)} (set a candidate with 'stepwatch config set --shadow')",
              file=sys.stderr)
        if as_json:
            sys.stdout.write("null\n")
        return 0
    if as_json:
        sys.stdout.write(orjson.dumps(result.as_dict(), option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        sys.stdout.write(format_text(result))
    return 0
