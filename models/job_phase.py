"""A job's job-wide phase, and its end when the closing marker is lost.

A job-wide ``phase`` event (no ``rank``) puts the whole job in that phase until the next one: its steps
without a phase of their own are judged in it, and the hang rule waits its timeout (docs/events.md,
docs/hang.md). A job-wide ``eval`` or ``checkpoint`` is a pause; the event that closes it is one event
(rank 0 speaks for the job) and can be lost like any other. Held open, the pause would hide a straggler
until the next pause and make a real hang wait the checkpoint timeout (30 min).

The ranks tell when it is over: a rank that reported the pause as its own phase (its heartbeat's
``phase``, or its own ``phase`` event) after the pause began, and reports ``train`` or ``warmup`` later,
has left it, and with it the job. Ranks that never reported the pause say nothing (a rank whose monitor was
not told of the job-wide phase says ``train`` throughout), so steps that go on during a marked evaluation
stay in it.

>>> phase = JobPhase()
>>> phase.begin("checkpoint", ts=100.0)
>>> phase.rank_reports(0, "train", ts=101.0), phase.phase  # rank 0 never said checkpoint: no evidence
(False, 'checkpoint')
>>> phase.rank_reports(0, "checkpoint", ts=105.0), phase.rank_reports(0, "train", ts=140.0), phase.phase
(False, True, 'train')
"""

from __future__ import annotations

import math

from .wire.events import PAUSE_PHASES

#: Phases a rank reports when it has left a pause.
TRAINING_PHASES = frozenset({"train", "warmup"})


class JobPhase:
    """The job-wide phase (``phase``), since when (``since``, event time) and the ranks that reported it."""

    __slots__ = ("phase", "since", "_in_pause")

    def __init__(self) -> None:
        self.phase = "train"
        self.since = -math.inf
        self._in_pause: set[int] = set()  # ranks that reported the current pause as their own phase

    def begin(self, phase: str, *, ts: float) -> None:
        """A job-wide ``phase`` event."""
        self.phase, self.since = phase, ts
        self._in_pause.clear()

    def rank_reports(self, rank: int, phase: str | None, *, ts: float) -> bool:
        """A rank's own phase (a heartbeat's or a rank ``phase`` event's); True when it ends the job's pause."""
        if phase is None or self.phase not in PAUSE_PHASES or ts < self.since:
            return False
        if phase == self.phase:
            self._in_pause.add(rank)
            return False
        if phase in TRAINING_PHASES and rank in self._in_pause:
            self.begin("train", ts=ts)
            return True
        return False
