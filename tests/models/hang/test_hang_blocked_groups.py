"""Which group a hang culprit blocks, named by what the heartbeats say of it, and the stack text while
answers are due (models/hang/detector.py, models/hang/stacks.py; issue 23 items 4 and 5).

The recording is written by hand here (not with the project's simulator): 8 ranks, tensor-parallel
groups {0-3} and {4-7} (``pg1``, ``pg2``, desc ``tp``), data-parallel pairs {i, i+4} (``pg3``..``pg6``,
desc ``dp``); each step issues 2 TP collectives then 1 DP collective. Rank 5 never issues the second
TP collective of step 10. Heartbeats go through the wire form (``pgs`` with ``desc``); one is lost
and some arrive out of order.
"""

from __future__ import annotations

import random

from stepwatch.models.wire.events import StackEvent, event_to_dict, parse_event
from stepwatch.models.hang.detector import HangDetector
from stepwatch.models.hang.stacks import culprit_stack

T0 = 1_810_000_000.0
JOB = "job-tpdp"
WORLD, STEPS, STUCK = 8, 10, 5


def tp(rank: int) -> tuple[str, list[int]]:
    return ("pg1", [0, 1, 2, 3]) if rank < 4 else ("pg2", [4, 5, 6, 7])


def dp(rank: int) -> tuple[str, list[int]]:
    return f"pg{3 + rank % 4}", [rank % 4, rank % 4 + 4]


def pgs(rank: int, *, hung: bool) -> dict:
    """A rank's groups after STEPS healthy steps, or during the hang in step STEPS."""
    tp_done, dp_done = 2 * STEPS, STEPS
    t = {"started": tp_done, "completed": tp_done}
    d = {"started": dp_done, "completed": dp_done}
    if hung:
        if rank == STUCK:
            t = {"started": tp_done + 1, "completed": tp_done + 1}  # never issues TP collective tp_done + 2
        elif rank >= 4:
            t = {"started": tp_done + 2, "completed": tp_done + 1}  # waits in it
        else:
            t = {"started": tp_done + 2, "completed": tp_done + 2}
            d = {"started": dp_done + 1, "completed": dp_done}  # waits in DP with its partner
    (tn, tr), (dn, dr) = tp(rank), dp(rank)
    return {tn: {**t, "ranks": tr, "desc": "tp"}, dn: {**d, "ranks": dr, "desc": "dp"}}


def heartbeat(rank: int, ts: float, step: int, *, hung: bool) -> dict:
    return {"v": 1, "kind": "heartbeat", "job": JOB, "rank": rank, "ts": ts, "step": step, "node": f"n{rank // 4}",
            "pgs": pgs(rank, hung=hung)}


def stack(rank: int, ts: float, request_id: str, where: str) -> StackEvent:
    return parse_event({"v": 1, "kind": "stack", "job": JOB, "rank": rank, "ts": ts, "request_id": request_id,
                        "node": f"n{rank // 4}", "threads": [{"name": "MainThread", "frames": [
                            {"file": "train.py", "line": 40, "function": "main"},
                            {"file": "train.py", "line": 90 if where == "stuck" else 120,
                             "function": "load_batch" if where == "stuck" else "all_reduce"}]}]})


def run(answers: dict[int, float]) -> tuple[list, list]:
    """The hang, checked each second; ``answers``: rank -> seconds after the stack request it answers."""
    rng = random.Random(3)
    det = HangDetector(job=JOB, stacks=True, stack_timeout_seconds=10.0)
    alerts, requests = [], []
    for step in range(STEPS):
        t = T0 + step + 1
        for r in range(WORLD):
            det.update(parse_event({"v": 1, "kind": "step", "job": JOB, "rank": r, "step": step,
                                    "ts": t + rng.uniform(0, 0.01), "step_time": 1.0, "node": f"n{r // 4}",
                                    "world_size": WORLD}))
        alerts.extend(det.check(t))
    last = T0 + STEPS
    asked_at = None
    for k in range(1, 61):
        now = last + k
        batch = [heartbeat(r, now + rng.uniform(-0.01, 0.01), STEPS - 1, hung=True) for r in range(WORLD)
                 if (k, r) != (12, 2)]  # one lost
        if k % 5 == 0:
            batch.reverse()
        for raw in batch:
            event = parse_event(wire_round_trip(raw))
            alerts.extend(det.update(event))
        if asked_at is not None:
            for r, after in answers.items():
                if asked_at + after <= now < asked_at + after + 1:
                    det.update(stack(r, now, requests[0].request_id, "stuck" if r == STUCK else "waiting"))
        alerts.extend(det.check(now))
        for request in det.take_stack_requests():
            requests.append(request)
            det.mark_sent(request.request_id)
            asked_at = asked_at or now
    return alerts, requests


