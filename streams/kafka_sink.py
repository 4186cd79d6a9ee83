"""The worker's sink (models/sinks.py's ``AsyncSink``): a pipeline's outputs to the Kafka topics.

Alerts first, to the alerts topic keyed by job (a node alert by its node), each one then offered to the
optional Alertmanager and action sinks; then one dead letter per bad message to the dead-letter topic
(what matters most goes out before a flood of bad input's dead letters can hold it up).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from stepwatch.models.alerts import Alert
from stepwatch.models.pipeline import Outputs
from stepwatch.models.wire.deadletter import MAX_TEXT, deadletter_budget

log = logging.getLogger("stepwatch.worker")


@dataclass(slots=True)
class KafkaSink:
    """``alerts`` and ``deadletters``: Faust topics (``send(key=, value=)``, awaited); ``alertmanager``: an
    ``AlertmanagerSink`` (``submit``) or None; ``actions``: an action sink (``offer``) or None;
    ``max_request_size``: the producer's, which every dead letter is made to fit (models/wire/deadletter.py)."""

    alerts: Any
    deadletters: Any
    alertmanager: Any = None
    actions: Any = None
    max_request_size: int = 1_000_000

    async def write(self, out: Outputs) -> None:
        await self.write_alerts(out.alerts)
        for dead in out.deadletters:
            key = dead.message.key
            if key is not None and len(key) > MAX_TEXT:  # a key that alone would not fit: cut (it only partitions)
                key = key[:MAX_TEXT]
            await self.deadletters.send(key=key, value=dead.record(deadletter_budget(self.max_request_size, key)))

    async def write_alerts(self, alerts: list[Alert]) -> None:
        for alert in alerts:
            log.info("alert %s %s %s: %s", alert.status, alert.type, alert.id, alert.summary)
            key = alert.job or (alert.nodes[0] if alert.nodes else "")  # node alerts have no job
            await self.alerts.send(key=key.encode(), value=alert.to_json())
            if self.alertmanager is not None:
                self.alertmanager.submit(alert)
            if self.actions is not None:
                self.actions.offer(alert)
