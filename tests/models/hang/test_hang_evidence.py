"""The hang alert's evidence written through its typed record (models/hang/evidence.py): the wire form keeps its
keys, their order and which of them are left out, and reads back through the readers' record (models/evidence.py).

The job is driven by hand here (not with the project's simulator): 8 ranks in two tensor-parallel groups of 4
(``tp0``, ``tp1``, described ``tp``) and the default group, heartbeats every second as wire records (through
``parse_event``, so the decoder's shapes are the ones the rule sees), a few lost, a few out of order, and rank 5
stuck before its TP group's collective; its stack comes back, rank 4's never does.
"""

from __future__ import annotations

import random

from stepwatch.models.evidence import HangCase, HangEvidence
from stepwatch.models.hang.detector import HangDetector
from stepwatch.models.hang.evidence import (Culprit, CulpritState, HangAlertEvidence, HangEnd, RankList, RankPosition,
                                           StackEvidence)
from stepwatch.models.resolution import Resolution
from stepwatch.models.wire.events import parse_event

T0 = 1_760_000_000.0
JOB = "job-ev"
WORLD, TP, STEPS, STUCK = 8, 4, 12, 5

#: The keys of a hang alert's evidence in the order the rule wrote them before it wrote through records
#: (``stepwatch replay`` output of the same commit): consumers that print the evidence see the same record.
FIRING_KEYS = ["case", "reason", "stalled_since", "stalled_seconds", "checked_at", "step", "job_step", "collective_seq",
               "phase", "timeout", "warning_after_seconds", "critical_after_seconds", "p99_step_time", "step_samples",
               "heartbeat_timeout_seconds", "job_silent", "ranks_known", "world_size", "culprits", "silent", "behind",
               "waiting", "stepping", "stuck", "process_group", "process_group_ranks", "process_group_waiting",
               "process_group_desc", "blocked_groups", "stack_request", "stacks"]
CULPRIT_KEYS = ["rank", "node", "step", "seq_started", "seq_completed", "last_heartbeat", "last_seen", "state",
                "pg_seq_started", "pg_seq_completed"]


def node(rank: int) -> str:
    return f"n{rank // 4}"


def pgs(rank: int, step: int, *, hung: bool) -> dict:
    group = rank // TP
    done = 2 * (step + 1)
    tp = {"started": done, "completed": done, "ranks": list(range(group * TP, (group + 1) * TP)), "desc": "tp"}
    default = {"started": step + 1, "completed": step + 1}
    if hung and group == STUCK // TP:
        # rank 5 never issues its group's next collective; its 3 peers started it and wait in it
        tp = dict(tp, started=done if rank == STUCK else done + 1)
    elif hung:
        default = {"started": step + 2, "completed": step + 1}  # the other group waits in the next DP collective
    return {"default": default, f"tp{group}": tp}


class Job:
    def __init__(self, seed: int = 3) -> None:
        self.rng = random.Random(seed)
        self.det = HangDetector(job=JOB, timeout_seconds=60.0, stacks=True, stack_timeout_seconds=10.0)
        self.now = T0
        self.alerts = []

    def feed(self, records: list[dict]) -> None:
        if self.rng.random() < 0.3:
            self.rng.shuffle(records)  # delivered out of order
        for record in records:
            self.alerts.extend(self.det.update(parse_event(record)))

    def tick(self) -> None:
        self.alerts.extend(self.det.check(self.now))
        for request in self.det.take_stack_requests():
            self.det.mark_sent(request.request_id)

    def heartbeat(self, rank: int, step: int, *, hung: bool) -> dict:
        return {"v": 1, "kind": "heartbeat", "job": JOB, "rank": rank, "ts": self.now + self.rng.uniform(-0.01, 0.01),
                "step": step, "node": node(rank), "pgs": pgs(rank, step, hung=hung)}

    def steps(self, first: int, last: int) -> None:
        for step in range(first, last):
            self.now += 1.0
            records = [{"v": 1, "kind": "step", "job": JOB, "rank": r, "step": step, "ts": self.now, "step_time": 1.0,
                        "node": node(r), "world_size": WORLD} for r in range(WORLD)]
            self.feed(records + [self.heartbeat(r, step, hung=False) for r in range(WORLD)])
            self.tick()

    def hang(self, seconds: int, *, answer_at: int) -> None:
        for k in range(1, seconds + 1):
            self.now += 1.0
            self.feed([self.heartbeat(r, STEPS - 1, hung=True) for r in range(WORLD) if self.rng.random() > 0.05])
            if k == answer_at:
                request_id = self.det.stack_requests.round.request.request_id
                self.feed([{"v": 1, "kind": "stack", "job": JOB, "rank": STUCK, "ts": self.now, "node": node(STUCK),
                            "request_id": request_id, "threads": [{"name": "MainThread", "frames": [
                                {"file": "train.py", "line": 70, "function": "train_step"},
                                {"file": "data.py", "line": 12, "function": "load_shard"}]}]}])
            self.tick()


def hung_job() -> Job:
    job = Job()
    job.steps(0, STEPS)
    job.hang(80, answer_at=45)
    job.steps(STEPS, STEPS + 3)  # rank 5 comes back: the job steps again
    return job


