"""The hang alert's evidence as typed records: what the rule writes, field by field, and its wire form.

The hang rule (models/hang/detector.py) builds one ``HangAlertEvidence`` per version of its alert: the
diagnosis (models/hang/diagnosis.py) with each named rank's position (models/hang/progress.py), the
process group it blocks, the stacks gathered (models/hang/stack_requests.py) and, once it ends, how it
ended. ``to_dict`` is the alert's ``evidence`` on the wire (docs/alerts.md), written where the alert is
made: the records fix the names, types and order of the keys in one place, and the wire format is the
one the dict-building code wrote before (same keys, same order, optional keys absent rather than null
where they were absent). Modules that act on a hang alert read it back through models/evidence.py
``HangEvidence``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .case import HangCase
from ..resolution import Resolution


class CulpritState(StrEnum):
    """Why a culprit is named (``evidence.culprits[].state``)."""

    SILENT = "silent"  # sent nothing for the heartbeat timeout
    BEHIND = "behind"  # alive, but never issued the collective the others wait in
    STUCK = "stuck"  # alive, but no longer completes steps while others do


@dataclass(frozen=True, slots=True)
class RankPosition:
    """Where one rank was last seen (``evidence.silent[]``, the base of ``evidence.culprits[]``); None: unknown."""

    rank: int
    node: str | None = None
    step: int | None = None
    seq_started: int | None = None
    seq_completed: int | None = None
    last_heartbeat: float | None = None
    last_seen: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "node": self.node, "step": self.step, "seq_started": self.seq_started,
                "seq_completed": self.seq_completed, "last_heartbeat": self.last_heartbeat,
                "last_seen": self.last_seen}


@dataclass(frozen=True, slots=True)
class Culprit:
    """A rank the alert names as the cause: its position, why, and its numbers in the named process group."""

    position: RankPosition
    state: CulpritState
    pg_seq: tuple[int, int] | None = None  # (started, completed) in ``evidence.process_group``, when it reported

    def to_dict(self) -> dict[str, Any]:
        out = self.position.to_dict()
        out["state"] = self.state
        if self.pg_seq is not None:
            out["pg_seq_started"], out["pg_seq_completed"] = self.pg_seq
        return out


@dataclass(frozen=True, slots=True)
class RankList:
    """A category of ranks: the full count, the ranks listed up to ``max_listed_ranks``."""

    count: int
    ranks: tuple[int, ...]

    @classmethod
    def of(cls, ranks: tuple[int, ...], cap: int) -> "RankList":
        return cls(count=len(ranks), ranks=tuple(ranks[:cap]))

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "ranks": list(self.ranks)}


@dataclass(frozen=True, slots=True)
class TornDown:
    """Ranks that went silent after the culprit was named (``evidence.torn_down``)."""

    ranks: RankList
    culprits_alive: bool  # the culprits still send heartbeats

    def to_dict(self) -> dict[str, Any]:
        return dict(self.ranks.to_dict(), culprits_alive=self.culprits_alive)


@dataclass(frozen=True, slots=True)
class BlockedGroup:
    """A process group a culprit blocks (``evidence.blocked_groups[]``)."""

    group: str
    desc: str | None
    collective_seq: int
    ranks: tuple[int, ...] | None  # the group's global ranks, listed up to the cap (None: not told)
    culprits: tuple[int, ...]
    waiting: RankList

    def to_dict(self) -> dict[str, Any]:
        return {"group": self.group, "desc": self.desc, "collective_seq": self.collective_seq,
                "ranks": list(self.ranks) if self.ranks is not None else None, "culprits": list(self.culprits),
                "waiting": self.waiting.to_dict()}


@dataclass(frozen=True, slots=True)
class ProcessGroupEvidence:
    """The process group whose members disagree: it holds the culprit (``evidence.process_group*``)."""

    name: str
    ranks: tuple[int, ...] | None  # its global ranks (None: every rank, the default group)
    waiting: RankList  # its ranks waiting in its collective
    desc: str | None = None  # its description from the heartbeats, when known
    others: tuple[str, ...] = ()  # further disagreeing groups with culprits of their own
    blocked: tuple[BlockedGroup, ...] = ()  # every group a culprit blocks, this one first

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"process_group": self.name,
                               "process_group_ranks": list(self.ranks) if self.ranks else None,
                               "process_group_waiting": self.waiting.to_dict()}
        if self.desc is not None:
            out["process_group_desc"] = self.desc
        if self.others:
            out["other_process_groups"] = list(self.others)
        if self.blocked:
            out["blocked_groups"] = [g.to_dict() for g in self.blocked]
        return out


@dataclass(frozen=True, slots=True)
class StackEvidence:
    """The stacks asked of the job's ranks for this hang and what came back (``evidence.stack*``)."""

    request_id: str
    requested: tuple[int, ...]  # every rank asked, over all requests of the episode
    requested_at: float
    stacks: dict[str, list[str]]  # rank -> its training thread's innermost frames, culprits first
    flight_recorder: dict[str, Any]  # rank -> its Flight Recorder dump, for the ranks that sent one
    missing: tuple[int, ...]  # asked, no answer yet
    final: bool  # every asked rank answered or the timeout passed: ``missing`` are missing, not pending
    due_at: float  # when the answers are due

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"stack_request": {"request_id": self.request_id, "ranks": list(self.requested),
                                                 "requested_at": self.requested_at},
                               "stacks": self.stacks}
        if self.flight_recorder:
            out["flight_recorder"] = self.flight_recorder
        if self.final:
            out["stack_missing"] = list(self.missing)
        elif self.missing:
            # Not due yet (answers take seconds: a Flight Recorder dump may come first): pending, not missing.
            out["stack_pending"] = list(self.missing)
            out["stack_due_at"] = self.due_at
        return out


