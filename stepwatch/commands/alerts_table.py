"""The readable alerts table of ``stepwatch alerts``: fixed-width columns, every cell escaped.

A row says who and what first (time, status, type, job, node/port, ranks, then the summary) and the
recommended action last, short (its first sentence). Given a ``width`` (the terminal's) the summary and
action are cut to fit; the cells an SRE acts on (type, the whole job id, node/port) never are. ``--wide``
and non-terminal output keep every character; ``--json`` has everything."""

from __future__ import annotations

from stepwatch.commands.common import _cut, printable
from stepwatch.models.alert_types import ALERT_TYPES

#: Fixed-width columns; TYPE fits every type uncut, the action and summary come last, uncut.
ALERT_COLUMNS = (("TIME (UTC)", 20), ("STATUS", 8), ("SEVERITY", 8), ("TYPE", max(map(len, ALERT_TYPES))),
                 ("JOB", 20), ("NODE/PORT", 18), ("RANKS", 12))


#: Never cut (a longer job id or node name pushes the row on): what an SRE acts on. A torchrun job id is a UUID.
UNCUT = frozenset({"TYPE", "JOB", "NODE/PORT"})

#: In a terminal: at most this much of the action (its first sentence), and at least this much summary.
ACTION_WIDTH = 60
SUMMARY_MIN = 30


def alert_table_header() -> str:
    return "  ".join(f"{name:<{width}}" for name, width in ALERT_COLUMNS) + "  SUMMARY | ACTION"


def short_action(action: str) -> str:
    """The action's first sentence (the rest is in --wide and --json)."""
    head, dot, _rest = action.partition(". ")
    return head + ("." if dot else "")


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


def rank_ranges(ranks) -> str:
    """``[16, 17, 18, 23]`` -> ``16-18,23``: a node's eight ranks fit the column."""
    ints = sorted({r for r in ranks if isinstance(r, int) and not isinstance(r, bool)})
    runs: list[list[int]] = []
    for r in ints:
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def alert_table_row(alert: dict, *, published: float | None = None, width: int | None = None) -> str:
    """One readable row: when it was published (else its own start or end), the incident, the action; cut to
    ``width`` characters where the summary and action allow (None: whole).

    Every cell is escaped (``printable``): names from the wire cannot print a fake line."""
    from stepwatch.models.alerts import _iso

    when = published
    if when is None:
        when = alert.get("ends_at") if alert.get("status") == "resolved" else alert.get("starts_at")
    ranks = rank_ranges(alert.get("ranks") or [])
    cells = [_iso(when) if isinstance(when, (int, float)) else "?", str(alert.get("status", "?")).upper(),
             str(alert.get("severity", "?")), str(alert.get("type", "?")), str(alert.get("job") or "-"),
             _where(alert), (ranks if len(ranks) <= 12 else ranks[:11] + "+") or "-"]
    row = "  ".join(f"{(printable(c) if name in UNCUT else _cut(printable(c), w)):<{w}}"
                    for c, (name, w) in zip(cells, ALERT_COLUMNS))
    annotations = alert.get("annotations") if isinstance(alert.get("annotations"), dict) else {}
    action = printable(annotations.get("recommended_action") or "-")
    summary = printable(alert.get("summary", ""))
    if width is None:
        return f"{row}  {summary} | {action}"
    action = _cut(short_action(action), ACTION_WIDTH)
    room = max(width - len(row) - 2 - 3 - len(action), SUMMARY_MIN)
    return f"{row}  {_cut(summary, room)} | {action}"