def test_the_evidence_keeps_its_keys_order_and_leaves_out_what_it_left_out():
    alerts = hung_job().alerts
    firing = [a for a in alerts if a.status == "firing"]
    assert firing and firing[0].severity == "warning" and firing[-1].severity == "critical"
    ev = firing[-1].evidence
    assert ev["case"] == "culprit_before_collective" and [c["rank"] for c in ev["culprits"]] == [STUCK]
    # rank 5 answered, rank 4 (waiting) never did: after the stack timeout it is missing, not pending
    assert list(ev) == FIRING_KEYS + ["stack_missing"]
    assert list(ev["culprits"][0]) == CULPRIT_KEYS and ev["culprits"][0]["state"] == "behind"
    assert ev["process_group"] == "tp1" and ev["process_group_desc"] == "tp"
    assert ev["stacks"] == {str(STUCK): ["train.py:70 train_step", "data.py:12 load_shard"]}
    assert ev["stack_missing"] and STUCK not in ev["stack_missing"]
    assert "rank 5 is in data.py:12 load_shard" in firing[-1].summary
    # while the answers were not due yet, the same alert said pending (and when they are due)
    pending = [a.evidence for a in firing if "stack_pending" in a.evidence]
    assert pending and list(pending[0])[-2:] == ["stack_pending", "stack_due_at"]
    # never both, and no key the case does not have
    for a in firing:
        assert not ({"stack_missing", "stack_pending"} <= a.evidence.keys())
        assert not {"lost_nodes", "torn_down", "other_process_groups", "flight_recorder"} & a.evidence.keys()
    resolved = [a for a in alerts if a.status == "resolved"]
    assert len(resolved) == 1 and resolved[0].id == firing[0].id
    end = resolved[0].evidence
    assert list(end) == list(ev) + ["resolved_step", "hung_seconds", "resolution"]
    assert end["resolution"] == "recovered" and end["resolved_step"] >= STEPS
    assert end["hung_seconds"] == round(resolved[0].ends_at - end["stalled_since"], 3)


def test_the_evidence_reads_back_through_the_readers_record():
    alerts = hung_job().alerts
    for alert in alerts:
        record = HangEvidence.of(alert, strict=True)
        assert record.case is HangCase(alert.evidence["case"])
        assert record.stalled_since == alert.evidence["stalled_since"]
        assert record.culprit_nodes == tuple(c["node"] for c in alert.evidence["culprits"])
    assert HangEvidence.of(alerts[-1]).culprit_nodes == (node(STUCK),)


def _record(**changes) -> HangAlertEvidence:
    base = dict(case=HangCase.SILENT_RANKS, reason="r", stalled_since=1.0, stalled_seconds=2.0, checked_at=3.0,
                step=None, job_step=None, collective_seq=None, phase="train", timeout="first_step",
                warning_after_seconds=None, critical_after_seconds=600.0, p99_step_time=None, step_samples=0,
                heartbeat_timeout_seconds=15.0, job_silent=False, ranks_known=1, world_size=None,
                culprits=(Culprit(RankPosition(rank=3), CulpritState.SILENT),), silent=(RankPosition(rank=3),),
                behind=RankList.of((), 32), waiting=RankList.of((), 32), stepping=RankList.of((), 32),
                stuck=RankList.of((), 32))
    return HangAlertEvidence(**(base | changes))


def test_optional_parts_are_absent_not_null_and_nulls_stay_null():
    out = _record().to_dict()
    assert out["step"] is None and out["world_size"] is None and out["p99_step_time"] is None  # always there
    assert out["culprits"] == [{"rank": 3, "node": None, "step": None, "seq_started": None, "seq_completed": None,
                                "last_heartbeat": None, "last_seen": None, "state": "silent"}]
    for key in ("lost_nodes", "torn_down", "process_group", "stack_request", "stacks", "resolution"):
        assert key not in out
    stacks = StackEvidence(request_id="a/1", requested=(3, 4), requested_at=5.0, stacks={}, flight_recorder={},
                           missing=(3, 4), final=False, due_at=15.0)
    assert _record(stacks=stacks).to_dict()["stack_pending"] == [3, 4]
    final = _record(stacks=StackEvidence(**{**{f: getattr(stacks, f) for f in StackEvidence.__slots__}, "final": True}))
    assert final.to_dict()["stack_missing"] == [3, 4] and "stack_pending" not in final.to_dict()
    ended = _record(end=HangEnd(resolved_step=None, hung_seconds=9.5, resolution=Resolution.JOB_ENDED)).to_dict()
    assert list(ended)[-3:] == ["resolved_step", "hung_seconds", "resolution"] and ended["resolution"] == "job_ended"


def test_ranks_that_stopped_at_the_same_step_a_moment_later_are_not_still_stepping():
    """All ranks stop at step 11; some finished it (or sent a heartbeat) a few ms after the others. Once the
    first ones pass the stuck timeout, the later ones are not "ranks still completing steps": the job hangs
    as a whole, and its first page names the culprit, not a partial hang with every rank stuck."""
    firing = [a for a in hung_job().alerts if a.status == "firing"]
    assert [a.evidence["case"] for a in firing] == ["culprit_before_collective"] * len(firing)
    assert [c["rank"] for c in firing[0].evidence["culprits"]] == [STUCK]
