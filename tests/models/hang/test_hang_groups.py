"""Culprits by process group and stacks on demand, in the pure core (models/hang/detector.py) and in replay.

Recordings are written by hand here (not with the project's simulator): 32 ranks in 4
tensor-parallel groups of 8 (``tp0``..``tp3``) and one data-parallel group over all ranks (the
default group), heartbeats carrying ``pgs`` as the rank monitor sends them, with jittered
clocks, a lost heartbeat and a few delivered out of order.
"""

from __future__ import annotations

import random

import orjson

from stepwatch.config import HangSettings, Settings
from engine_driver import replay
from stepwatch.models.detection import DetectionEngine
from stepwatch.models.wire.events import decode_message, event_to_dict, parse_event
from stepwatch.models.hang.detector import HangDetector
from stepwatch.models.hang.stacks import parse_request

T0 = 1_800_000_000.0
JOB = "job-pg"
WORLD, TP = 32, 8
STEPS = 10  # steps 0..9 complete; the job hangs in step 10


def tp_of(rank: int) -> int:
    return rank // TP


def tp_ranks(rank: int) -> list[int]:
    g = tp_of(rank)
    return list(range(g * TP, (g + 1) * TP))


def positions(stuck_tp_rank: int | None = None, stuck_dp_rank: int | None = None) -> dict[int, dict]:
    """Each rank's ``pgs`` during the hang in step 10 (2 TP collectives and 1 DP collective a step).

    ``stuck_tp_rank`` never issues its TP group's second collective of step 10: its TP peers wait in
    it, the other TP groups finish theirs and wait in the DP collective. ``stuck_dp_rank`` finishes
    its TP collectives and never issues the DP collective that everyone else waits in."""
    tp_done, dp_done = 2 * STEPS, STEPS  # completed by everyone before step 10
    out = {}
    for r in range(WORLD):
        tp = {"started": tp_done + 2, "completed": tp_done + 2}
        dp = {"started": dp_done + 1, "completed": dp_done}  # waiting in DP collective 11
        if stuck_tp_rank is not None and tp_of(r) == tp_of(stuck_tp_rank):
            dp = {"started": dp_done, "completed": dp_done}
            if r == stuck_tp_rank:
                tp = {"started": tp_done + 1, "completed": tp_done + 1}
            else:
                tp = {"started": tp_done + 2, "completed": tp_done + 1}  # waiting in TP collective 22
        if r == stuck_dp_rank:
            dp = {"started": dp_done, "completed": dp_done}
        out[r] = {"default": dp, f"tp{tp_of(r)}": dict(tp, ranks=tp_ranks(r))}
    return out


def healthy(step: int) -> dict[int, dict]:
    return {r: {"default": {"started": step + 1, "completed": step + 1},
                f"tp{tp_of(r)}": {"started": 2 * (step + 1), "completed": 2 * (step + 1), "ranks": tp_ranks(r)}}
            for r in range(WORLD)}


def recording(pgs_during_hang: dict[int, dict], *, legacy: bool = False, hang_seconds: int = 60,
              stacks: dict[int, list[tuple[str, int, str]]] | None = None, stack_at: float = 40.0) -> list[dict]:
    """Wire-form events, in arrival order. ``legacy``: the older ``seqs`` field instead of ``pgs``."""
    rng = random.Random(7)
    events: list[dict] = []

    def hb(r: int, ts: float, step: int, pgs: dict) -> dict:
        event = {"v": 1, "kind": "heartbeat", "job": JOB, "rank": r, "ts": ts, "step": step, "node": f"n{r // 8}"}
        if legacy:
            event["seqs"] = {name: [v["started"], v["completed"]] for name, v in pgs.items()}
        else:
            event["pgs"] = pgs
        return event

    for step in range(STEPS):
        t = T0 + step + 1
        batch = []
        for r in range(WORLD):
            ts = t + rng.uniform(-0.02, 0.02)  # ranks' clocks differ a little
            batch.append({"v": 1, "kind": "step", "job": JOB, "rank": r, "step": step, "ts": ts,
                          "step_time": 1.0 + rng.uniform(-0.05, 0.05), "node": f"n{r // 8}", "world_size": WORLD})
            batch.append(hb(r, ts + 0.01, step, healthy(step)[r]))
        events.extend(batch)
    last = T0 + STEPS
    for k in range(1, hang_seconds + 1):
        batch = [hb(r, last + k + rng.uniform(-0.02, 0.02), STEPS - 1, pgs_during_hang[r]) for r in range(WORLD)
                 if not (k == 20 and r == 3)]  # one heartbeat lost
        if k % 7 == 0:
            batch.reverse()  # delivered out of order
        events.extend(batch)
        if stacks and k == stack_at:
            for r, frames in stacks.items():
                events.append({"v": 1, "kind": "stack", "job": JOB, "rank": r, "ts": last + k, "request_id": "w0/1",
                               "node": f"n{r // 8}", "threads": [
                                   {"name": "MainThread", "frames": [
                                       {"file": f, "line": ln, "function": fn} for f, ln, fn in frames]},
                                   {"name": "stepwatch-heartbeat-r%d" % r, "frames": [
                                       {"file": "threading.py", "line": 331, "function": "wait"}]}]})
    return events


