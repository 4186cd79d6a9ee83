"""The worker's side of the feedback topic: verdicts on alerts in /metrics and in Alertmanager's summary, and
``POST /alerts/<id>/feedback`` on the web port.

Every worker reads the whole compacted ``<prefix>feedback`` topic (no consumer group, as the config topic)
and keeps the verdict that counts per alert id (a person's beats an automatic one; a tombstone takes it
back: stepwatch/feedback.py ``latest``), bounded to ``MAX_ALERTS`` ids (the oldest forgotten first).

* ``stepwatch_alert_feedback_total{type,verdict}``: the verdicts in force, per alert type and verdict (every
  worker reports the same numbers: aggregate with ``max``, not ``sum``). A changed verdict moves from one
  series to the other.
* When a rule's precision on this fleet is low with enough verdicts to say so (``alertmanager.low_precision``,
  ``alertmanager.low_precision_min_feedback``; stepwatch/precision.py ``low_precision``), the alert as sent to
  Alertmanager says so in its summary and a ``precision`` annotation. The alerts-topic record is left as it is
  (replay stays byte-identical).
* A record that is not feedback is counted (``stepwatch_alert_feedback_refused_total``) and logged with its
  coordinates, never applied.

``POST /alerts/<id>/feedback`` (guarded like every page but /health and /metrics: streams/web_auth.py) takes
``{"verdict": "confirmed"|"false"|"duplicate", "note"?: str, "by"?: str, "type"?: str}`` (JSON, or a form) and
writes the record to the topic, keyed by the alert id. The alert's type and job come from the alert when this
worker has it open; otherwise the body must name a known alert type (the dashboard does), else 404.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

import orjson

from stepwatch.models.alert_types import ALERT_TYPES
from stepwatch.models.wire.feedback import HUMAN_VERDICTS, MAX_FIELD, MAX_NOTE, Feedback, Verdict
from stepwatch.precision import low_precision, wilson

from .component import Send

log = logging.getLogger("stepwatch.worker")

#: Alert ids whose verdict the feed keeps at most (a verdict is a few dozen bytes).
MAX_ALERTS = 100_000
#: The ``type`` label of a verdict whose type is unknown or not one of ours (bounded cardinality).
OTHER = "other"


class FeedbackFeed:
    """The verdicts in force, per alert id, and their counts per (type, verdict)."""

    def __init__(self, *, low: float = 0.5, min_feedback: int = 20, max_alerts: int = MAX_ALERTS) -> None:
        self.low, self.min_feedback, self.max_alerts = low, min_feedback, max_alerts
        self.verdicts: dict[str, Feedback] = {}
        self.counts: dict[tuple[str, Verdict], int] = {}
        self.refused = 0

    @staticmethod
    def label(kind: str | None) -> str:
        return kind if kind in ALERT_TYPES else OTHER

    def _count(self, record: Feedback, step: int) -> None:
        key = (self.label(record.type), record.verdict)
        self.counts[key] = self.counts.get(key, 0) + step
        if not self.counts[key]:
            del self.counts[key]

    def apply(self, record: Feedback | str) -> None:
        """One verdict (or the alert id of a tombstone), in topic order."""
        ident = record if isinstance(record, str) else record.alert_id
        held = self.verdicts.get(ident)
        if not isinstance(record, str) and held is not None and record.automatic and not held.automatic:
            return  # a person's verdict is not replaced by the machine's
        if held is not None:
            self._count(held, -1)
            del self.verdicts[ident]
        if isinstance(record, str):
            return
        self.verdicts[ident] = record  # (re)inserted last: the bound forgets the least recently judged
        self._count(record, +1)
        while len(self.verdicts) > self.max_alerts:
            oldest = next(iter(self.verdicts))
            self._count(self.verdicts.pop(oldest), -1)

    def apply_record(self, key: bytes | None, value: bytes | None, where: str = "") -> None:
        """A Kafka record of the feedback topic; one that is not feedback is counted and logged, not applied."""
        if value is None:
            if key:
                self.apply(key.decode(errors="replace"))
            return
        try:
            record = Feedback.from_json(value)
        except ValueError as exc:
            self.refused += 1
            log.warning("feedback record %s refused: %s", where, exc)
            return
        self.apply(record)

    def note(self, alert_type: str) -> str | None:
        """The sentence an alert of ``alert_type`` carries when its rule's precision on this fleet is low."""
        kind = self.label(alert_type)
        confirmed = self.counts.get((kind, Verdict.CONFIRMED), 0)
        false = self.counts.get((kind, Verdict.FALSE), 0)
        if not low_precision(confirmed, false, threshold=self.low, min_feedback=self.min_feedback):
            return None
        low, high = wilson(confirmed, confirmed + false)
        return (f"Low precision on this fleet: {confirmed} of {confirmed + false} {alert_type} alerts judged were "
                f"confirmed ({confirmed / (confirmed + false):.0%}, 95% interval {low:.0%}-{high:.0%}).")

    def collect(self):
        """The Prometheus collector's families (registered on the worker's registry)."""
        from prometheus_client.core import CounterMetricFamily

        family = CounterMetricFamily("stepwatch_alert_feedback", "Verdicts on alerts in force (the latest per alert "
                                     "id, from the feedback topic), by alert type and verdict.",
                                     labels=["type", "verdict"])
        for (kind, verdict), n in sorted(self.counts.items()):
            family.add_metric([kind, str(verdict)], n)
        yield family
        refused = CounterMetricFamily("stepwatch_alert_feedback_refused", "Feedback-topic records that were not "
                                      "feedback (not applied).")
        refused.add_metric([], self.refused)
        yield refused

    def describe(self):
        return []


