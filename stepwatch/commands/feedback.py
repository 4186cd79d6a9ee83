"""``stepwatch feedback``: say whether an alert was right (the feedback topic), or export every verdict.

    stepwatch feedback ALERT_ID confirmed|false|duplicate [--note TEXT]
    stepwatch feedback --export [--since WHEN] > labels.jsonl
"""

from __future__ import annotations

import argparse
import sys
import time

from stepwatch.commands.common import _add_kafka_args, _require_bootstrap, _settings
from stepwatch.timespec import HELP, parse_when

#: The verdicts a person may give (models/wire/feedback.py HUMAN_VERDICTS; ``transient`` is automatic only).
CHOICES = ("confirmed", "false", "duplicate")


def _precheck(args: argparse.Namespace) -> None:
    """Wrong arguments are one line before any broker is asked."""
    if args.export:
        if args.alert_id or args.verdict:
            raise SystemExit("stepwatch feedback: --export takes no ALERT_ID or verdict")
        return
    if not args.alert_id or not args.verdict:
        raise SystemExit("stepwatch feedback: give ALERT_ID and a verdict (confirmed, false or duplicate), "
                         "or --export")
    if args.verdict not in CHOICES:
        raise SystemExit(f"stepwatch feedback: unknown verdict {args.verdict!r}: expected confirmed, false or "
                         "duplicate")
    if args.since is not None:
        raise SystemExit("stepwatch feedback: --since goes with --export")


def run(args: argparse.Namespace) -> int:
    from stepwatch.feedback import find_alert, principal, read_feedback, write_feedback
    from stepwatch.models.wire.feedback import MAX_FIELD, Feedback, Verdict

    settings = _settings(args)
    _require_bootstrap(settings)
    if args.export:
        refused: list[str] = []
        since = args.since.at(time.time()) if args.since is not None else None
        records = read_feedback(settings, since=since, refused=refused)
        out = sys.stdout
        for record in sorted(records.values(), key=lambda r: (r.at, r.alert_id)):
            out.write(record.to_json().decode() + "\n")
        for reason in refused:  # never silently: what was skipped, on stderr
            print(f"stepwatch feedback: skipped a record that is not feedback ({reason})", file=sys.stderr)
        return 0
    if len(args.alert_id) > MAX_FIELD:
        raise SystemExit(f"stepwatch feedback: ALERT_ID is longer than {MAX_FIELD} characters")
    alert = None if args.force else find_alert(settings, args.alert_id)
    if alert is None and not args.force:
        kafka = settings.kafka
        raise SystemExit(f"stepwatch feedback: no alert {args.alert_id} among the recent alerts on "
                         f"{kafka.topic(kafka.alerts_topic)} (check the id; --force records it anyway)")
    record = Feedback(alert_id=args.alert_id, verdict=Verdict(args.verdict), by=principal(settings), at=time.time(),
                      note=args.note or "", type=_field(alert, "type"), job=_field(alert, "job"))
    from kafka.errors import TopicAuthorizationFailedError

    try:
        write_feedback(settings, record)
    except TopicAuthorizationFailedError:
        kafka = settings.kafka
        raise SystemExit(f"stepwatch feedback: {record.by} is not allowed to write {kafka.topic(kafka.feedback_topic)} "
                         "(operators write it: docs/security.md)") from None
    what = f"{record.type} alert" if record.type else "alert"
    print(f"stepwatch feedback: {what} {record.alert_id} marked {record.verdict} by {record.by}")
    return 0


def _field(alert: dict | None, key: str) -> str | None:
    value = (alert or {}).get(key)
    return value[:200] if isinstance(value, str) and value else None


def add_parser(sub) -> None:
    p = sub.add_parser("feedback", help="mark an alert confirmed, false or duplicate; export the verdicts",
                       description="Say whether an alert was right: the verdict goes to the compacted <prefix>"
                                   "feedback topic, keyed by the alert id (the latest verdict counts). 'stepwatch "
                                   "report' turns the verdicts into precision per rule; --export writes them as "
                                   "JSON Lines (what 'stepwatch backtest --labels' reads).")
    p.add_argument("alert_id", nargs="?", metavar="ALERT_ID", help="the alert's id (stepwatch alerts shows it)")
    p.add_argument("verdict", nargs="?", metavar="VERDICT", help="confirmed, false or duplicate")
    p.add_argument("--note", metavar="TEXT", help="why (kept with the verdict; 2000 characters at most)")
    p.add_argument("--force", action="store_true",
                   help="record the verdict even when the alert is not among the recent alerts")
    p.add_argument("--export", action="store_true", help="print every verdict as JSON Lines instead")
    p.add_argument("--since", type=parse_when, metavar="WHEN", help=f"with --export, verdicts said since: {HELP}")
    _add_kafka_args(p)
    p.set_defaults(func=run, precheck=_precheck)