def run(events: list[dict], **hang) -> list:
    settings = Settings(hang=HangSettings(**hang))
    return list(replay((parse_event(e) for e in events), settings=settings))


def hangs(alerts):
    return [a for a in alerts if a.type == "hang"]


def test_rank_stuck_before_its_tp_collective_is_named_alone_first_with_its_group():
    alerts = hangs(run(recording(positions(stuck_tp_rank=13))))
    assert alerts, "no hang alert"
    first = alerts[0]
    assert first.severity == "warning" and first.status == "firing"
    ev = first.evidence
    assert ev["case"] == "culprit_before_collective", ev["reason"]
    assert [c["rank"] for c in ev["culprits"]] == [13]
    assert first.ranks[0] == 13
    assert ev["process_group"] == "tp1" and ev["process_group_ranks"] == list(range(8, 16))
    assert ev["collective_seq"] == 2 * STEPS + 2
    assert ev["culprits"][0]["pg_seq_started"] == 2 * STEPS + 1
    # Its 7 TP peers wait in the TP collective; the 24 others wait in the DP collective: all waiting, none accused.
    assert ev["process_group_waiting"]["ranks"] == [8, 9, 10, 11, 12, 14, 15]
    assert sorted(ev["waiting"]["ranks"]) == sorted(set(range(WORLD)) - {13})
    assert "rank 13" in first.summary and "process group tp1" in first.summary
    assert all([c["rank"] for c in a.evidence["culprits"]] == [13] for a in alerts if a.status == "firing")
    assert "other_process_groups" not in ev  # the DP group's disagreement is explained by rank 13 too


def test_two_stuck_ranks_in_two_tp_groups_are_both_named():
    pos = positions(stuck_tp_rank=13)
    other = positions(stuck_tp_rank=26)
    for r in range(24, 32):
        pos[r] = other[r]
    ev = hangs(run(recording(pos)))[0].evidence
    assert [c["rank"] for c in ev["culprits"]] == [13, 26]
    assert ev["process_group"] == "tp1" and ev["other_process_groups"] == ["tp3"]


def test_rank_stuck_before_the_dp_collective_names_the_dp_group():
    alerts = hangs(run(recording(positions(stuck_dp_rank=21))))
    assert alerts
    ev = alerts[0].evidence
    assert ev["case"] == "culprit_before_collective"
    assert [c["rank"] for c in ev["culprits"]] == [21] and alerts[0].ranks[0] == 21
    assert ev["process_group"] == "default" and ev["process_group_ranks"] is None
    assert ev["collective_seq"] == STEPS + 1
    assert len(ev["process_group_waiting"]["ranks"]) == WORLD - 1


def test_older_seqs_field_gives_the_same_culprit():
    alerts = hangs(run(recording(positions(stuck_tp_rank=13), legacy=True)))
    ev = alerts[0].evidence
    assert [c["rank"] for c in ev["culprits"]] == [13] and ev["process_group"] == "tp1"


def test_default_group_only_still_accuses_the_whole_tp_group():
    """Seen through the default group only, the 8 ranks of TP group 1 are all behind (why pgs exist)."""
    events = recording(positions(stuck_tp_rank=13))
    for e in events:
        if e["kind"] == "heartbeat":
            default = e.pop("pgs")["default"]
            e["seq_started"], e["seq_completed"] = default["started"], default["completed"]
    ev = hangs(run(events))[0].evidence
    assert sorted(c["rank"] for c in ev["culprits"]) == list(range(8, 16))
    assert "process_group" not in ev


def test_ranks_waiting_for_each_other_across_groups_is_undetermined():
    # Rank 0 waits in tp0's collective 22 that rank 1 never issued; rank 1 waits in DP collective 11
    # that rank 0 never issued: a collective order mismatch, nobody is simply behind.
    pos = positions()
    pos[0] = {"default": {"started": STEPS, "completed": STEPS},
              "tp0": {"started": 2 * STEPS + 2, "completed": 2 * STEPS + 1, "ranks": tp_ranks(0)}}
    pos[1] = {"default": {"started": STEPS + 1, "completed": STEPS},
              "tp0": {"started": 2 * STEPS + 1, "completed": 2 * STEPS + 1, "ranks": tp_ranks(1)}}
    ev = hangs(run(recording(pos)))[0].evidence
    assert ev["case"] == "undetermined" and ev["culprits"] == []
    assert "other groups" in ev["reason"]