def wire_round_trip(raw: dict) -> dict:
    """The heartbeat as it comes off the wire: parsed, written back, parsed again (``desc`` survives)."""
    return event_to_dict(parse_event(raw))


def test_the_group_named_is_the_one_where_most_ranks_wait_and_every_blocked_group_is_listed():
    alerts, _ = run({})
    fired = [a for a in alerts if a.type == "hang" and a.status == "firing"]
    assert fired
    ev = fired[0].evidence
    assert ev["case"] == "culprit_before_collective", ev["reason"]
    assert [c["rank"] for c in ev["culprits"]] == [STUCK]
    # The TP group where 3 ranks wait on rank 5, not the DP pair {1, 5} where 1 does.
    assert ev["process_group"] == "pg2" and ev["process_group_desc"] == "tp"
    assert ev["process_group_ranks"] == [4, 5, 6, 7]
    assert ev["process_group_waiting"]["ranks"] == [4, 6, 7]
    blocked = {g["group"]: g for g in ev["blocked_groups"]}
    assert set(blocked) == {"pg2", "pg4"}
    assert blocked["pg2"]["desc"] == "tp" and blocked["pg2"]["waiting"]["ranks"] == [4, 6, 7]
    assert blocked["pg4"]["desc"] == "dp" and blocked["pg4"]["waiting"]["ranks"] == [1]
    assert blocked["pg4"]["culprits"] == [STUCK] and blocked["pg4"]["ranks"] == [1, 5]
    assert ev["blocked_groups"][0]["group"] == "pg2"
    assert "process group tp (pg2)" in fired[0].summary
    assert "it blocks tp (pg2) (3 waiting), dp (pg4) (1 waiting)" in fired[0].summary


def test_stacks_are_pending_until_due_and_the_summary_gives_only_the_culprits_location():
    # The waiting rank 4 answers within a second; the culprit's answer takes 7 s (its Flight Recorder dump first).
    alerts, requests = run({4: 1.0, 6: 2.0, 7: 2.0, STUCK: 7.0})
    assert len(requests) == 1 and requests[0].ranks[0] == STUCK
    versions = [a for a in alerts if a.type == "hang" and a.status == "firing" and "stack_request" in a.evidence]
    before = [a for a in versions if str(STUCK) not in a.evidence["stacks"]]
    after = [a for a in versions if str(STUCK) in a.evidence["stacks"]]
    assert before and after
    for alert in before:
        assert "stack_missing" not in alert.evidence and "no stack from" not in alert.summary
        if alert.evidence["stacks"]:
            assert STUCK in alert.evidence["stack_pending"]
            assert "stacks pending from rank(s) 5" in alert.summary
        assert " is in " not in alert.summary  # rank 4's all_reduce is not where the job is stuck
        assert culprit_stack(alert.evidence) is None
    last = after[-1]
    assert "rank 5 is in train.py:90 load_batch" in last.summary
    assert "stack_pending" not in last.evidence and last.evidence["stack_missing"] == []
    assert culprit_stack(last.evidence) == ("5", ["train.py:40 main", "train.py:90 load_batch"])


def test_a_culprit_that_never_answers_is_missing_once_due():
    alerts, _ = run({4: 1.0, 6: 1.0, 7: 1.0})
    versions = [a for a in alerts if a.type == "hang" and a.status == "firing" and "stack_request" in a.evidence]
    assert versions[-1].evidence["stack_missing"] == [STUCK]
    assert "no stack from rank(s) 5" in versions[-1].summary and " is in " not in versions[-1].summary
