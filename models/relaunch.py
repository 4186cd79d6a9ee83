"""A rank relaunched, read from its own step events: the one reading the hang rule (models/hang/progress.py
``JobProgress.new_process``) and the ``job_restart`` alert (models/oncall/restarts.py ``RestartTracker``) share.

One process's step events go up in stamp order. A rank's step event two or more steps below the rank's own
latest, stamped more than ``RELAUNCH_SECONDS`` after it, comes from a new process of the rank: it was relaunched
and resumed from a checkpoint. Neither the pace nor how many seconds of work were rolled back matters, so a
relaunch reads the same at 20 ms and at 120 s steps. What is not a relaunch:

* a late, reordered or duplicated event: stamped no later than the rank's latest (a duplicate's stamp is the same);
* one step back: a late event racing the next one, or a step counter read a moment early;
* a job-wide pause (checkpoint, eval, marked or not): every rank resumes at its own next step, whatever the
  job's highest step when its batch arrives (gen2 ``checkpoint-marked-slow-flush``): the rank's own latest step is
  the reference, never the job's.

One rank's events can still fake a step back: a host whose clock stepped back 20 s, then a late copy of an event
from before the step (tests/models/test_composite_messy.py healthy_noise). So a *job* relaunched only when its rank
went on from there (``advanced``: a new process's next steps follow the one it resumed at, a late copy's rank
goes on past its old latest) and ``most`` of the job's ranks did (one host is not most of a job; the hang rule counts
its own ranks in new processes the same way).
"""

from __future__ import annotations

#: A relaunch (process start, NCCL init, checkpoint load) takes longer than this, and one process's step events
#: never go back: more than this between a rank's latest step event and one 2+ steps below it is a new process.
#: Also more than a host clock's correction moves between two events of a rank.
RELAUNCH_SECONDS = 1.0
#: A step this many steps (or more) below the rank's own latest: one back is a late event racing the next.
MIN_STEPS_BACK = 2
#: The ranks of one relaunch report their first new steps within this many seconds of the first of them (their
#: clocks may be tens of seconds apart, their batches late): a majority of a job's ranks new within it is the job
#: restarting (the hang rule), and a rank's relaunch within it belongs to the restart already found (one alert).
RELAUNCH_WINDOW_SECONDS = 120.0


def relaunched(own_step: int, own_ts: float, step: int, ts: float, *, min_steps_back: int = MIN_STEPS_BACK,
               min_seconds: float = RELAUNCH_SECONDS) -> bool:
    """Whether a rank's step event (``step`` stamped ``ts``) comes from a new process, given the rank's own latest
    step event before it (``own_step`` stamped ``own_ts``; a negative ``own_step``: none)."""
    return own_step >= 0 and step <= own_step - min_steps_back and ts - own_ts > min_seconds


def advanced(resumed_step: int, own_step: int, step: int) -> bool:
    """Whether a rank's step event, stamped after its step back to ``resumed_step`` from ``own_step``, goes on from
    the step back: above it and not past the old process's latest (a new process recomputing its steps). A late copy
    of an old event is followed by the rank's real next step, past ``own_step``."""
    return resumed_step < step <= own_step


def most(ranks_back: int, ranks: int) -> bool:
    """Whether ``ranks_back`` ranks relaunched are most of ``ranks``: a 2-rank job needs both, one host is never most
    of a job of several."""
    return 2 * ranks_back > ranks
