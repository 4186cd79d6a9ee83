"""``stepwatch alerts``: follow the alerts topic, filter, print a table or JSON."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

import orjson

if TYPE_CHECKING:
    from stepwatch.config import Settings

from stepwatch.commands.alerts_table import ALERT_COLUMNS, alert_table_header, alert_table_row  # noqa: F401
from stepwatch.commands.common import _add_kafka_args, _require_bootstrap, _settings, json_line
from stepwatch.commands.incidents import IncidentLines
from stepwatch.models.alert_types import ALERT_TYPES


#: How long ``--timeout`` waits at most for the alerts topic's partitions before its quiet clock starts.
ASSIGNMENT_WAIT_SECONDS = 30.0


def follow_batches(settings: Settings, *, from_beginning: bool,
                   timeout: float | None) -> Iterator[list[tuple[dict, float]]]:
    """The alerts of each poll of the topic, each with the time it was published (the Kafka record's
    timestamp, seconds); ends after ``timeout`` seconds without a new alert (None: never)."""
    import time

    from kafka import KafkaConsumer

    from stepwatch.security import client_config

    consumer = KafkaConsumer(
        settings.kafka.topic(settings.kafka.alerts_topic),
        bootstrap_servers=settings.kafka.bootstrap,
        auto_offset_reset="earliest" if from_beginning else "latest",
        enable_auto_commit=False,
        group_id=None,
        **client_config(settings),
    )
    try:
        # The quiet clock starts once the topic's partitions are assigned: on a busy machine joining can
        # take longer than a short --timeout, which would end the command before it read anything. The
        # wait for the assignment has its own bound (a missing topic never assigns).
        started = quiet_since = time.monotonic()
        assigned = False
        while timeout is None or time.monotonic() - quiet_since < timeout or (
                not assigned and time.monotonic() - started < max(timeout, ASSIGNMENT_WAIT_SECONDS)):
            batch = []
            polled = consumer.poll(timeout_ms=500)
            if not assigned and consumer.assignment():
                assigned, quiet_since = True, time.monotonic()
            for records in polled.values():
                for record in records:
                    try:
                        alert = orjson.loads(record.value)
                    except orjson.JSONDecodeError:
                        alert = None
                    if not isinstance(alert, dict):
                        print(f"stepwatch alerts: skipped a message that is not a JSON alert at offset "
                              f"{record.offset}", file=sys.stderr)
                        continue
                    batch.append((alert, record.timestamp / 1000.0))
            if batch:
                quiet_since = time.monotonic()
                yield batch
    finally:
        consumer.close()


def follow_records(settings: Settings, *, from_beginning: bool, timeout: float | None) -> Iterator[tuple[dict, float]]:
    """Each alert on the topic with the time it was published."""
    for batch in follow_batches(settings, from_beginning=from_beginning, timeout=timeout):
        yield from batch


def follow_alerts(settings: Settings, *, from_beginning: bool, timeout: float | None) -> Iterator[dict]:
    for alert, _published in follow_records(settings, from_beginning=from_beginning, timeout=timeout):
        yield alert


def alert_matches(alert: dict, *, jobs: list[str] | None = None, types: list[str] | None = None,
                  statuses: list[str] | None = None) -> bool:
    """The ``stepwatch alerts`` filters; each given list matches any of its values."""
    return ((not jobs or alert.get("job") in jobs) and (not types or alert.get("type") in types)
            and (not statuses or alert.get("status") in statuses))


def table_width(args: argparse.Namespace) -> int | None:
    """The terminal's width for the table; None (whole lines) with --wide, or when stdout is a file or pipe and
    COLUMNS is not set (a script gets every character)."""
    import os
    import shutil

    if args.wide or not (sys.stdout.isatty() or os.environ.get("COLUMNS")):
        return None
    return shutil.get_terminal_size().columns


def run(args: argparse.Namespace) -> int:
    settings = _settings(args)
    _require_bootstrap(settings)
    header = False
    incidents = IncidentLines(width=table_width(args))
    kafka = settings.kafka
    print(f"stepwatch alerts: waiting for alerts on {kafka.topic(kafka.alerts_topic)} at {kafka.bootstrap}"
          + (" (from the oldest kept)" if args.from_beginning else "") + " (Ctrl-C to stop)", file=sys.stderr,
          flush=True)
    try:
        for batch in follow_batches(settings, from_beginning=args.from_beginning, timeout=args.timeout):
            for alert, published in batch:
                if not alert_matches(alert, jobs=args.job, types=args.type, statuses=args.status):
                    continue
                if args.json:
                    print(json_line(alert), flush=True)
                else:
                    incidents.add(alert, published)
            for line in incidents.flush():
                if not header:
                    print(alert_table_header(), flush=True)
                    header = True
                print(line, flush=True)
    except KeyboardInterrupt:
        sys.stdout.flush()
        return 130  # stopped by Ctrl-C (stepwatch/cli.py INTERRUPTED)
    if args.timeout is not None:
        print(f"stepwatch alerts: timed out: no new alert for {args.timeout:g} s (--timeout)", file=sys.stderr)
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("alerts", help="follow the alerts topic and print alerts (a table, or JSON)",
                       description="Follow the alerts topic. The table has one line per incident update (a "
                                   "republished alert whose state did not change prints nothing): when it was "
                                   "published, status, severity, type, job, node (and port or GPU), ranks, the "
                                   "summary and the recommended action (in a terminal: cut to its width, the "
                                   "action to its first sentence; --wide for all of it); control characters "
                                   "are escaped.")
    _add_kafka_args(p)
    p.add_argument("--json", action="store_true", help="print raw JSON, one alert per line (everything)")
    p.add_argument("--wide", action="store_true", help="whole lines: the full summary and action, however wide "
                                                       "(default in a terminal: cut to its width)")
    p.add_argument("--from-beginning", action="store_true", help="start at the oldest alert kept")
    p.add_argument("--timeout", type=float, help="stop after this many seconds without a new alert (counted once the alerts topic is joined)")
    p.add_argument("--job", action="append", metavar="JOB", help="only this job's alerts; repeatable")
    p.add_argument("--type", action="append", choices=ALERT_TYPES, metavar="TYPE",
                   help=f"only alerts of this type ({', '.join(ALERT_TYPES)}); repeatable")
    p.add_argument("--status", action="append", choices=["firing", "resolved"],
                   help="only firing or resolved alerts; repeatable")
    p.set_defaults(func=run)