def test_stack_request_for_culprit_and_waiting_ranks_then_alert_carries_the_stacks():
    frames = [("train.py", 88, "<module>"), ("train.py", 61, "train_step"), ("model.py", 240, "forward"),
              ("model.py", 190, "load_shard_slowly")]
    waiting = [("train.py", 88, "<module>"), ("train.py", 61, "train_step"),
               ("torch/distributed/distributed_c10d.py", 2501, "all_reduce")]
    events = recording(positions(stuck_tp_rank=13), stacks={13: frames, 8: waiting, 9: waiting})
    settings = Settings(hang=HangSettings())
    engine = DetectionEngine(settings)
    alerts = hangs(replay((parse_event(e) for e in events), engine=engine))
    requests = engine.take_stack_requests()
    assert len(requests) == 1  # rate-limited: one request for this hang
    req = requests[0]
    assert req.job == JOB and req.ranks == (13, 8, 9, 10)  # the culprit, then 3 of its group's waiting ranks
    assert parse_request(orjson.loads(orjson.dumps(req.to_dict()))) == req
    assert req.request_id.startswith(alerts[0].id + "/")
    assert len({a.id for a in alerts}) == 1  # re-published under the same id
    with_stacks = [a for a in alerts if "stack_missing" in a.evidence]
    assert with_stacks, [a.evidence.get("stacks") for a in alerts]
    ev = with_stacks[-1].evidence
    assert list(ev["stacks"])[0] == "13"  # the culprit first
    assert ev["stacks"]["13"] == [f"{f}:{ln} {fn}" for f, ln, fn in frames]  # innermost last
    assert set(ev["stacks"]) == {"13", "8", "9"}
    assert ev["stack_missing"] == [10]  # asked, never answered
    assert "load_shard_slowly" in with_stacks[-1].summary and "no stack from rank(s) 10" in with_stacks[-1].summary
    assert ev["process_group"] == "tp1" and [c["rank"] for c in ev["culprits"]] == [13]


def test_replay_without_stack_events_publishes_no_missing_stacks():
    """Replay sends no request: nobody can answer, so no rank is "missing" and no version is added."""
    engine = DetectionEngine(Settings(hang=HangSettings()))
    alerts = hangs(replay((parse_event(e) for e in recording(positions(stuck_tp_rank=13))), engine=engine))
    assert [a.severity for a in alerts] == ["warning"]
    assert "stack_missing" not in alerts[0].evidence and alerts[0].evidence["stacks"] == {}


def test_stacks_off_asks_nobody_and_adds_no_evidence():
    engine = DetectionEngine(Settings(hang=HangSettings(stacks=False)))
    alerts = hangs(replay((parse_event(e) for e in recording(positions(stuck_tp_rank=13))), engine=engine))
    assert alerts and engine.take_stack_requests() == []
    assert all("stacks" not in a.evidence for a in alerts)


def test_stack_from_an_earlier_hang_is_ignored_and_a_late_answer_still_counts():
    det = HangDetector(job=JOB, warning_floor_seconds=5, stacks=True, stack_timeout_seconds=10,
                       stack_min_interval_seconds=0)
    for e in recording(positions(stuck_tp_rank=13), hang_seconds=0):
        det.update(parse_event(e))
    now = T0 + STEPS
    for k in range(1, 13):  # the warning comes after 10 x the p99 step time
        for r, pgs in positions(stuck_tp_rank=13).items():
            det.update(parse_event({"v": 1, "kind": "heartbeat", "job": JOB, "rank": r, "ts": now + k, "step": 9,
                                    "pgs": pgs}))
        det.check(now + k)
    [req] = det.take_stack_requests()
    det.mark_sent(req.request_id)  # what the worker does once it sent the request
    ident = req.request_id.split("/")[0]
    det.stack_requests.old_alert_ids.append("old")
    stale = {"v": 1, "kind": "stack", "job": JOB, "rank": 13, "ts": now + 13, "request_id": "old/1",
             "threads": [{"name": "MainThread", "frames": [{"file": "a.py", "line": 1, "function": "stale"}]}]}
    det.update(parse_event(stale))
    out = det.check(now + 30)  # timeout: nobody answered
    assert out and out[0].id == ident and out[0].evidence["stack_missing"] == list(req.ranks)
    fresh = dict(stale, request_id=req.request_id, threads=[
        {"name": "MainThread", "frames": [{"file": "a.py", "line": 2, "function": "late"}]}])
    det.update(parse_event(fresh))
    out = det.check(now + 31)
    assert out and out[0].evidence["stacks"] == {"13": ["a.py:2 late"]}
    assert 13 not in out[0].evidence["stack_missing"]


