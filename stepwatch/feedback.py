"""Verdicts on alerts: writing and reading the compacted feedback topic, and its JSON Lines export.

``stepwatch feedback`` and the worker's ``POST /alerts/<id>/feedback`` write one record
(models/wire/feedback.py) keyed by the alert id; the topic is compacted, so the latest verdict on an
alert is the one that counts, and a tombstone (null value) takes a verdict back. ``stepwatch report``
(precision per rule), ``stepwatch report --shadow`` and ``stepwatch backtest --labels`` read them
through :func:`read_feedback` / :func:`latest`.

>>> from stepwatch.models.wire.feedback import Feedback, Verdict
>>> a = Feedback(alert_id="a1", verdict=Verdict.TRANSIENT, by="stepwatch", at=5.0, automatic=True)
>>> b = Feedback(alert_id="a1", verdict=Verdict.FALSE, by="bob", at=1.0)
>>> latest([a, b])["a1"].verdict  # a person's word beats the machine's, whenever said
<Verdict.FALSE: 'false'>
"""

from __future__ import annotations

import getpass
import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from stepwatch.models.wire.feedback import MAX_FIELD, Feedback

#: Alerts read back per alerts-topic partition to check that an alert id exists (and learn its type).
LOOKUP_LOOKBACK = 5000


def principal(settings) -> str:
    """Who is speaking: the Kafka principal when SASL names one, else the local user."""
    name = (settings.security.sasl_username or "").strip()
    if not name:
        try:
            name = getpass.getuser()
        except (KeyError, OSError):  # no passwd entry (a container's random uid)
            name = os.environ.get("USER", "") or "unknown"
    return name[:MAX_FIELD]


def write_feedback(settings, record: Feedback, *, timeout: float = 10.0) -> None:
    """Send ``record`` to the feedback topic (keyed by its alert id) and wait for the broker's ack.
    A refused write (no ACL) raises the Kafka client's error."""
    from kafka import KafkaProducer

    from stepwatch.security import client_config

    kafka = settings.kafka
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap, acks="all", max_block_ms=int(timeout * 1000),
                             **client_config(settings))
    try:
        producer.send(kafka.topic(kafka.feedback_topic), key=record.alert_id.encode(),
                      value=record.to_json()).get(timeout=timeout)
    finally:
        producer.close(timeout=timeout)


def read_all(settings, topic: str, *, timeout: float) -> Iterator[Any]:
    """Every record of ``topic`` from its beginning to its end as of now (no consumer group)."""
    from kafka import KafkaConsumer, TopicPartition

    from stepwatch.security import client_config

    consumer = KafkaConsumer(bootstrap_servers=settings.kafka.bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", **client_config(settings))
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        if not tps:
            return
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        end = consumer.end_offsets(tps)
        deadline = time.monotonic() + timeout
        while any(consumer.position(tp) < end[tp] for tp in tps) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                yield from records
    finally:
        consumer.close()


def iter_feedback(settings, *, timeout: float = 10.0, refused: list[str] | None = None) -> Iterator[Feedback | str]:
    """The feedback topic's records in order: a ``Feedback``, or the alert id of a tombstone (a verdict taken
    back). A record that is not one is skipped, its reason appended to ``refused`` (never silently)."""
    kafka = settings.kafka
    for record in read_all(settings, kafka.topic(kafka.feedback_topic), timeout=timeout):
        if record.value is None:
            if record.key:
                yield record.key.decode(errors="replace")
            continue
        try:
            yield Feedback.from_json(record.value)
        except ValueError as exc:
            if refused is not None:
                refused.append(f"partition {record.partition} offset {record.offset}: {exc}")


def read_jsonl(path: str, *, refused: list[str] | None = None) -> Iterator[Feedback]:
    """Feedback records from a JSON Lines file (``stepwatch feedback --export`` output; ``-``: stdin)."""
    stream = sys.stdin.buffer if path == "-" else open(path, "rb")
    try:
        for number, line in enumerate(stream, 1):
            line = line.strip()
            if not line:
                continue
            try:
                yield Feedback.from_json(line)
            except ValueError as exc:
                if refused is not None:
                    refused.append(f"{path}:{number}: {exc}")
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()


def latest(records: Iterable[Feedback | str]) -> dict[str, Feedback]:
    """The verdict that counts per alert id: the last one read, except that a person's verdict is never
    replaced by an automatic one; a bare alert id (a tombstone) takes the alert's verdict back."""
    out: dict[str, Feedback] = {}
    for record in records:
        if isinstance(record, str):
            out.pop(record, None)
            continue
        held = out.get(record.alert_id)
        if held is not None and record.automatic and not held.automatic:
            continue
        out[record.alert_id] = record
    return out


def read_feedback(settings=None, *, path: str | None = None, since: float | None = None,
                  refused: list[str] | None = None, timeout: float = 10.0) -> dict[str, "Feedback"]:
    """Alert id -> the verdict that counts, from the feedback topic of ``settings`` or the export ``path``;
    ``since`` (Unix seconds): only verdicts said at or after it. The call ``stepwatch report`` (and its
    ``--shadow`` comparison) makes."""
    records = read_jsonl(path, refused=refused) if path else iter_feedback(settings, timeout=timeout,
                                                                            refused=refused)
    out = latest(records)
    if since is not None:
        out = {k: v for k, v in out.items() if v.at >= since}
    return out


def find_alert(settings, alert_id: str, *, lookback: int = LOOKUP_LOOKBACK, timeout: float = 10.0) -> dict | None:
    """The newest record of ``alert_id`` among the last ``lookback`` alerts of each alerts-topic partition
    (a cheap check that the id exists, and its type and job); None when not among them."""
    from kafka import KafkaConsumer, TopicPartition

    from stepwatch.security import client_config

    kafka = settings.kafka
    topic = kafka.topic(kafka.alerts_topic)
    consumer = KafkaConsumer(bootstrap_servers=kafka.bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", **client_config(settings))
    found = None
    needle = alert_id.encode()
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        if not tps:
            return None
        consumer.assign(tps)
        end = consumer.end_offsets(tps)
        begin = consumer.beginning_offsets(tps)
        for tp in tps:
            consumer.seek(tp, max(begin[tp], end[tp] - lookback))
        deadline = time.monotonic() + timeout
        while any(consumer.position(tp) < end[tp] for tp in tps) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                for record in records:
                    if record.value is None or needle not in record.value:  # skip parsing the others
                        continue
                    try:
                        obj = orjson.loads(record.value)
                    except orjson.JSONDecodeError:
                        continue
                    if isinstance(obj, dict) and obj.get("id") == alert_id:
                        found = obj
    finally:
        consumer.close()
    return found
