"""Job restarts: the step counter goes back after a silence.

A job that crashed and was relaunched resumes from its last checkpoint: its ranks fall silent,
then report step numbers lower than the ones they reported before. That is an incident (seed
003, section 6: failures, MTTR; seed 000, 13: effective GPU-hours): ``RestartTracker`` notices
it from the step events and says how much it cost:

* ``downtime_seconds``: from the reporting rank's last event before the silence to its first
  after (one rank's own clock: never two hosts' timestamps subtracted);
* ``steps_recomputed``: the highest step reached before minus the step resumed at, plus one
  (steps ``resumed .. highest`` are done twice);
* ``gpu_hours_lost``: ranks (one GPU each) x (downtime + steps_recomputed x typical step time),
  with the typical step time given by the caller (``cost``; the engine's judged steps).

A rank was relaunched when its step event is two or more steps below the step it last reported *itself*, stamped
more than ``min_silence_seconds`` after it (models/relaunch.py, the reading the hang rule shares, with the same 1 s
line by default: one process's step events go up in stamp order), and its next two step events go on from there,
none past its old step whatever its stamp (``advanced``). The job restarted when most of its ranks were (``most``):
of the ranks known, or, ``RELAUNCH_WINDOW_SECONDS`` into the new run by a relaunched rank's clock, of the ranks that
reported since (an elastic job relaunched on fewer ranks). A host's clock step is none: its clock stepped back 20 s,
then a late copy of an older event went back (tests/models/test_composite_messy.py healthy_noise), but its ranks'
real steps go on past their old ones (even where it is the job's only host) and the other hosts' ranks go on (one
host of several is never most); the ranks going back are forgotten once others
went on for two windows (not before: a new process's first steps at 120 s steps take many minutes).
So a relaunch is a relaunch at any pace, however short it was down.
Comparing with the job-wide highest step instead is wrong after a job-wide pause (checkpoint, eval, marked or not):
ranks resume where they were, but their monitors flush in batches at different moments, so the first ranks'
batches have already raised the job's highest step when a later rank's first step after the pause arrives (gen2
scenario ``checkpoint-marked-slow-flush``). The ranks of one restart resume one by one, in late batches, on clocks
seconds apart: a rank relaunched within ``RELAUNCH_WINDOW_SECONDS`` of the restart already found, not yet counted in
it, or whose silence overlaps it, belongs to it, so a job's restart is reported once (when most ranks are back; its
figures are the first rank's to go back, not refuted since).

Late, reordered or duplicated events are not restarts: a rank's event stamped no later than that rank's previous
one never counts, and neither does one step back.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from ..alert_types import AlertType
from ..relaunch import MIN_STEPS_BACK, RELAUNCH_SECONDS, RELAUNCH_WINDOW_SECONDS, advanced, most, relaunched

#: The tracker's line (``oncall.restart_min_silence_seconds``'s default): the hang rule's (most ranks going back, not
#: a long silence, tell a relaunch from one host's clock step; the module docstring says why).
RESTART_SECONDS = RELAUNCH_SECONDS


class RestartCause(str, Enum):
    """What made a job restart (``job_restart`` alerts' ``evidence.cause``), from the alert before it."""

    LOST_NODE = "lost_node"  # every rank of a node went silent (node down or unreachable)
    HANG_CULPRIT = "hang_culprit"  # a hang with a named culprit (rank stuck before a collective)
    HANG = "hang"  # a hang without a named culprit
    DEVICE_FAULT = "device_fault"  # a GPU fault on the job's nodes
    CRASH = "crash"  # nothing before it: the processes died and were relaunched


def restart_cause(preceding: dict[str, Any] | None) -> tuple[RestartCause, tuple[str, ...]]:
    """The cause of a restart and the nodes it blames, from the job's alert before the silence
    (``{"type", "failure_class", "case", "lost_nodes", "nodes"}``; None: no alert). Only the nodes
    that were lost (or faulty) are blamed, never the ones the restarted ranks moved to."""
    if preceding is None:
        return RestartCause.CRASH, ()
    kind = preceding.get("type")
    if kind == AlertType.HANG:
        lost = tuple(preceding.get("lost_nodes") or ())
        if lost:
            return RestartCause.LOST_NODE, lost
        if preceding.get("case") == "culprit_before_collective":
            return RestartCause.HANG_CULPRIT, tuple(preceding.get("nodes") or ())
        return RestartCause.HANG, ()
    if kind == AlertType.GPU_FAULT:
        return RestartCause.DEVICE_FAULT, tuple(preceding.get("nodes") or ())
    return RestartCause.CRASH, ()


@dataclass(frozen=True, slots=True)
class Restart:
    job: str
    rank: int
    at: float  # event time of the first event after the silence
    silence_began_at: float  # the same rank's last event before it
    downtime_seconds: float
    highest_step: int
    resumed_step: int
    steps_recomputed: int
    ranks: int

    def cost(self, step_time: float) -> float:
        """GPU-hours lost: every rank idle through the downtime, then redoing the recomputed steps."""
        return round(self.ranks * (self.downtime_seconds + self.steps_recomputed * step_time) / 3600.0, 6)


class _Gathering:
    """Ranks going back since the first of them, not yet most of the job (``RestartTracker``)."""

    __slots__ = ("began", "carried", "confirmed", "drafts", "heard", "pending", "refuted")

    def __init__(self, began: float, heard: int) -> None:
        self.began = began  # the first rank's step back's stamp
        self.heard = heard  # ranks known then (ranks heard of later joined the relaunch: an elastic job grown)
        self.drafts: dict[int, Restart] = {}  # rank -> the restart its step back would be (first to go back first)
        #: rank -> (step back, its stamp, own step before it, the step it went on to since, -1: none yet)
        self.pending: dict[int, tuple[int, float, int, int]] = {}
        self.confirmed: set[int] = set()  # ranks that went back and on from there (two steps in a row)
        self.refuted: set[int] = set()  # ranks that went past their old step since going back: no relaunch
        self.carried: set[int] = set()  # ranks that went on in their old process since (counted against)


class _Job:
    __slots__ = ("ceiling", "gathering", "high", "last_step", "last_ts", "restart", "resumed", "tail")

    def __init__(self) -> None:
        self.high = -1  # highest step since the latest restart (what a restart recomputes up to)
        self.ceiling = -1  # no rank's own last step is above it (update_many's shortcut)
        self.last_ts: dict[int, float] = {}  # rank -> time of its latest event (in arrival order)
        self.last_step: dict[int, int] = {}  # rank -> step of its latest event (in arrival order)
        self.restart: tuple[float, float] | None = None  # the latest restart's silence: (began, ended)
        self.resumed: set[int] = set()  # the ranks relaunched in it
        self.gathering: _Gathering | None = None  # ranks going back, not yet most of the job
        #: (ranks, steps, ts, layout) of the latest run not yet in ``last_ts``/``last_step`` (``settle``): a run of
        #: the same layout (models/steps/layout.py), so the same ranks, replaces it whole (every rank's latest
        #: values are the new run's), no dict writes per event.
        self.tail: tuple[list, list, list, object] | None = None

    def settle(self) -> None:
        """``last_ts`` and ``last_step`` up to date (before they are read)."""
        if self.tail is not None:
            ranks, steps, ts, _ = self.tail
            self.tail = None
            self.last_ts.update(zip(ranks, ts))
            self.last_step.update(zip(ranks, steps))


class RestartTracker:
    """Notices job restarts in step events; feed them in arrival order.

    Hyperparameters (keyword-only):

    * ``min_steps_back``: a step this many steps (or more) below the reporting rank's own last step
      is a candidate;
    * ``min_silence_seconds``: ... when stamped more than this after that step (and most ranks do so);
    * ``max_jobs``: jobs remembered (the least recently active is forgotten beyond).
    """

    def __init__(self, *, min_steps_back: int = MIN_STEPS_BACK, min_silence_seconds: float = RESTART_SECONDS,
                 max_jobs: int = 10_000) -> None:
        self.min_steps_back = min_steps_back
        self.min_silence_seconds = min_silence_seconds
        self.max_jobs = max_jobs
        self._jobs: dict[str, _Job] = {}

    def _job(self, name: str) -> _Job:
        job = self._jobs.get(name)
        if job is None:
            if len(self._jobs) >= self.max_jobs:
                self._jobs.pop(next(iter(self._jobs)))
            job = self._jobs[name] = _Job()
        return job

    def update(self, job: str, rank: int, step: int, ts: float) -> Restart | None:
        """One step event; the restart it reveals, if any."""
        state = self._job(job)
        state.settle()
        prev = state.last_ts.get(rank)
        own = state.last_step.get(rank)
        found = None
        g = state.gathering
        if (g is not None and ts - g.began > 2 * RELAUNCH_WINDOW_SECONDS and rank not in g.pending
                and rank not in g.confirmed):
            # Others went on minutes after: single ranks, or one host's clock. (Not by the ranks going back: a new
            # process's first steps at a slow pace take many minutes.)
            g = state.gathering = None
        back = prev is not None and own is not None and relaunched(
            own, prev, step, ts, min_steps_back=self.min_steps_back, min_seconds=self.min_silence_seconds)
        if back and g is not None and rank in g.drafts and step > g.drafts[rank].resumed_step:
            back = False  # its new process going on, after a late event of its old one moved the rank's latest back
        if back:
            last = state.restart
            # One of the restart already found's ranks resuming (maybe in a late batch, on a clock seconds off), or
            # one that resumed already, its state moved back by a late event of its old process: not another restart.
            if last is not None and (rank not in state.resumed and abs(ts - last[1]) <= RELAUNCH_WINDOW_SECONDS
                                     or prev < last[1] and ts > last[0]):
                state.resumed.add(rank)
            elif g is None or rank not in g.refuted:
                if g is None:
                    g = state.gathering = _Gathering(ts, len(state.last_ts))
                high = max(state.high, own)
                g.drafts.pop(rank, None)
                g.drafts[rank] = Restart(
                    job=job, rank=rank, at=ts, silence_began_at=prev, downtime_seconds=round(ts - prev, 3),
                    highest_step=high, resumed_step=step, steps_recomputed=high - step + 1,
                    ranks=max(len(state.last_ts), 1))
                g.pending[rank] = (step, ts, own, -1)
                g.confirmed.discard(rank)
                g.carried.discard(rank)
        else:
            if g is not None:
                found = self._gather(state, g, rank, step, ts, prev)
            if step > state.high:
                state.high = step
        if step > state.ceiling:
            state.ceiling = step
        state.last_ts[rank] = ts
        state.last_step[rank] = step
        return found

    def _gather(self, state: _Job, g: _Gathering, rank: int, step: int, ts: float,
                prev: float | None) -> Restart | None:
        """A rank's event (no step back) while ranks are going back: the job's restart once most of them went on."""
        pending = g.pending.get(rank)
        if pending is not None:
            back_to, back_ts, own, went_on = pending
            if step > own:
                # Past its old step, whatever the stamp (a host clock stepped back stamps its real steps earlier than
                # the late copy that went back): its old process is alive, for this gathering.
                del g.pending[rank]
                g.drafts.pop(rank, None)
                g.refuted.add(rank)
                g.carried.add(rank)
                return None
            if ts <= back_ts or not advanced(max(back_to, went_on), own, step):
                return None  # a late or repeated event of the rank: it tells nothing yet
            if went_on < 0:  # (one step on: a late copy may follow a late copy; two in a row, a new process)
                g.pending[rank] = (back_to, back_ts, own, step)
                return None
            del g.pending[rank]
            g.confirmed.add(rank)
        elif rank not in g.confirmed:
            if prev is not None and ts > prev:
                g.carried.add(rank)  # its old process went on
            return None
        joined = len(state.last_ts) - g.heard + (prev is None)
        back = len(g.confirmed) + joined
        # Most of the ranks known; or a window on (the rank's own clock), most of those that reported since: a job
        # relaunched on fewer ranks (the others stay silent).
        if not (most(back, len(state.last_ts) + (prev is None))
                or ts - g.drafts[rank].at > RELAUNCH_WINDOW_SECONDS and most(back, back + len(g.carried))):
            return None
        found = next(iter(g.drafts.values()))  # the first rank to go back (not refuted since)
        state.gathering = None
        state.restart = (found.silence_began_at, found.at)
        state.resumed = g.confirmed | set(g.pending)
        state.high = max([step, *(state.last_step[r] for r in g.confirmed if r != rank and r in state.last_step)])
        return found

    def update_many(self, job: str, ranks, steps, ts, layout=None) -> list[Restart]:
        """``update`` for a run of one job's step events (cheap when no step goes back); ``layout``: who reported
        them (models/steps/layout.py), or None."""
        if not len(steps):
            return []
        state = self._jobs.get(job)
        if (state is not None and state.ceiling >= 0 and state.gathering is None
                and min(steps) > state.ceiling - self.min_steps_back):
            # No step is below any rank's own last one: nothing can be a restart; the same bookkeeping, in bulk.
            top = max(steps)
            state.high = max(state.high, top)
            state.ceiling = max(state.ceiling, top)
            if state.tail is not None and (layout is None or state.tail[3] is not layout):
                state.settle()
            state.tail = (ranks, steps, ts, layout)
            return []
        out = []
        for args in zip(ranks, steps, ts):
            found = self.update(job, *args)
            if found is not None:
                out.append(found)
        # Exact again (a restart leaves it at the old high until every rank has resumed).
        self._jobs[job].ceiling = max(self._jobs[job].last_step.values())
        return out

    def forget(self, job: str) -> None:
        self._jobs.pop(job, None)
