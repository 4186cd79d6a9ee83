"""The hang alert's one-line summary: what stopped, since when, and whom the diagnosis names.

What the on-call reads first (``Alert.summary``, the alerts table, Alertmanager's ``annotations.summary``):
the head says what stopped (the job, or some ranks while others still step) and for how long; the tail
names the culprit by the case of the diagnosis (models/hang/diagnosis.py), its node, the process group
it blocks; ``stack_note`` adds where the culprit's stack stands. What to *do* about it is not said here:
models/oncall/actions.py adds the recommended action where alerts leave the engine. Kept apart from the
rule so that the wording can change without touching what fires, and the other way round.
"""

from __future__ import annotations

from ..evidence import HangCase
from .diagnosis import HangDiagnosis
from .evidence import StackEvidence
from .progress import JobProgress


def pg_label(p: JobProgress, name: str) -> str:
    """A group as the alert names it: its description from the heartbeats, with its id."""
    desc = p.pg_desc.get(name)
    return f"{desc} ({name})" if desc and desc != name else name


def where(p: JobProgress, rank: int) -> str:
    """``rank 5 on node-003`` (no node when it never said)."""
    node = p.position(rank).node
    return f"rank {rank}" + (f" on {node}" if node else "")


def summary(p: JobProgress, job: str, severity: str, stalled: float, stop_step: int, d: HangDiagnosis) -> str:
    """The alert's summary for diagnosis ``d`` of ``job``, stalled for ``stalled`` seconds after ``stop_step``."""
    step = f"step {stop_step}" if stop_step >= 0 else "the first step"
    seq = f", collective seq {d.collective_seq}" if d.collective_seq is not None else ""
    if d.case == HangCase.PARTIAL_HANG:
        head = (f"hang ({severity}): {len(d.stuck) + len(d.silent)} rank(s) of job {job} stopped at "
                f"{step}{seq} {stalled:.0f}s ago while {len(d.stepping)} still step")
    else:
        if not p.completed_any:
            head = (f"hang ({severity}): job {job} has not completed its first step {stalled:.0f}s "
                    f"after it started{seq.replace(', ', ' (', 1) + ')' if seq else ''}")
        else:
            head = f"hang ({severity}): job {job} has completed no step for {stalled:.0f}s (after {step}{seq})"
    named = ", ".join(where(p, r) for r in d.culprits[:5]) + (" ..." if len(d.culprits) > 5 else "")
    if d.case == HangCase.SILENT_RANKS:
        first = d.culprits[0]
        hb = p.position(first).last_heartbeat
        when = f"last heartbeat at {hb:.3f}" if hb is not None else "never heard from"
        tail = f"silent: {named} ({when}); {len(d.waiting)} rank(s) wait in collective {d.collective_seq}"
    elif d.pause_phase is not None:
        tail = (f"culprit: {named} still in the {d.pause_phase} that {d.pause_left} rank(s) left"
                + (f" (they wait in collective {d.collective_seq})" if d.collective_seq is not None else ""))
    elif d.case == HangCase.CULPRIT_BEFORE_COLLECTIVE and d.process_group is not None:
        size = f"{len(d.process_group_ranks)} ranks" if d.process_group_ranks else "all ranks"
        tail = (f"culprit: {named} never reached collective {d.collective_seq} of process group "
                f"{pg_label(p, d.process_group)} ({size}) that {len(d.group_waiting)} of its rank(s) wait "
                f"in; {len(d.waiting) - len(d.group_waiting)} rank(s) wait in other groups")
        if len(d.blocked_groups) > 1:
            tail += "; it blocks " + ", ".join(f"{pg_label(p, name)} ({len(waiting)} waiting)"
                                               for name, _, _, waiting in d.blocked_groups[:6])
    elif d.case == HangCase.CULPRIT_BEFORE_COLLECTIVE:
        tail = (f"culprit: {named} never reached collective {d.collective_seq} that {len(d.waiting)} "
                f"rank(s) wait in")
    elif d.case == HangCase.PARTIAL_HANG:
        tail = f"stuck: {named}"
    else:
        tail = f"culprit undetermined: {d.reason}"
    if d.torn_down:
        tail += (f"; job torn down: {len(d.torn_down)} rank(s) went silent after the hang began, "
                 f"{'the culprit still sends heartbeats' if d.culprits_alive else 'the culprit is silent too'}")
    return f"{head}; {tail}"


def stack_note(culprits: tuple[int, ...], stacks: StackEvidence, awaiting: bool) -> str:
    """What the summary adds about the stacks: where the first culprit that answered is, and who did not
    answer (``awaiting``: answers are expected at all). Only a culprit's location goes in: a waiting
    rank's says where the job waits, not why."""
    note = ""
    culprit = next((r for r in culprits if str(r) in stacks.stacks), None)
    lines = stacks.stacks.get(str(culprit)) if culprit is not None else None
    if lines:
        note += f"; rank {culprit} is in {lines[-1]}"
    missing = stacks.missing
    if stacks.final and missing:
        note += f"; no stack from rank(s) {', '.join(str(r) for r in missing[:8])}"
    elif missing and awaiting:
        note += f"; stacks pending from rank(s) {', '.join(str(r) for r in missing[:8])}"
    return note
