"""``stepwatch alerts``: follow the alerts topic, filter, print a table or JSON."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator

import orjson

from stepwatch.config import Settings
from stepwatch.commands.common import _add_kafka_args, _cut, _require_bootstrap, _settings


def follow_alerts(settings: Settings, *, from_beginning: bool, timeout: float | None) -> Iterator[dict]:
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
                yield orjson.loads(record.value)
            except orjson.JSONDecodeError:
                print(f"stepwatch alerts: skipped a message that is not JSON at offset {record.offset}",
                      file=sys.stderr)
    finally:
        consumer.close()


def alert_matches(alert: dict, *, jobs: list[str] | None = None, types: list[str] | None = None,
                  statuses: list[str] | None = None) -> bool:
    """The ``stepwatch alerts`` filters; each given list matches any of its values."""
    return ((not jobs or alert.get("job") in jobs) and (not types or alert.get("type") in types)
            and (not statuses or alert.get("status") in statuses))


ALERT_COLUMNS = (("TIME (UTC)", 20), ("STATUS", 8), ("SEVERITY", 8), ("TYPE", 9), ("JOB", 18), ("RANKS", 12))


def alert_table_header() -> str:
    return "  ".join(f"{name:<{width}}" for name, width in ALERT_COLUMNS) + "  SUMMARY"


def alert_table_row(alert: dict, *, width: int | None = None) -> str:
    """One fixed-width row of the readable alerts table (the summary is cut to the terminal width)."""
    from stepwatch.models.alerts import _iso

    when = alert.get("ends_at") if alert.get("status") == "resolved" else alert.get("starts_at")
    ranks = ",".join(str(r) for r in alert.get("ranks") or [])
    cells = [_iso(when) if isinstance(when, (int, float)) else "?", str(alert.get("status", "?")).upper(),
             str(alert.get("severity", "?")), str(alert.get("type", "?")), str(alert.get("job", "?")),
             ranks if len(ranks) <= 12 else ranks[:11] + "+"]
    row = "  ".join(f"{_cut(c, w):<{w}}" for c, (_, w) in zip(cells, ALERT_COLUMNS))
    summary = str(alert.get("summary", ""))
    if width:
        summary = _cut(summary, max(20, width - len(row) - 2))
    return f"{row}  {summary}"


def run(args: argparse.Namespace) -> int:
    import shutil

    settings = _settings(args)
    _require_bootstrap(settings)
    width = shutil.get_terminal_size((160, 24)).columns if sys.stdout.isatty() else None
    header = False
    try:
        for alert in follow_alerts(settings, from_beginning=args.from_beginning, timeout=args.timeout):
            if not alert_matches(alert, jobs=args.job, types=args.type, statuses=args.status):
                continue
            if args.json:
                print(orjson.dumps(alert).decode(), flush=True)
                continue
            if not header:
                print(alert_table_header(), flush=True)
                header = True
            print(alert_table_row(alert, width=width), flush=True)
    except KeyboardInterrupt:
        pass
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("alerts", help="follow the alerts topic and print alerts (a table, or JSON)")
    _add_kafka_args(p)
    p.add_argument("--json", action="store_true", help="print raw JSON, one alert per line")
    p.add_argument("--from-beginning", action="store_true", help="start at the oldest alert kept")
    p.add_argument("--timeout", type=float, help="stop after this many seconds without a new alert")
    p.add_argument("--job", action="append", metavar="JOB", help="only this job's alerts; repeatable")
    p.add_argument("--type", action="append", help="only alerts of this type (straggler, hang, throughput_drop, "
                                                   "comm_slowdown, checkpoint_stale, gpu_fault, link_errors); "
                                                   "repeatable")
    p.add_argument("--status", action="append", choices=["firing", "resolved"], help="only firing or resolved")
    p.set_defaults(func=run)
