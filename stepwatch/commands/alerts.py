"""``stepwatch alerts``: follow the alerts topic, filter, print a table or JSON."""

from __future__ import annotations

import argparse
import sys
from collections import OrderedDict
from collections.abc import Iterator
from typing import TYPE_CHECKING

import orjson

if TYPE_CHECKING:
    from stepwatch.config import Settings

from stepwatch.commands.common import _add_kafka_args, _cut, _require_bootstrap, _settings, json_line, printable
from stepwatch.models.alert_types import ALERT_TYPES


def follow_records(settings: Settings, *, from_beginning: bool, timeout: float | None) -> Iterator[tuple[dict, float]]:
    """Each alert on the topic with the time it was published (the Kafka record's timestamp, seconds)."""
    from kafka import KafkaConsumer

    from stepwatch.security import client_config

    consumer = KafkaConsumer(
        settings.kafka.topic(settings.kafka.alerts_topic),
        bootstrap_servers=settings.kafka.bootstrap,
        auto_offset_reset="earliest" if from_beginning else "latest",
        enable_auto_commit=False,
        group_id=None,
        consumer_timeout_ms=int(timeout * 1000) if timeout else float("inf"),
        **client_config(settings),
    )
    try:
        for record in consumer:
            try:
                alert = orjson.loads(record.value)
            except orjson.JSONDecodeError:
                alert = None
            if not isinstance(alert, dict):
                print(f"stepwatch alerts: skipped a message that is not a JSON alert at offset {record.offset}",
                      file=sys.stderr)
                continue
            yield alert, record.timestamp / 1000.0
    finally:
        consumer.close()


def follow_alerts(settings: Settings, *, from_beginning: bool, timeout: float | None) -> Iterator[dict]:
    for alert, _published in follow_records(settings, from_beginning=from_beginning, timeout=timeout):
        yield alert


def alert_matches(alert: dict, *, jobs: list[str] | None = None, types: list[str] | None = None,
                  statuses: list[str] | None = None) -> bool:
    """The ``stepwatch alerts`` filters; each given list matches any of its values."""
    return ((not jobs or alert.get("job") in jobs) and (not types or alert.get("type") in types)
            and (not statuses or alert.get("status") in statuses))


#: Fixed-width columns; TYPE fits every type uncut, the action and summary come last, uncut.
ALERT_COLUMNS = (("TIME (UTC)", 20), ("STATUS", 8), ("SEVERITY", 8), ("TYPE", max(map(len, ALERT_TYPES))),
                 ("JOB", 20), ("NODE/PORT", 18), ("RANKS", 12))


#: Never cut (a longer node name pushes the row on): what an SRE acts on.
UNCUT = frozenset({"TYPE", "NODE/PORT"})


def alert_table_header() -> str:
    return "  ".join(f"{name:<{width}}" for name, width in ALERT_COLUMNS) + "  ACTION | SUMMARY"


def _where(alert: dict) -> str:
    """The first node, with a link alert's device/port, and how many more nodes."""
    ev = alert.get("evidence") if isinstance(alert.get("evidence"), dict) else {}
    nodes = [str(n) for n in alert.get("nodes") or () if n] or ([str(ev["node"])] if ev.get("node") else [])
    if not nodes:
        return "-"
    where = nodes[0]
    if ev.get("device") is not None and ev.get("port") is not None:
        where += f" {ev['device']}/{ev['port']}"
    elif ev.get("gpu") is not None:
        where += f" gpu{ev['gpu']}"
    return where + (f" +{len(nodes) - 1}" if len(nodes) > 1 else "")


def alert_table_row(alert: dict, *, published: float | None = None, width: int | None = None) -> str:
    """One readable row: when it was published (else its own start or end), the incident, the action.

    Every cell is escaped (``printable``): names from the wire cannot print a fake line."""
    from stepwatch.models.alerts import _iso

    when = published
    if when is None:
        when = alert.get("ends_at") if alert.get("status") == "resolved" else alert.get("starts_at")
    ranks = ",".join(str(r) for r in alert.get("ranks") or [])
    cells = [_iso(when) if isinstance(when, (int, float)) else "?", str(alert.get("status", "?")).upper(),
             str(alert.get("severity", "?")), str(alert.get("type", "?")), str(alert.get("job") or "-"),
             _where(alert), (ranks if len(ranks) <= 12 else ranks[:11] + "+") or "-"]
    row = "  ".join(f"{(printable(c) if name in UNCUT else _cut(printable(c), w)):<{w}}"
                    for c, (name, w) in zip(cells, ALERT_COLUMNS))
    annotations = alert.get("annotations") if isinstance(alert.get("annotations"), dict) else {}
    action = printable(annotations.get("recommended_action") or "-")
    return f"{row}  {action} | {printable(alert.get('summary', ''))}"


def _update_key(alert: dict) -> tuple:
    """What makes a new update of one incident: republishing the same state prints nothing."""
    annotations = alert.get("annotations") if isinstance(alert.get("annotations"), dict) else {}
    return (alert.get("status"), alert.get("severity"), str(alert.get("ranks")), str(alert.get("nodes")),
            annotations.get("recommended_action"))


#: Incidents remembered for the one-line-per-update rule (oldest forgotten first: bounded memory).
MAX_REMEMBERED = 10_000


def run(args: argparse.Namespace) -> int:
    settings = _settings(args)
    _require_bootstrap(settings)
    header = False
    seen: OrderedDict[str, tuple] = OrderedDict()
    try:
        for alert, published in follow_records(settings, from_beginning=args.from_beginning, timeout=args.timeout):
            if not alert_matches(alert, jobs=args.job, types=args.type, statuses=args.status):
                continue
            if args.json:
                print(json_line(alert), flush=True)
                continue
            ident, key = str(alert.get("id")), _update_key(alert)
            if seen.get(ident) == key:
                continue
            seen[ident] = key
            seen.move_to_end(ident)
            if len(seen) > MAX_REMEMBERED:
                seen.popitem(last=False)
            if not header:
                print(alert_table_header(), flush=True)
                header = True
            print(alert_table_row(alert, published=published), flush=True)
    except KeyboardInterrupt:
        pass
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("alerts", help="follow the alerts topic and print alerts (a table, or JSON)",
                       description="Follow the alerts topic. The table has one line per incident update (a "
                                   "republished alert whose state did not change prints nothing): when it was "
                                   "published, status, severity, type, job, node (and port or GPU), ranks, the "
                                   "recommended action and the summary; control characters are escaped.")
    _add_kafka_args(p)
    p.add_argument("--json", action="store_true", help="print raw JSON, one alert per line")
    p.add_argument("--from-beginning", action="store_true", help="start at the oldest alert kept")
    p.add_argument("--timeout", type=float, help="stop after this many seconds without a new alert")
    p.add_argument("--job", action="append", metavar="JOB", help="only this job's alerts; repeatable")
    p.add_argument("--type", action="append", choices=ALERT_TYPES, metavar="TYPE",
                   help=f"only alerts of this type ({', '.join(ALERT_TYPES)}); repeatable")
    p.add_argument("--status", action="append", choices=["firing", "resolved"],
                   help="only firing or resolved alerts; repeatable")
    p.set_defaults(func=run)
