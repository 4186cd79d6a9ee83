"""``stepwatch actions release ALERT_ID``: a human lets a drain held by the drain budget through."""

from __future__ import annotations

import argparse
import getpass
import logging

from stepwatch.commands.common import _add_kafka_args, _require_bootstrap, _settings


def run(args: argparse.Namespace) -> int:
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    from stepwatch.models.oncall.budget import release_record
    from stepwatch.security import client_config
    from stepwatch.topics import create_topics

    value = release_record(args.alert_id, by=args.by)  # a bad id: one line, before any broker is asked
    settings = _settings(args)
    _require_bootstrap(settings)
    kafka = settings.kafka
    topic = kafka.topic(settings.oncall.releases_topic)
    security = client_config(settings)
    try:  # the workers create it too; an operator may lack the right to (stepwatch/acls.py)
        create_topics(kafka.bootstrap, [], 1, replication_factor=kafka.replication_factor, compacted=[topic],
                      timeout=10, client_config=security)
    except KafkaError as exc:
        logging.getLogger("stepwatch.actions").info("could not create %s: %s", topic, exc)
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap, acks="all", **security)
    try:
        producer.send(topic, key=args.alert_id.encode(), value=value).get(timeout=30)
    finally:
        producer.close()
    print(f"stepwatch actions: released {args.alert_id} (the worker holding it publishes its drain at its next tick)")
    return 0


def release_record_of(args: argparse.Namespace) -> bytes:
    from stepwatch.models.oncall.budget import release_record

    return release_record(args.alert_id, by=args.by)


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (a container): the release still counts, unnamed
        return ""


def add_parser(sub) -> None:
    p = sub.add_parser("actions", help="automated actions: release a drain held by the drain budget",
                       description="Drains beyond the drain budget are held for a human (action "
                                   "hold_for_human, one action_budget alert lists them); release one here.")
    asub = p.add_subparsers(dest="actions_command", metavar="ACTION", required=True)
    r = asub.add_parser("release", help="let one held drain through (counted in the budget)")
    r.add_argument("alert_id", metavar="ALERT_ID", help="the held alert's id (the action_budget alert lists them)")
    r.add_argument("--by", default=_user(), help="who releases it (default: your user name), kept in the alert")
    _add_kafka_args(r)
    r.set_defaults(func=run, precheck=lambda a: release_record_of(a))
