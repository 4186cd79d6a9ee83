"""Which job rules hear a job event (issue 40 item 5): an event's kind names its signal (``EVENT_SIGNALS``), and the
job's rules that consume that signal take it, in feeding order (``JobState.by_signal``).

The engine (models/engine.py) finds the event's job and keeps its bookkeeping (the jobs store, the caps, the clock,
the timer's schedule); this file routes the event once that is done: the heartbeat sources, a pause's end told by
the ranks, the job's nodes to the observer, the arrival signal, and the job-wide phases (its ``end`` closes the rules).
Step events take their own road by columns (``JobEngine.judge_steps``).
"""

from __future__ import annotations

from .alerts import Alert
from .resolution import Resolution, with_resolution
from .rule import EVENT_SIGNALS, Signal
from .wire.events import PAUSE_PHASES, CollectiveEvent, Event, PhaseEvent


def route(job, event: Event, observer) -> list[Alert]:
    """The alerts of ``job``'s rules that hear ``event`` (a job event other than a step); ``observer`` (models/
    engine_output.py ``JobsObserver``) is told the job's nodes."""
    signal = EVENT_SIGNALS.get(event.kind)
    if signal is None:  # not a job event kind the rules take (the decoder lets none through)
        return []
    if signal is Signal.INSPECTOR:
        return feed(job, signal, event)
    if signal is Signal.HEARTBEATS:
        if not counts_heartbeat(job, event):
            return []
        if job.phases.phase in PAUSE_PHASES:  # the ranks tell the end of a pause whose marker was lost
            job.phases.rank_reports(event.rank, event.phase, ts=event.ts)
    if getattr(event, "node", None) is not None:
        observer.observe_node(event.job, event.node)  # the job's nodes (node telemetry compares them)
    if isinstance(event, CollectiveEvent):
        job.arrival.observe_collective(event)
    elif isinstance(event, PhaseEvent):
        return on_phase(job, event)
    return feed(job, signal, event)


def feed(job, signal: Signal, event: Event) -> list[Alert]:
    """``event`` to the job's rules that consume ``signal``, in feeding order; their alerts."""
    out: list[Alert] = []
    for rule in job.by_signal[signal]:
        out.extend(rule.on_event(event))
    return out


def counts_heartbeat(job, event) -> bool:
    """Whether the hang rule takes this heartbeat: RAS-derived ones (``source: nccl_ras``, from the node agent) only
    while the job sends none of its own (the callback's sequence numbers are finer)."""
    source = event.extra.get("source") or "callback"
    job.sources.add(source)
    return source == "callback" or "callback" not in job.sources


def on_phase(job, event: PhaseEvent) -> list[Alert]:
    """A phase event: a rank's own is noted; a job-wide one moves the job's phase, and ``end`` closes its rules."""
    out = feed(job, Signal.PHASES, event)
    if event.rank is not None:  # a single rank's phase is carried by its own step events
        job.phases.rank_reports(event.rank, event.phase, ts=event.ts)
        return out
    if event.phase == "end":
        job.ended = True
        job.ended_at = event.ts
        job.phases.begin("train", ts=event.ts)
        # Steps still open at the end (a rank's last events lost; the complete ones before were judged:
        # JobEngine._held_at_end) are never judged: a later tick's flush would feed them to the rules just
        # closed and re-open their alerts.
        job.assemblers.clear()
        for rule in job.rules:
            out.extend(rule.close(at=event.ts, resolution=Resolution.JOB_ENDED, reason="job ended"))
        return [with_resolution(a, Resolution.JOB_ENDED, "job ended") for a in out]
    job.phases.begin(event.phase, ts=event.ts)
    return out
