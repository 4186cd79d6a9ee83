"""A job's alert times on the broker's clock when its hosts' clocks are off (the metamorphic grid's ``clocks +-30s``).

The job rules stamp alerts on the job's own clock: a step rule with the step's median host time, the timer rules
with the tick's time less the job's clock offset (``JobState.clock_offset``: the median of arrival minus event
time). Where hosts run seconds off the broker, that clock is off too: a straggler found at the same step is
stamped that far late (or early), and alerts of different jobs, or of a job and of node telemetry, do not order
right. :class:`AlertClock` moves a job's alert times (``starts_at``, ``ends_at``) by the job's offset when it is
beyond ``TOLERANCE_SECONDS``; within it the lag is the producers' delivery (flushes of a second or two), the
hosts' clocks are taken as right and nothing moves. Evidence times (a heartbeat's, a stall's start) stay the
hosts' own: they are compared with the events that carry them.

Where the shift is made: at the end of the outlet chain (models/detection.py), once every road (the live worker,
``stepwatch replay``, restart recovery) has had the alert enriched by node telemetry, cited, classified and gated:
those stages read the job's times against node telemetry and one another on the hosts' clocks, and only what
leaves carries the broker's. Which shift: chosen where the rule fired (``choose``, from the job's offset as of the
firing row: a column run's earlier rows as one event at a time would have it), or, for an alert the outlet made of
a job's (a node incident of its stragglers, a restart), where it leaves, from the offset the job's latest alert was
given (none yet: the job's offset as of the timer's latest visit). An evicted job's clock is kept a while
(``GoneClocks``): an alert of its that a stage held leaves later on its own shift. The end reads no engine state but
these clocks.

Across worker lives: the published alert carries its shift (``evidence.clock_shift_seconds``, ``SHIFT_KEY``, when
not 0). A restarted worker's offsets are its own (its recovery span replayed at record times moved on to now), so
what it re-derives is compared with what the topic holds on the hosts' clock, and a version of an episode read back
goes out on the shift read back (models/published.py): one episode, one set of published times, in every life.

One alert keeps one shift from its first version to its resolution (its ``starts_at`` is part of how consumers
follow it): the shift is kept by (alert id, ``starts_at`` on the hosts' clock), an episode, at most ``MAX_KEPT`` per
job, the least recently seen forgotten first (a resolved episode's stays a while: the outlet may publish it again,
an intermittent straggler's next episode under its first id).
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict

from .alerts import Alert

#: On: published job alert times are the broker's where the job's hosts' clocks are off (off: the hosts' own).
ON = True

#: A job's median arrival lag within this many seconds is delivery, not a clock error (times left as stamped).
TOLERANCE_SECONDS = 5.0
#: Episodes whose shift is kept per job (more: the least recently seen forgotten; a job has a handful open).
MAX_KEPT = 256
#: Evicted jobs whose clocks are kept (more: the longest gone forgotten): an alert of theirs the outlet held
#: (the gate) leaves in a later call, on the shift chosen for it.
MAX_GONE = 512
#: The evidence key a shifted alert carries its shift in (seconds added to the hosts' times; absent: 0): what a
#: restarted worker reads back to compare and keep an episode on the hosts' times (models/published.py).
SHIFT_KEY = "clock_shift_seconds"


def shift_of(alert: Alert) -> float:
    """The seconds ``alert``'s times were moved onto the broker's clock (its ``SHIFT_KEY``; 0: none, or a record
    read back that carries no number there)."""
    shift = alert.evidence.get(SHIFT_KEY) if isinstance(alert.evidence, dict) else None
    return float(shift) if isinstance(shift, (int, float)) and not isinstance(shift, bool) and \
        abs(shift) < float("inf") else 0.0


def hosts_start(alert: Alert) -> float:
    """``alert``'s ``starts_at`` on its hosts' clock (the same in every worker life for one episode)."""
    return alert.starts_at - shift_of(alert)


#: Two hosts' times this close are one (a shifted time read back less its shift is the hosts' up to rounding).
SAME_SECONDS = 1e-3


def same_start(a: float, b: float) -> bool:
    """Whether two starts on the hosts' clock (``hosts_start``) are one: equal but for the shift's rounding."""
    return abs(a - b) < SAME_SECONDS


def with_shift(alert: Alert, shift: float) -> Alert:
    """``alert`` with its times moved by ``shift`` from the hosts' clock instead of its own shift (carried in its
    evidence when not 0)."""
    before = shift_of(alert)
    if shift == before:
        return alert
    move = shift - before
    evidence = {k: v for k, v in alert.evidence.items() if k != SHIFT_KEY}
    if shift:
        evidence[SHIFT_KEY] = round(shift, 6)
    return dataclasses.replace(alert, starts_at=round(alert.starts_at + move, 6), evidence=evidence,
                               ends_at=None if alert.ends_at is None else round(alert.ends_at + move, 6))


class AlertClock:
    """One job's alert episodes and the seconds each one's times move (0: none)."""

    __slots__ = ("_shift", "latest", "ticked")

    def __init__(self) -> None:
        self._shift: dict[tuple[str, float], float] = {}  # (alert id, starts_at on the hosts' clock) -> seconds
        #: The offset ``choose`` was last given (None: none yet, or no arrival known).
        self.latest: float | None = None
        #: The job's offset as of the timer's latest visit (None: no arrival known): the shift of an alert the
        #: outlet makes of a job no rule alert gave one (a restart of a healthy job).
        self.ticked: float | None = None

    def __len__(self) -> int:
        """Episodes whose shift is kept (at most ``MAX_KEPT``)."""
        return len(self._shift)

    def choose(self, alerts: list[Alert], offset: float | None) -> None:
        """Keep a shift for each of ``alerts`` (one job's) not seen before: ``offset``, the job's arrival lag (broker
        minus job time), where it is beyond the tolerance; none when None (no arrival known: replay of a file
        without ``_arrival``). A known episode keeps its own."""
        self.latest = offset
        for alert in alerts:
            self._keep(alert, offset)

    def _keep(self, alert: Alert, offset: float | None) -> float:
        """The shift of ``alert``'s episode, kept (chosen from ``offset`` if new)."""
        kept = self._shift
        key = (alert.id, alert.starts_at)
        shift = kept.pop(key, None)  # (put back last: the least recently seen go first)
        if shift is None:
            shift = offset if offset is not None and abs(offset) > TOLERANCE_SECONDS else 0.0
        kept[key] = shift
        while len(kept) > MAX_KEPT:
            del kept[next(iter(kept))]
        return shift

    def shift(self, alert: Alert) -> float | None:
        """The seconds ``alert``'s episode moves (None: not chosen, or forgotten)."""
        return self._shift.get((alert.id, alert.starts_at))

    def to_broker(self, alert: Alert) -> Alert:
        """``alert`` with its times moved by its episode's shift; one no rule fired (the outlet made it of the job's)
        is given its shift here, from the offset of the job's latest alert (none: as of the timer's latest visit)."""
        shift = self._shift.get((alert.id, alert.starts_at))
        if shift is None:
            shift = self._keep(alert, self.latest if self.latest is not None else self.ticked)
        return with_shift(alert, shift) if shift else alert


class GoneClocks:
    """The alert clocks of jobs evicted (``MAX_GONE`` at most, the longest gone forgotten first): what leaves after
    its job is gone (an alert the outlet held, released in a later call) still goes on its episode's shift."""

    __slots__ = ("_clocks",)

    def __init__(self) -> None:
        self._clocks: OrderedDict[str, AlertClock] = OrderedDict()

    def __len__(self) -> int:
        return len(self._clocks)

    def keep(self, job: str, clock: AlertClock) -> None:
        """``job`` was evicted: its ``clock`` kept, the newest gone."""
        self._clocks.pop(job, None)
        self._clocks[job] = clock
        while len(self._clocks) > MAX_GONE:
            self._clocks.popitem(last=False)

    def get(self, job: str) -> AlertClock | None:
        return self._clocks.get(job)
