"""``stepwatch alerts``' readable form: one line per incident update, not one per alert message.

One fault often raises several alerts of one kind at once (an IO fault on a node: a straggler
alert per rank of the node, each published again when its cause is found, then resolved: 24
messages). An incident here is the alerts of one type, job and node set; its line is printed when
what an SRE acts on changes: status (firing while any of its alerts fires), severity, the ranks
(of its firing alerts) or the recommended action. Alerts that arrive together (one poll of the
topic) are folded into one update.
"""

from __future__ import annotations

from collections import OrderedDict

from stepwatch.commands.alerts_table import alert_table_row

#: Incidents remembered (oldest forgotten first: memory stays bounded on a long follow).
MAX_INCIDENTS = 10_000
_SEVERITY = {"info": 0, "warning": 1, "critical": 2}


def incident_key(alert: dict) -> tuple:
    return (str(alert.get("type")), str(alert.get("job")), tuple(str(n) for n in alert.get("nodes") or ()))


def _action(alert: dict) -> str:
    annotations = alert.get("annotations") if isinstance(alert.get("annotations"), dict) else {}
    return str(annotations.get("recommended_action") or "")


class _Incident:
    __slots__ = ("members", "published", "latest", "printed")

    def __init__(self) -> None:
        self.members: dict[str, dict] = {}  # alert id -> its latest message
        self.published: float | None = None
        self.latest: dict = {}
        self.printed: tuple | None = None

    def view(self) -> dict:
        """The incident as one alert: the latest message, with the members' status, severity and ranks."""
        firing = [a for a in self.members.values() if a.get("status") == "firing"]
        shown = firing or list(self.members.values())
        ranks = sorted({r for a in shown for r in a.get("ranks") or () if isinstance(r, int)})
        severity = max((str(a.get("severity", "?")) for a in shown), key=lambda s: _SEVERITY.get(s, -1))
        out = dict(self.latest, status="firing" if firing else "resolved", severity=severity, ranks=ranks)
        if len(self.members) > 1:
            out["summary"] = f"{self.latest.get('summary', '')} (incident of {len(self.members)} alerts)"
        return out

    def state(self, view: dict) -> tuple:
        return view["status"], view["severity"], tuple(view["ranks"]), _action(view)


class IncidentLines:
    """Feed alerts with ``add``; ``flush`` returns the lines of the incidents whose state changed."""

    def __init__(self, max_incidents: int = MAX_INCIDENTS, *, width: int | None = None) -> None:
        self.max_incidents = max_incidents
        self.width = width  # the terminal's (alerts_table.alert_table_row); None: whole lines
        self._incidents: OrderedDict[tuple, _Incident] = OrderedDict()
        self._of_alert: dict[str, tuple] = {}  # alert id -> its incident, so a changed node set stays in it
        self._dirty: dict[tuple, None] = {}
        self._pending: list[str] = []

    def add(self, alert: dict, published: float | None = None) -> None:
        ident = str(alert.get("id"))
        key = self._of_alert.get(ident)
        if key is None or key not in self._incidents:
            key = incident_key(alert)
            self._of_alert[ident] = key
        incident = self._incidents.get(key)
        if incident is None:
            incident = self._incidents[key] = _Incident()
            if len(self._incidents) > self.max_incidents:
                old_key, old = self._incidents.popitem(last=False)
                for member in old.members:
                    self._of_alert.pop(member, None)
                self._dirty.pop(old_key, None)
        self._incidents.move_to_end(key)
        before = incident.members.get(ident)
        if key in self._dirty and before is not None and before.get("status") != alert.get("status") and \
                (incident.printed is None or incident.printed[0] != incident.view()["status"]):
            # Within one batch (read from the beginning) the incident is about to leave a status never printed:
            # that status gets its line (firing, then resolved), the members' steps in between do not.
            line = self._line(incident)
            if line is not None:
                self._pending.append(line)
        incident.members[ident] = alert
        incident.latest = alert
        incident.published = published
        self._dirty[key] = None

    def _line(self, incident: _Incident) -> str | None:
        """The incident's line if its state changed since it was last printed."""
        view = incident.view()
        state = incident.state(view)
        if state == incident.printed:
            return None
        incident.printed = state
        return alert_table_row(view, published=incident.published, width=self.width)

    def flush(self) -> list[str]:
        lines, self._pending = self._pending, []
        for key in self._dirty:
            incident = self._incidents.get(key)
            line = self._line(incident) if incident is not None else None
            if line is not None:
                lines.append(line)
        self._dirty.clear()
        return lines
