"""What was already published per alert id: duplicate suppression and id aliases.

Shared by every road from events to alerts (``models/pipeline.py``): the live worker, replay and
restart recovery, which fills it from the alerts topic before the worker publishes again.
"""

from __future__ import annotations

import dataclasses

from .alert_types import AlertStatus
from .alerts import Alert


class PublishedAlerts:
    """What this worker (or its previous life) last published per alert id.

    Used to suppress a second identical publication: a ``firing`` already on the topic
    with the same severity and summary is not sent again.
    """

    def __init__(self, max_ids: int = 100_000) -> None:
        self.max_ids = max_ids
        self._last: dict[str, tuple[str, str, str]] = {}
        self.open: dict[str, Alert] = {}  # id -> the firing alert as last published
        # The rebuilt engine may name a problem it saw from the middle with another id than
        # the one already published (e.g. a later first step): publish it under the old id.
        self.alias: dict[str, tuple[str, float]] = {}  # engine id -> (published id, its starts_at)

    def remember(self, alert: Alert | dict) -> None:
        """``alert`` is on the topic now (a record read back from it: ``Alert.from_dict``, ``ValueError`` if
        it is not one)."""
        if isinstance(alert, dict):
            alert = Alert.from_dict(alert)
        self._last[alert.id] = (alert.status, alert.severity, alert.summary)
        if alert.status == AlertStatus.FIRING:
            self.open[alert.id] = alert
        else:
            self.open.pop(alert.id, None)
        while len(self._last) > self.max_ids:  # bounded: forget the oldest ids
            oldest = next(iter(self._last))
            self._last.pop(oldest)
            self.open.pop(oldest, None)

    def is_duplicate(self, alert: Alert) -> bool:
        return self._last.get(alert.id) == (alert.status, alert.severity, alert.summary)

    def rewrite(self, alert: Alert) -> Alert:
        """The alert under the id it was first published with."""
        alias = self.alias.get(alert.id)
        if alias is None:
            return alert
        if alert.status == AlertStatus.RESOLVED:
            self.alias.pop(alert.id, None)
        return dataclasses.replace(alert, id=alias[0], starts_at=alias[1])