@dataclass(frozen=True, slots=True)
class HangEnd:
    """How the hang ended (the resolved alert's ``evidence.resolved_step``, ``hung_seconds``, ``resolution``)."""

    resolved_step: int | None
    hung_seconds: float
    resolution: Resolution

    def to_dict(self) -> dict[str, Any]:
        return {"resolved_step": self.resolved_step, "hung_seconds": self.hung_seconds,
                "resolution": self.resolution}


@dataclass(frozen=True, slots=True)
class HangAlertEvidence:
    """Everything a hang alert's ``evidence`` holds, as the rule wrote it (docs/hang.md lists the fields).

    Times are event times on the job's clock (rounded to the microsecond), durations in seconds.
    """

    case: HangCase
    reason: str
    stalled_since: float
    stalled_seconds: float
    checked_at: float
    step: int | None  # the step the job (or the stuck ranks) stopped at
    job_step: int | None  # the job's step counter
    collective_seq: int | None  # the collective the waiting ranks are in
    phase: str
    timeout: str  # which timeout applies: first_step, checkpoint, or the job's phase
    warning_after_seconds: float | None
    critical_after_seconds: float
    p99_step_time: float | None
    step_samples: int
    heartbeat_timeout_seconds: float
    job_silent: bool
    ranks_known: int
    world_size: int | None
    culprits: tuple[Culprit, ...]
    silent: tuple[RankPosition, ...]
    behind: RankList
    waiting: RankList
    stepping: RankList
    stuck: RankList
    lost_nodes: tuple[str, ...] = ()  # nodes all of whose ranks are silent
    torn_down: TornDown | None = None
    process_group: ProcessGroupEvidence | None = None
    stacks: StackEvidence | None = None
    end: HangEnd | None = None  # set on the resolved alert

    def to_dict(self) -> dict[str, Any]:
        """The alert's ``evidence`` (wire form)."""
        out: dict[str, Any] = {
            "case": self.case,
            "reason": self.reason,
            "stalled_since": self.stalled_since,
            "stalled_seconds": self.stalled_seconds,
            "checked_at": self.checked_at,
            "step": self.step,
            "job_step": self.job_step,
            "collective_seq": self.collective_seq,
            "phase": self.phase,
            "timeout": self.timeout,
            "warning_after_seconds": self.warning_after_seconds,
            "critical_after_seconds": self.critical_after_seconds,
            "p99_step_time": self.p99_step_time,
            "step_samples": self.step_samples,
            "heartbeat_timeout_seconds": self.heartbeat_timeout_seconds,
            "job_silent": self.job_silent,
            "ranks_known": self.ranks_known,
            "world_size": self.world_size,
            "culprits": [c.to_dict() for c in self.culprits],
            "silent": [s.to_dict() for s in self.silent],
            "behind": self.behind.to_dict(),
            "waiting": self.waiting.to_dict(),
            "stepping": self.stepping.to_dict(),
            "stuck": self.stuck.to_dict(),
        }
        if self.lost_nodes:
            out["lost_nodes"] = list(self.lost_nodes)
        if self.torn_down is not None:
            out["torn_down"] = self.torn_down.to_dict()
        if self.process_group is not None:
            out.update(self.process_group.to_dict())
        if self.stacks is not None:
            out.update(self.stacks.to_dict())
        if self.end is not None:
            out.update(self.end.to_dict())
        return out
