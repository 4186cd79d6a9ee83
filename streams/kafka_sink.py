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

log = logging.getLogger("stepwatch.worker")


@dataclass(slots=True)
class KafkaSink:
    """``alerts`` and ``deadletters``: Faust topics (``send(key=, value=)``, awaited); ``alertmanager``: an
    ``AlertmanagerSink`` (``submit``) or None; ``actions``: an action sink (``offer``) or None."""

    alerts: Any
    deadletters: Any
    alertmanager: Any = None
    actions: Any = None

    async def write(self, out: Outputs) -> None:
        await self.write_alerts(out.alerts)
        for dead in out.deadletters:
            await self.deadletters.send(key=dead.message.key, value=dead.record())

    async def write_alerts(self, alerts: list[Alert]) -> None:
        for alert in alerts:
            log.info("alert %s %s %s: %s", alert.status, alert.type, alert.id, alert.summary)
            key = alert.job or (alert.nodes[0] if alert.nodes else "")  # node alerts have no job
            await self.alerts.send(key=key.encode(), value=alert.to_json())
            if self.alertmanager is not None:
                self.alertmanager.submit(alert)
            if self.actions is not None:
                self.actions.offer(alert)
