"""A job's alert times on the broker's clock when its hosts' clocks are off (the metamorphic grid's ``clocks +-30s``).

The job rules stamp alerts on the job's own clock: a step rule with the step's median host time, the timer rules
with the tick's time less the job's clock offset (``JobState.clock_offset``: the median of arrival minus event
time). Where hosts run seconds off the broker, that clock is off too: a straggler found at the same step is
stamped that far late (or early), and alerts of different jobs, or of a job and of node telemetry, do not order
right. :class:`AlertClock` moves a job's alert times (``starts_at``, ``ends_at``) by the job's offset when it is
beyond ``TOLERANCE_SECONDS``; within it the lag is the producers' delivery (flushes of a second or two), the
hosts' clocks are taken as right and nothing moves. Evidence times (a heartbeat's, a stall's start) stay the
hosts' own: they are compared with the events that carry them.

One alert keeps one shift from its first version to its resolution (its ``starts_at`` is part of how consumers
follow it), so each open alert's shift is kept, at most ``MAX_OPEN`` of them.
"""

from __future__ import annotations

import dataclasses

from .alerts import Alert, AlertStatus

#: Off (2026-12-05): node telemetry's enrichment (models/telemetry/telemetry_hub.py, the window from the alert's
#: ``starts_at``) and the node incidents read alert times on the hosts' clocks, and they run after the engine: a
#: shifted alert found no telemetry behind it (tests/models/telemetry/test_network_kafka.py, whose simulated job
#: runs ahead of the broker, lost its cause). The shift belongs after them, at the outlet's end; until it moves
#: there alert times stay the hosts' (the metamorphic grid's ``clocks +-30s`` delay: a strict xfail).
ON = False

#: A job's median arrival lag within this many seconds is delivery, not a clock error (times left as stamped).
TOLERANCE_SECONDS = 5.0
#: Open alerts whose shift is kept per job (more: the oldest forgotten; a job has a handful).
MAX_OPEN = 256


class AlertClock:
    __slots__ = ("_shift",)

    def __init__(self) -> None:
        self._shift: dict[str, float] = {}  # alert id -> seconds added to its times (0: none)

    def __len__(self) -> int:
        """Alerts whose shift is kept (open ones, at most ``MAX_OPEN``)."""
        return len(self._shift)

    def to_broker(self, alerts: list[Alert], offset: float | None) -> list[Alert]:
        """``alerts`` of one job with their times on the broker's clock; ``offset``: the job's arrival lag
        (broker minus job time), None when no arrival is known (replay of a file without ``_arrival``)."""
        shifts = self._shift
        out = alerts
        for i, alert in enumerate(alerts):
            shift = shifts.get(alert.id)
            if shift is None:
                shift = offset if offset is not None and abs(offset) > TOLERANCE_SECONDS else 0.0
                if alert.status != AlertStatus.RESOLVED:
                    shifts[alert.id] = shift
                    if len(shifts) > MAX_OPEN:
                        del shifts[next(iter(shifts))]
            elif alert.status == AlertStatus.RESOLVED:
                del shifts[alert.id]
            if shift:
                if out is alerts:
                    out = list(alerts)
                out[i] = dataclasses.replace(alert, starts_at=round(alert.starts_at + shift, 6), ends_at=None
                                             if alert.ends_at is None else round(alert.ends_at + shift, 6))
        return out
