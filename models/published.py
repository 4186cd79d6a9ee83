"""What was already published per alert id: duplicate suppression and id aliases.

Shared by every road from events to alerts (``models/pipeline.py``): the live worker, replay and
restart recovery, which fills it from the alerts topic before the worker publishes again.

Times are compared on the job's hosts' clock (``alert_clock.hosts_start``): a job alert published on the broker's
clock carries its shift, and a restarted worker, whose clock offset for the job is its own (a span replayed with
record times moved on), shifts a re-derived episode differently. Each episode keeps the shift it was first
published with, in every life (``rewrite``), so its published times do not change.
"""

from __future__ import annotations

import dataclasses

from .alert_clock import SAME_SECONDS, hosts_start, same_start, shift_of, with_shift
from .alert_types import AlertStatus, Severity
from .alerts import Alert

_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.CRITICAL: 2}


class PublishedAlerts:
    """What this worker (or its previous life) last published per alert id.

    Used to suppress a second publication of what the topic already says (``is_duplicate``): a worker that
    re-reads events after a restart derives again what its previous life published.
    """

    def __init__(self, max_ids: int = 100_000) -> None:
        self.max_ids = max_ids
        # id -> (status, severity, summary, starts_at on the hosts' clock, the shift it was published with, starts_at)
        self._last: dict[str, tuple[str, str, str, float, float, float]] = {}
        self.open: dict[str, Alert] = {}  # id -> the firing alert as last published
        # The rebuilt engine may name a problem it saw from the middle with another id than
        # the one already published (e.g. a later first step): publish it under the old id.
        self.alias: dict[str, tuple[str, float]] = {}  # engine id -> (published id, its starts_at)
        #: Per id whose latest record was read back from the topic (a previous life's, not this one's): the gists
        #: (``_gist``) of the firing versions of its episode read back.
        self.read_back: dict[str, set[tuple]] = {}

    def remember(self, alert: Alert | dict, *, read_back: bool = False) -> None:
        """``alert`` is on the topic now: published by this life, or ``read_back`` from the topic (a previous
        life's record; a dict: ``Alert.from_dict``, ``ValueError`` if it is not one)."""
        if isinstance(alert, dict):
            alert = Alert.from_dict(alert)
        if not read_back:
            self.read_back.pop(alert.id, None)
        elif alert.status == AlertStatus.FIRING:
            last = self._last.get(alert.id)
            gists = self.read_back.get(alert.id) if last is not None and same_start(last[3], hosts_start(alert)) \
                else None
            self.read_back[alert.id] = (gists or set()) | {_gist(alert)}  # (a new episode starts the set again)
        else:
            self.read_back.pop(alert.id, None)
        self._last.pop(alert.id, None)  # (re)inserted last: the bound forgets the least recently published
        self._last[alert.id] = (alert.status, alert.severity, alert.summary, hosts_start(alert), shift_of(alert),
                                alert.starts_at)
        if alert.status == AlertStatus.FIRING:
            self.open[alert.id] = alert
        else:
            self.open.pop(alert.id, None)
        while len(self._last) > self.max_ids:  # bounded: forget the oldest ids
            oldest = next(iter(self._last))
            self._last.pop(oldest)
            self.open.pop(oldest, None)
            self.read_back.pop(oldest, None)

    def is_duplicate(self, alert: Alert) -> bool:
        """Whether ``alert`` says nothing the topic does not already say about its id: the same status, severity
        and summary; a second resolution; a firing of an episode the topic already resolved (one that began no
        later: a new episode of an id, e.g. a node suspect again, begins later); or a firing the open one
        covers (no higher severity, and every incident it lists already listed: a ledger read back; or any
        version of the same episode read back from the topic: a restarted worker re-deriving, from events its
        previous life had handled, an update that says what a version read back said, in figures of its own)."""
        last = self._last.get(alert.id)
        if last is None:
            return False
        status, severity, summary, starts_at, _, _ = last
        if (status, severity, summary) == (alert.status, alert.severity, alert.summary):
            return True
        began = hosts_start(alert)  # (the job's own clock: the same in every life for one episode)
        if status == AlertStatus.RESOLVED:
            return alert.status == AlertStatus.RESOLVED or began < starts_at + SAME_SECONDS
        if alert.status != AlertStatus.FIRING or _RANK.get(alert.severity, 0) > _RANK.get(severity, 0):
            return False
        if same_start(began, starts_at) and alert.id in self.read_back:
            mine = _gist(alert)
            if any(g[:3] == mine[:3] and mine[3] <= g[3] for g in self.read_back[alert.id]):
                return True  # says no word a version read back did not say
        listed = _incidents(alert)
        return listed is not None and listed <= (_incidents(self.open[alert.id]) or set())

    def rewrite(self, alert: Alert) -> Alert:
        """The alert under the id it was first published with, and on the shift its episode was published with
        (a restarted worker's own offset would move a re-derived version's times: models/alert_clock.py)."""
        alias = self.alias.get(alert.id)
        if alias is not None:
            if alert.status == AlertStatus.RESOLVED:
                self.alias.pop(alert.id, None)
            last = self._last.get(alias[0])
            shift = last[4] if last is not None else shift_of(alert)
            # (the published starts_at as it is: the one it had; this version's other times on its shift)
            return dataclasses.replace(with_shift(alert, shift), id=alias[0], starts_at=alias[1])
        last = self._last.get(alert.id)
        if last is None or last[4] == shift_of(alert) or not same_start(last[3], hosts_start(alert)):
            return alert
        # the same episode: the times it was published with (its starts_at as published, not moved twice and rounded)
        return dataclasses.replace(with_shift(alert, last[4]), starts_at=last[5])


def _gist(alert: Alert) -> tuple:
    """What a firing says, its figures left out: severity, ranks, nodes and the evidence's words (signal, cause,
    incident, failure class). Two lives' versions of one update differ in figures only (each its own ratios)."""
    words = frozenset((k, v) for k, v in alert.evidence.items() if isinstance(v, str)) \
        if isinstance(alert.evidence, dict) else frozenset()
    return alert.severity, tuple(alert.ranks), tuple(alert.nodes), words


def _incidents(alert: Alert) -> set[str] | None:
    """The incident ids an alert's evidence lists (a ``node_suspect``'s); None: it lists none."""
    listed = alert.evidence.get("incidents") if isinstance(alert.evidence, dict) else None
    if not isinstance(listed, list):
        return None
    return {str(i.get("id")) for i in listed if isinstance(i, dict)}
