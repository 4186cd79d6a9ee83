"""Who is where while a job is stuck: the culprit, the silent, the waiting, and the groups they block.

The hang rule (models/hang/detector.py) decides *that* a job is hung; this module says *who* is to blame,
from each rank's latest heartbeat and collective sequence numbers (models/hang/progress.py):

* ``silent_ranks``: ranks that sent nothing for the heartbeat timeout while the rest of the
  job still does (process dead, frozen, node unreachable);
* ``culprit_before_collective``: every rank is alive, and the ranks whose last issued
  collective (``seq_started``) is behind the others never reached the collective the rest
  are waiting in. With per-process-group sequence numbers (heartbeats' ``pgs``) this is decided
  group by group (``_pg_verdict``): the group whose members disagree holds the culprit, and a rank
  behind in one group but waiting in another is only waiting (docs/hang.md);
* ``partial_hang``: some live ranks are stuck while others still complete steps;
* ``undetermined``: the data cannot tell (no heartbeats, or every live rank at the same
  collective); the diagnosis says so instead of guessing.

``across_teardown`` keeps a named culprit when the job is torn down around it afterwards. Pure
functions of the progress state: nothing here changes it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..evidence import HangCase
from .progress import JobProgress

#: Groups listed in ``evidence.blocked_groups``.
MAX_BLOCKED_GROUPS = 32

#: The cases of a diagnosis (models/evidence.py ``HangCase``: the alert's ``evidence.case``).
CASES = tuple(HangCase)


@dataclass(frozen=True, slots=True)
class HangDiagnosis:
    """Who is where while a job is stuck (the localization part of a hang alert)."""

    case: HangCase
    reason: str
    culprits: tuple[int, ...]  # most likely cause first
    silent: tuple[int, ...]
    behind: tuple[int, ...]  # live ranks whose seq_started is behind the max
    waiting: tuple[int, ...]  # live ranks inside the max collective (started, not completed)
    stepping: tuple[int, ...]  # ranks still completing steps
    stuck: tuple[int, ...]  # live ranks not completing steps (partial hang)
    collective_seq: int | None  # the collective the waiting ranks are in (max seq_started of live ranks)
    heartbeat_timeout: float
    job_silent: bool
    process_group: str | None = None  # the group whose members disagree (holds the culprit)
    process_group_ranks: tuple[int, ...] | None = None  # its global ranks (None: every rank, the default group)
    group_waiting: tuple[int, ...] = ()  # ranks waiting in that group's collective
    other_groups: tuple[str, ...] = ()  # further disagreeing groups with culprits of their own
    torn_down: tuple[int, ...] = ()  # ranks that fell silent after the culprit was named (teardown)
    #: Every group a culprit blocks: ``(name, collective seq, its culprits, its waiting ranks)``, named group first.
    blocked_groups: tuple[tuple[str, int, tuple[int, ...], tuple[int, ...]], ...] = ()
    culprits_alive: bool = True  # the culprits still send heartbeats
    #: A hang inside a pause: the pause (``checkpoint``, ``eval``) the culprits are still in while most ranks left it,
    #: and how many left (models/hang/progress.py ``pause_stragglers``).
    pause_phase: str | None = None
    pause_left: int = 0




def diagnose(p: JobProgress, now: float, *, heartbeat_timeout: float, stuck_after: float,
             resumed_after: float | None = None, max_listed_ranks: int,
             hang_since: float | None = None) -> HangDiagnosis:
    """Classify every rank from its latest heartbeat and collective sequence numbers.

    ``resumed_after``: ranks whose step advanced after this time are the job coming back
    from the hang (the rest of the step's events not in yet), not ranks still stepping.
    ``hang_since``: when the job stopped. A rank still heard from a heartbeat timeout after it and silent
    now was torn down (NCCL's watchdog, the launcher): never a silent culprit; its last positions still
    count (the collective it waited in), and it is listed in ``torn_down``."""
    n = p.n
    hb_timeout = heartbeat_timeout
    ranks = p.rank_at[:n]
    step = p.last_step[:n]
    latest = min(p.latest_ts, now)  # an event stamped ahead of the clock is not "latest"
    # Silence is measured against the job's own latest event, so that ingestion lag or the
    # end of a recording does not make every rank look silent; a job that went quiet as a
    # whole is flagged instead.
    job_silent = bool(p.has_heartbeats and now - latest >= hb_timeout)
    if p.has_heartbeats:
        silent_mask = (latest - p.last_seen[:n]) >= hb_timeout
    else:
        silent_mask = np.zeros(n, dtype=bool)
    live = ~silent_mask
    torn_mask = np.zeros(n, dtype=bool)
    if hang_since is not None and p.has_heartbeats:
        torn_mask = silent_mask & (p.last_seen[:n] >= hang_since + hb_timeout)
        silent_mask = silent_mask & ~torn_mask
    present = live | torn_mask  # where it was when last heard of is evidence: alive, or alive into the hang
    seq = p.seq_started[:n]
    done = p.seq_completed[:n]
    with_seq = present & (seq >= 0)
    collective_seq = int(seq[with_seq].max()) if with_seq.any() else None
    if collective_seq is not None:
        behind_mask = with_seq & (seq < collective_seq)
        waiting_mask = with_seq & (seq == collective_seq) & (done < seq)
    else:
        behind_mask = waiting_mask = np.zeros(n, dtype=bool)
    gone = torn_mask & waiting_mask
    if gone.any():
        # A rank that issued the collective only after every rank torn down waiting in it was last heard of came too
        # late (a hung rank that went on, a frozen one resumed): its peers were gone, the collective cannot complete,
        # so it is behind it as before, not one more rank waiting in it.
        late = waiting_mask & live & (p.seq_at[:n] > p.last_seen[:n][gone].max())
        behind_mask, waiting_mask = behind_mask | late, waiting_mask & ~late
    dying = torn_mask & behind_mask
    if dying.any() and not (torn_mask & ~behind_mask).any() and not p.pg_seq:
        # The watchdog tears down the ranks that wait in the collective; while they all live, one behind it that fell
        # silent died by itself (OOM-killed, crashed: e.g. after heartbeating through a warm-up): a silent culprit,
        # with when it was last heard of (its node's OOM kill is read against that). (Several groups: their seqs
        # are not comparable.)
        torn_mask, silent_mask, behind_mask = torn_mask & ~dying, silent_mask | dying, behind_mask & ~dying
    known = step >= 0
    stepping_mask = known & live & p.stepped[:n] & ((now - p.rank_progress[:n]) < stuck_after)
    if resumed_after is not None:
        stepping_mask &= p.rank_progress[:n] <= resumed_after
    stuck_mask = known & live & ~stepping_mask
    if stepping_mask.any() and stuck_mask.any():
        # Ranks that finished the same last step as the stuck ones, only a moment later (a later heartbeat or
        # step event), stopped with them: "still stepping" means completing steps the stuck ranks do not.
        level = step[stuck_mask].max()
        same = stepping_mask & (step <= level)
        stuck_mask, stepping_mask = stuck_mask | same, stepping_mask & ~same
    if not p.has_heartbeats:
        stuck_mask = np.zeros(n, dtype=bool)  # without heartbeats, where a rank is is unknown
    # Lowest (seq, step) first: the rank furthest behind is the likeliest cause.
    order = np.lexsort((ranks, step, np.where(seq >= 0, seq, -1)))

    def pick(mask: np.ndarray) -> tuple[int, ...]:
        return tuple(int(ranks[i]) for i in order if mask[i])

    silent = pick(silent_mask) + p.unseen_ranks(max_listed_ranks)
    behind, waiting, stepping, stuck = pick(behind_mask), pick(waiting_mask), pick(stepping_mask), pick(
        stuck_mask)
    groups = _pg_verdict(p, present, order) if p.pg_seq else None
    pg_name = pg_ranks = None
    group_waiting: tuple[int, ...] = ()
    others: tuple[str, ...] = ()
    blocked: tuple = ()
    cycle = None
    if groups is not None:
        waiting = groups["waiting"]
        if groups["culprits"]:
            behind = groups["culprits"]
            pg_name, pg_ranks, collective_seq = groups["name"], groups["ranks"], groups["seq"]
            group_waiting, others, blocked = groups["group_waiting"], groups["others"], groups["blocked"]
        else:
            behind, cycle = (), groups["groups"]
    if not p.has_heartbeats:
        case, culprits = HangCase.UNDETERMINED, ()
        reason = "no heartbeats from this job: the ranks' positions are unknown, so no culprit is named"
    elif stepping and (stuck or silent):
        case = HangCase.PARTIAL_HANG
        stuck_set, behind_set = set(stuck), set(behind)
        culprits = silent + tuple(r for r in behind if r in stuck_set) + tuple(
            r for r in stuck if r not in behind_set)
        reason = (f"{len(stepping)} rank(s) still complete steps while {len(stuck) + len(silent)} "
                  f"do not")
    elif silent:
        case = HangCase.SILENT_RANKS
        culprits = silent + behind
        reason = (f"{len(silent)} rank(s) sent nothing for {hb_timeout:g}s while the others still send "
                  f"heartbeats (process dead, frozen, or node unreachable)")
    elif behind and pg_name is not None:
        case, culprits = HangCase.CULPRIT_BEFORE_COLLECTIVE, behind
        reason = (f"{len(behind)} live rank(s) never issued collective {collective_seq} of process group "
                  f"{pg_name}, which {len(group_waiting)} of its rank(s) started and wait in; "
                  f"{len(waiting) - len(group_waiting)} more rank(s) wait in other groups")
    elif behind:
        case, culprits = HangCase.CULPRIT_BEFORE_COLLECTIVE, behind
        reason = (f"{len(behind)} live rank(s) never issued collective {collective_seq}, which "
                  f"{len(waiting)} rank(s) started and wait in")
    else:
        case, culprits = HangCase.UNDETERMINED, ()
        if cycle:
            reason = (f"the ranks behind in process group(s) {', '.join(cycle[:4])} all wait in other "
                      f"groups' collectives (collectives issued in different orders?): no rank is simply "
                      f"behind")
        elif job_silent:
            reason = (f"every rank of the job went silent {now - latest:.0f}s ago (job killed, or "
                      f"its events no longer reach stepwatch)")
        elif collective_seq is None:
            reason = "heartbeats carry no collective sequence numbers: cannot tell which rank is behind"
        else:
            reason = f"every live rank is at collective {collective_seq}: cannot tell which rank is behind"
    torn_down: tuple[int, ...] = ()
    alive = True
    if torn_mask.any():
        accused = set(culprits)
        torn_down = tuple(r for r in pick(torn_mask) if r not in accused)
        gone = set(pick(torn_mask))
        alive = not job_silent and not any(r in gone for r in culprits)
        if torn_down:
            reason += (f"; then the job was torn down: {len(torn_down)} rank(s) went silent after the hang began (a "
                       f"watchdog or the launcher ending the job), never culprits")
    return HangDiagnosis(case=case, reason=reason, culprits=culprits, silent=silent, behind=behind,
                         waiting=waiting, stepping=stepping, stuck=stuck, collective_seq=collective_seq,
                         heartbeat_timeout=hb_timeout, job_silent=job_silent, process_group=pg_name,
                         process_group_ranks=pg_ranks, group_waiting=group_waiting, other_groups=others,
                         blocked_groups=blocked if case == HangCase.CULPRIT_BEFORE_COLLECTIVE else (),
                         torn_down=torn_down, culprits_alive=alive)


def _pg_verdict(p: JobProgress, live: np.ndarray, order: np.ndarray) -> dict | None:
    """Group by group: which groups' members disagree, and who is behind without waiting anywhere.

    A group disagrees when some live members started its collective N (the highest) and wait in
    it while others never started it. Those others are culprits unless they wait in a collective
    of another group (then that group's disagreement explains them). The group named is the most
    specific one holding a culprit: fewest members behind, then most members waiting on them
    (a rank stuck before its TP all-reduce: the TP group where 3 wait, not the DP pair where 1
    does), then fewest members. None when no group disagrees."""
    rank_slot = p.slot_of_rank
    # Every live rank inside a collective of some group, and where.
    in_collective: set[int] = set()
    for seqs in p.pg_seq.values():
        for slot, (started, completed) in seqs.items():
            if started > completed and live[slot]:
                in_collective.add(slot)
    found = []
    for name, seqs in p.pg_seq.items():
        members = dict(seqs)
        ranks = p.pg_ranks.get(name)
        if ranks is not None:  # a member that never reported the group has issued none of its collectives
            for r in ranks:
                slot = rank_slot.get(r)
                if slot is not None and slot not in members:
                    members[slot] = (0, 0)
        live_members = {slot: v for slot, v in members.items() if live[slot]}
        if len(live_members) < 2:
            continue
        top = max(started for started, _ in live_members.values())
        behind = [slot for slot, (started, _) in live_members.items() if started < top]
        waiting = [slot for slot, (started, completed) in live_members.items() if started == top and completed < top]
        if not behind or not waiting:
            continue
        culprits = [slot for slot in behind if slot not in in_collective]
        found.append((not culprits, len(behind), -len(waiting), len(members), name, top, set(culprits),
                      set(waiting)))
    if not found:
        return None
    found.sort(key=lambda f: f[:5])
    ranks_of = p.rank_at

    def pick(slots: set[int]) -> tuple[int, ...]:
        return tuple(int(ranks_of[i]) for i in order if i in slots)

    all_waiting = pick(in_collective)
    with_culprits = [f for f in found if f[6]]
    if not with_culprits:
        return {"culprits": (), "waiting": all_waiting, "groups": [f[4] for f in found]}
    name, top, culprits, waiting = with_culprits[0][4:]
    # Further groups only where they accuse someone else (the DP group behind a stuck TP rank
    # accuses that same rank: nothing new).
    others, named = [], set(culprits)
    for f in with_culprits[1:]:
        if f[6] - named:
            others.append(f)
            named |= f[6]
    more = named - culprits
    blocked = tuple((f[4], int(f[5]), pick(f[6]), pick(f[7])) for f in with_culprits[:MAX_BLOCKED_GROUPS])
    return {"culprits": pick(culprits) + pick(more), "waiting": all_waiting, "name": name,
            "ranks": p.pg_ranks.get(name), "seq": int(top), "group_waiting": pick(waiting),
            "others": tuple(f[4] for f in others), "groups": [f[4] for f in found], "blocked": blocked}


def across_teardown(named: HangDiagnosis, d: HangDiagnosis) -> HangDiagnosis:
    """Once a culprit is named, ranks that fall silent afterwards were torn down (NCCL's watchdog
    kills the waiting ranks while the stuck one lives on until the launcher's SIGKILL): the
    named culprit (``named``) stays, the alert says the job was torn down; else the fresh ``d``."""
    if d.case == HangCase.CULPRIT_BEFORE_COLLECTIVE or not (d.silent or d.job_silent):
        return d  # still alive and at their collectives: the fresh diagnosis is the better one
    before = set(named.silent)
    gone = tuple(r for r in d.silent if r not in before)
    if d.job_silent and not gone:  # every rank went quiet at once
        gone = tuple(r for r in named.waiting + named.culprits if r not in before)
    culprits = set(named.culprits)
    if not any(r not in culprits for r in gone):
        return d  # only the culprit went quiet (frozen, killed) while the rest wait: silent_ranks says it
    # (the culprits are not among the torn down: their silence is ``culprits_alive``; a rank dead in its step, named
    # behind the collective while its heartbeat timeout ran, was listed with the ranks that waited for it)
    gone = tuple(r for r in gone if r not in culprits)
    silent_now = set(d.silent)
    alive = not d.job_silent and not any(r in silent_now for r in named.culprits)
    reason = (f"{named.reason}; then the job was torn down: {len(gone)} rank(s) went silent after the "
              f"culprit was named (a watchdog or the launcher ending the job), "
              f"{'the culprit still sends heartbeats' if alive else 'the culprit is silent too'}")
    return replace(named, reason=reason, torn_down=gone, culprits_alive=alive, job_silent=d.job_silent,
                   heartbeat_timeout=d.heartbeat_timeout)