def test_a_second_answer_adds_the_flight_recorder_dump_to_the_first_ones_stack():
    """A rank answers twice (producers/stacks.py): its Python stack at once, its Flight Recorder dump after.
    The alert keeps the first answer's stack and is re-published with the dump."""
    det = HangDetector(job=JOB, warning_floor_seconds=5, stacks=True, stack_timeout_seconds=10,
                       stack_min_interval_seconds=0)
    for e in recording(positions(stuck_tp_rank=13), hang_seconds=0):
        det.update(parse_event(e))
    now = T0 + STEPS
    for k in range(1, 13):
        for r, pgs in positions(stuck_tp_rank=13).items():
            det.update(parse_event({"v": 1, "kind": "heartbeat", "job": JOB, "rank": r, "ts": now + k, "step": 9,
                                    "pgs": pgs}))
        det.check(now + k)
    [req] = det.take_stack_requests()
    det.mark_sent(req.request_id)
    stack = {"v": 1, "kind": "stack", "job": JOB, "rank": 13, "ts": now + 13, "request_id": req.request_id,
             "threads": [{"name": "MainThread", "frames": [{"file": "a.py", "line": 2, "function": "stuck"}]}]}
    det.update(parse_event(stack))
    out = det.check(now + 30)
    assert out and out[0].evidence["stacks"] == {"13": ["a.py:2 stuck"]}
    assert "flight_recorder" not in out[0].evidence
    det.update(parse_event(dict(stack, ts=now + 31, flight_recorder="/tmp/fr_13")))
    out = det.check(now + 32)
    assert out, "the alert is re-published with the dump"
    assert out[0].evidence["stacks"] == {"13": ["a.py:2 stuck"]}
    assert out[0].evidence["flight_recorder"] == {"13": "/tmp/fr_13"}


def test_stack_event_wire_round_trip_and_bounds():
    threads = [{"name": f"t{i}", "frames": [{"file": "f.py", "line": n, "function": f"fn{n}"} for n in range(100)]}
               for i in range(12)]
    raw = {"v": 1, "kind": "stack", "job": "j", "rank": 3, "ts": 5.0, "request_id": "a/1", "threads": threads,
           "flight_recorder": "/tmp/fr_3"}
    event = parse_event(raw)
    assert len(event.threads) == 8 and all(len(f) == 64 for _, f in event.threads)
    assert event.threads[0][1][-1] == ("f.py", 99, "fn99")  # the innermost frames are kept
    again = parse_event(orjson.loads(orjson.dumps(event_to_dict(event))))
    assert again == event
    hb = parse_event({"v": 1, "kind": "heartbeat", "job": "j", "rank": 1, "ts": 1.0, "step": 2,
                      "pgs": {"default": {"started": 3, "completed": 2}, "tp0": {"started": 1, "completed": 1,
                                                                                "ranks": [0, 1]}}})
    assert hb.pgs == (("default", 3, 2, None), ("tp0", 1, 1, (0, 1)))
    assert parse_event(orjson.loads(orjson.dumps(event_to_dict(hb)))) == hb
    # Malformed ones are rejected with a reason (dead-lettered by the worker), never raised.
    for bad in ({"pgs": {"tp0": {"started": -1, "completed": 0}}}, {"pgs": [1, 2]}, {"seqs": {"a": [1]}},
                {"pgs": {"tp0": {"started": 1, "completed": 1, "ranks": "0-7"}}}):
        events, rejected = decode_message(orjson.dumps({"v": 1, "kind": "heartbeat", "job": "j", "rank": 1,
                                                        "ts": 1.0, "step": 2, **bad}))
        assert not events and rejected and rejected[0].reason
    events, rejected = decode_message(orjson.dumps(dict(raw, threads=[{"name": "x", "frames": "nope"}])))
    assert not events and "frames" in rejected[0].reason


def test_status_and_dashboard_show_the_culprits_stack():
    from stepwatch.commands.status import format_job
    from stepwatch.models.status import StatusRecorder, job_view
    from stepwatch.streams.dashboard import render_dashboard

    frames = [("train.py", 88, "<module>"), ("model.py", 190, "load_shard_slowly")]
    engine = DetectionEngine(Settings(hang=HangSettings()))
    recorder = StatusRecorder(64).attach(engine)
    events = [parse_event(e) for e in recording(positions(stuck_tp_rank=13), stacks={13: frames, 8: frames})]
    for e in events:
        recorder.observe(e)
    list(replay(events, engine=engine))
    engine.tick(engine.clock)
    body = job_view(engine, recorder, JOB, engine.clock)
    body.setdefault("settings", {})
    text = format_job(body)
    assert "process group tp1 (ranks 8,9,10,11,12,13,14,15), collective 22" in text
    assert "stack of rank 13 (innermost last):\n             train.py:88 <module>\n" \
           "             model.py:190 load_shard_slowly" in text
    page = render_dashboard(JOB)
    assert "function stack(e)" in page and "stack(a.evidence || {})" in page