def parse_request(body: bytes, content_type: str) -> dict[str, str]:
    """The POST's fields (JSON object or a urlencoded form); ValueError with a one-line reason."""
    if "json" in content_type:
        try:
            data = orjson.loads(body or b"{}")
        except orjson.JSONDecodeError:
            raise ValueError("the body is not JSON") from None
        if not isinstance(data, dict):
            raise ValueError("the body must be a JSON object")
    else:
        from urllib.parse import parse_qsl

        data = dict(parse_qsl(body.decode(errors="replace")))
    return {k: v for k, v in data.items() if isinstance(v, str)}


def make_record(alert_id: str, fields: dict[str, str], known: tuple[str, str] | None, *, now: float) -> Feedback:
    """The record a POST asks for; ``known``: (type, job) of the alert when this worker has it. ValueError (400)
    for a bad verdict or field, LookupError (404) for an alert it cannot place."""
    if not alert_id or len(alert_id) > MAX_FIELD:
        raise ValueError(f"the alert id must be 1 to {MAX_FIELD} characters")
    verdict = fields.get("verdict", "")
    if verdict not in {v.value for v in HUMAN_VERDICTS}:
        raise ValueError(f"unknown verdict {verdict!r}: expected confirmed, false or duplicate")
    if known is None:
        kind = fields.get("type", "")
        if kind not in ALERT_TYPES:
            raise LookupError(f"no alert {alert_id} open on this worker (name its type to record it anyway, or use "
                              "'stepwatch feedback')")
        known = (kind, fields.get("job", ""))
    by = (fields.get("by") or "web").strip()[:MAX_FIELD] or "web"
    job = known[1][:MAX_FIELD] or None
    return Feedback(alert_id=alert_id, verdict=Verdict(verdict), by=by, at=now, note=fields.get("note", "")[:MAX_NOTE],
                    type=known[0], job=job)


class FeedbackRoad:
    """The worker's component (streams/component.py) for the feedback topic: a reader task (every record into
    ``feed``, ``on_record``) and, with a web port, the POST page (``post``: one verdict written to the topic).

    ``registry``: where the feed's metrics go; ``sink``: the Alertmanager sink (its low-precision sentence);
    ``lookup(alert_id)``: the open alert of that id, or None; ``send``: one record to a topic, awaited until
    written (default: the app's producer, at ``attach``).
    """

    def __init__(self, settings, registry=None, *, sink=None, lookup: Callable[[str], object] | None = None,
                 send: Send | None = None) -> None:
        am, kafka = settings.alertmanager, settings.kafka
        self.settings, self._lookup, self._send = settings, lookup, send
        self.feed = FeedbackFeed(low=am.low_precision, min_feedback=am.low_precision_min_feedback)
        if registry is not None:
            registry.register(self.feed)
        if sink is not None:
            sink.precision_note = self.feed.note
        self.topic = kafka.topic(kafka.feedback_topic)

    def attach(self, app) -> None:
        if self._send is None:
            topic = app.topic(self.topic, value_serializer="raw", key_serializer="raw")

            async def send(_: str, key: bytes, value: bytes | None) -> None:  # awaited until written: 503 if not
                await (await topic.send(key=key, value=value))

            self._send = send
        app.task(self.read)
        if self.settings.worker.web_port > 0:
            _install_page(app, self.post)

    def on_record(self, record) -> None:
        """One record of the topic (``key``, ``value``, ``partition``, ``offset``)."""
        self.feed.apply_record(record.key, record.value, f"partition {record.partition} offset {record.offset}")

    async def read(self) -> None:
        from .topic_reader import read_topic_forever

        await read_topic_forever(self.settings, self.topic, self.on_record, what="feedback reader")

    async def post(self, alert_id: str, body: bytes, content_type: str) -> tuple[int, dict]:
        """``POST /alerts/<alert_id>/feedback``: (HTTP status, JSON body); 201 once the record is written."""
        alert = self._lookup(alert_id) if self._lookup is not None else None
        known = (str(alert.type), alert.job) if alert is not None else None
        try:
            record = make_record(alert_id, parse_request(body, content_type), known, now=time.time())
        except LookupError as exc:
            return 404, {"error": str(exc)}
        except ValueError as exc:
            return 400, {"error": str(exc)}
        try:
            await self._send(self.topic, alert_id.encode(), record.to_json())
        except Exception as exc:  # the broker refused or is away: say so, the verdict is not recorded
            log.warning("feedback on %s not written: %r", alert_id, exc)
            return 503, {"error": f"the verdict was not recorded: {exc!r}"}
        return 201, orjson.loads(record.to_json())


def _install_page(app, post: Callable[[str, bytes, str], Awaitable[tuple[int, dict]]]) -> None:
    from faust.web import View

    @app.page("/alerts/{alert_id}/feedback")
    class AlertFeedback(View):
        async def post(self, request, alert_id):
            status, body = await post(alert_id, await request.read(), request.headers.get("Content-Type", ""))
            return self.json(body, status=status)
