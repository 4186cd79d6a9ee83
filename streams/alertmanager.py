"""Optional delivery of alerts to Prometheus Alertmanager (``POST /api/v2/alerts``).

The alerts topic stays the primary output; this sink is a convenience for teams that route
with Alertmanager. It never blocks detection: the worker ``submit``s each alert to a bounded
queue (the oldest waiting update is dropped when it is full) and a separate asyncio task
posts them, retrying failures with exponential backoff. Like Prometheus, it re-sends every
firing alert each ``resend_interval`` with ``endsAt`` a few intervals ahead (so the alert
expires in Alertmanager if the worker goes away) and sends ``endsAt`` = the resolution time
when the alert resolves.

Labels are the alert's own (``alertname``, ``job``, ``severity``, ``source``) plus
``alert_id``, so that two open alerts of one job (two straggling ranks) stay two alerts in
Alertmanager. When an alert's severity changes (hang: warning -> critical) the old label set
is ended at once.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from datetime import datetime, timezone
from collections.abc import Callable
from typing import Any

import orjson

from stepwatch.models.alert_types import AlertStatus
from stepwatch.config import AlertmanagerSettings
from stepwatch.models.alerts import Alert

log = logging.getLogger("stepwatch.alertmanager")

#: A firing alert's endsAt is this many resend intervals ahead.
EXPIRY_INTERVALS = 4
MAX_EVIDENCE_CHARS = 4000


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def am_labels(alert: Alert) -> dict[str, str]:
    return {**alert.labels, "alert_id": alert.id}


def am_alert(alert: Alert, *, now: float, resend_interval: float, generator_url: str = "",
             precision_note: str | None = None) -> dict[str, Any]:
    """One alert in Alertmanager's v2 API form; ``precision_note``: the sentence saying its rule's precision on
    this fleet is low (streams/feedback_feed.py), added here only, never to the alerts-topic record."""
    annotations = {k: v for k, v in alert.annotations.items() if v}
    if precision_note:
        annotations["summary"] = f"{annotations.get('summary', '')} {precision_note}".strip()
        annotations["precision"] = precision_note
    if alert.evidence:
        evidence = orjson.dumps(alert.evidence, default=str).decode()
        annotations["evidence"] = evidence[:MAX_EVIDENCE_CHARS]
    if alert.status == AlertStatus.RESOLVED:
        ends = alert.ends_at if alert.ends_at is not None else now
    else:
        ends = now + EXPIRY_INTERVALS * resend_interval
    out: dict[str, Any] = {
        "labels": am_labels(alert),
        "annotations": annotations,
        "startsAt": rfc3339(alert.starts_at),
        "endsAt": rfc3339(max(ends, alert.starts_at)),
    }
    if generator_url:
        out["generatorURL"] = generator_url
    return out


class AlertmanagerSink:
    """Bounded queue + one posting task; ``submit`` from the worker, ``run`` as an asyncio task."""

    def __init__(self, settings: AlertmanagerSettings, *, metrics=None, generator_url: str = "",
                 clock=time.time) -> None:
        if not settings.url:
            raise ValueError("no Alertmanager URL configured")
        self.settings = settings
        self.endpoint = settings.url.rstrip("/") + "/api/v2/alerts"
        self.metrics = metrics
        self.generator_url = generator_url.rstrip("/")
        self.clock = clock
        self.queue: asyncio.Queue[Alert] = asyncio.Queue(maxsize=max(1, settings.queue_size))
        self.firing: dict[str, Alert] = {}
        self._labels: dict[str, dict[str, str]] = {}  # id -> label set last sent
        self.posts_ok = 0
        self.dropped = 0
        #: alert type -> the low-precision sentence or None (set by streams/feedback_feed.py).
        self.precision_note: Callable[[str], str | None] | None = None

    # -- producer side (the worker; never waits) -------------------------------------------------

    def submit(self, alert: Alert) -> None:
        try:
            self.queue.put_nowait(alert)
        except asyncio.QueueFull:
            try:
                self.queue.get_nowait()  # the oldest waiting update goes
            except asyncio.QueueEmpty:
                pass
            self.dropped += 1
            if self.metrics is not None:
                self.metrics.alertmanager_dropped.inc()
            self.queue.put_nowait(alert)

    # -- the posting task -----------------------------------------------------------------------

    def attach(self, app) -> None:
        """Run as an app task that never dies (a component of the worker, streams/component.py)."""
        from .supervise import run_forever

        async def alertmanager_sink() -> None:
            await run_forever(self.run, what="Alertmanager sink", log=logging.getLogger("stepwatch.worker"))

        app.task(alertmanager_sink)

    async def run(self) -> None:
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=self.settings.timeout)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            next_resend = time.monotonic() + self.settings.resend_interval
            while True:
                wait = max(0.0, next_resend - time.monotonic())
                try:
                    first = await asyncio.wait_for(self.queue.get(), timeout=wait)
                except asyncio.TimeoutError:
                    if self.firing:
                        now = self.clock()
                        await self._post(session, [self._payload(a, now) for a in self.firing.values()])
                    next_resend = time.monotonic() + self.settings.resend_interval
                    continue
                batch = [first]
                while not self.queue.empty() and len(batch) < 500:
                    batch.append(self.queue.get_nowait())
                await self._post(session, self._updates(batch))

    def _payload(self, alert: Alert, now: float) -> dict[str, Any]:
        url = f"{self.generator_url}/dashboard/{alert.job}" if self.generator_url else ""
        note = self.precision_note(str(alert.type)) if self.precision_note is not None else None
        return am_alert(alert, now=now, resend_interval=self.settings.resend_interval, generator_url=url,
                        precision_note=note)

    def _updates(self, batch: list[Alert]) -> list[dict[str, Any]]:
        now = self.clock()
        out = []
        for alert in batch:
            labels = am_labels(alert)
            old = self._labels.get(alert.id)
            if old is not None and old != labels:
                # Same alert, new severity: end the old label set now, or it would linger.
                out.append({"labels": old, "annotations": {"summary": "superseded"},
                            "startsAt": rfc3339(alert.starts_at), "endsAt": rfc3339(max(now, alert.starts_at))})
            if alert.status == AlertStatus.FIRING:
                self.firing[alert.id] = alert
                self._labels[alert.id] = labels
            else:
                self.firing.pop(alert.id, None)
                self._labels.pop(alert.id, None)
            out.append(self._payload(alert, now))
        return out

    async def _post(self, session, payload: list[dict[str, Any]]) -> bool:
        import aiohttp

        s = self.settings
        body = orjson.dumps(payload)
        for attempt in range(max(1, s.max_attempts)):
            try:
                async with session.post(self.endpoint, data=body,
                                        headers={"Content-Type": "application/json"}) as response:
                    if 200 <= response.status < 300:
                        self.posts_ok += 1
                        self._count("ok")
                        return True
                    text = (await response.text())[:300]
                    if 400 <= response.status < 500 and response.status not in (408, 429):
                        log.error("Alertmanager rejected %d alerts: HTTP %d %s", len(payload), response.status,
                                  text)
                        self._count("failed")
                        return False
                    reason = f"HTTP {response.status} {text}"
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                reason = repr(exc)
            if attempt + 1 >= s.max_attempts:
                break
            delay = min(s.backoff_max, s.backoff_initial * 2 ** attempt) * random.uniform(0.8, 1.2)
            log.warning("Alertmanager POST failed (%s); retry %d in %.1f s", reason, attempt + 1, delay)
            self._count("retry")
            await asyncio.sleep(delay)
        log.error("Alertmanager POST of %d alerts failed after %d attempts: %s", len(payload), s.max_attempts,
                  reason)
        self._count("failed")
        return False

    def _count(self, result: str) -> None:
        if self.metrics is not None:
            self.metrics.alertmanager_posts.labels(result).inc()
