"""The hang rule in pauses, at every pace, across a teardown and with late heartbeats (issue 39 items 1-4).

Each situation of the issue's table in a recording written by tests/hang_recordings.py (not stepwatch's
simulator), through the pipeline ``stepwatch replay`` runs; each with a small sweep of variants (time scale,
world size, heartbeat lag) asserting what must not change.
"""

from __future__ import annotations

import orjson
import pytest

from hang_recordings import Job, culprits, hangs, node, replay
from stepwatch.config import Settings
from stepwatch.models.hang.detector import HangSettings

STUCK_NODE = "n3"


def checkpoint_hang(*, ranks: int = 64, step: float = 1.0, hb: float = 2.0, ck: float = 20.0, teardown: float = 600.0,
                    end: float = 1900.0, io: bool = True, left_phase: str = "train", stuck: str = STUCK_NODE):
    """Two healthy checkpoints of ``ck`` s, then one where node n3's 8 ranks never finish the save (their heartbeats
    say ``checkpoint``, one collective behind) while the others finish and wait in the collective after it (their
    heartbeats say ``left_phase``); ``teardown`` s in, NCCL's watchdog kills the waiting ranks; the stuck ones live
    on. With ``io``: n3's IO pressure ~95% from the save on. Returns (the job, when the checkpoint began)."""
    job = Job(ranks=ranks, step=step, hb=hb)
    job.steps(max(5, int(30 / step)))
    for _ in range(2):
        job.pause(ck)
        job.steps(max(5, int(30 / step)))
    job.phase("checkpoint")
    start = job.now
    bad = {r for r in range(ranks) if node(r) == stuck}

    def who(r, t):
        if r in bad or t < ck:
            return {"phase": "checkpoint"}
        if t >= teardown:
            return None
        return {"phase": left_phase, "started": job.seq + 1}

    job.wait(end, who)
    if io:
        t = start - 60.0
        while t < start + end:
            job.host(t, {stuck: 95.0} if t > start + ck / 2 else {})
            t += 5.0
    return job, start


def stuck_ranks(ranks: int, stuck: str = STUCK_NODE) -> list[int]:
    return [r for r in range(ranks) if node(r) == stuck]


def test_a_checkpoint_hang_on_one_node_warns_naming_it_with_a_storage_cause_and_survives_the_teardown():
    from stepwatch.models.pipeline import Pipeline

    job, start = checkpoint_hang()
    pipeline = Pipeline()
    versions = hangs(replay(job.recording(), pipeline=pipeline))
    assert versions and len({a["id"] for a in versions}) == 1
    first = versions[0]
    # A warning within a few pause lengths of the others leaving the checkpoint (not 30 minutes).
    assert first["severity"] == "warning" and first["starts_at"] - (start + 20.0) <= 4 * 20.0, first["summary"]
    assert culprits(first) == stuck_ranks(64) and first["nodes"][0] == STUCK_NODE
    assert "still in the checkpoint" in first["summary"]
    cause = first["evidence"]["suspected_causes"][0]
    assert (cause["category"], cause["node"]) == ("storage", STUCK_NODE), first["summary"]
    # The teardown never makes the torn-down ranks culprits; the incident says they were torn down.
    for alert in versions:
        assert culprits(alert) == stuck_ranks(64), alert["summary"]
        assert alert["evidence"]["case"] == "culprit_before_collective"
        assert all(c["category"] == "storage" for c in alert["evidence"]["suspected_causes"][:1])
    torn = versions[-1]["evidence"]["torn_down"]
    assert torn["count"] == 56 and torn["culprits_alive"] is True
    assert "job torn down: 56" in versions[-1]["summary"]
    # The pause timeout stays the last resort: critical at 1800 s, the same culprits.
    assert versions[-1]["severity"] == "critical" and versions[-1]["evidence"]["stalled_seconds"] >= 1800
    # Re-published when what it says changes, not every 60 s; no stack request after the teardown.
    assert len(versions) <= 5, [a["summary"] for a in versions]
    assert all(a["evidence"]["stack_request"]["requested_at"] < start + 600 for a in versions)
    # The node ledger holds the stuck node only, not the nodes of the ranks the watchdog killed.
    ledger = pipeline.engine.oncall.ledger
    assert {n for n, incidents in ledger.incidents.items() if any(i.job == "job-h" for i in incidents.values())} == {
        STUCK_NODE}


def test_without_io_pressure_the_checkpoint_hang_names_the_node_and_no_storage_cause():
    job, start = checkpoint_hang(io=False, end=700.0)
    versions = hangs(replay(job.recording()))
    assert versions and culprits(versions[0]) == stuck_ranks(64)
    assert not any(c["category"] == "storage" for a in versions for c in a["evidence"].get("suspected_causes", []))


def test_the_teardown_alone_never_makes_culprits_of_the_torn_down_ranks():
    # The pause rule off: nothing is named before the teardown (issue 39's first row as it broke). At the checkpoint
    # timeout the ranks still heard from are the culprits, the 56 torn down 10 minutes in are not.
    settings = Settings(hang=HangSettings(pause_hang_factor=0.0, pause_hang_floor_seconds=0.0))
    job, start = checkpoint_hang(io=False)
    versions = hangs(replay(job.recording(), settings=settings))
    assert versions and versions[0]["severity"] == "critical"
    assert all(culprits(a) == stuck_ranks(64) for a in versions), [a["summary"] for a in versions]
    assert versions[0]["evidence"]["torn_down"]["count"] == 56
    assert "stack_request" not in versions[-1]["evidence"] or not set(
        versions[-1]["evidence"]["stack_request"]["ranks"]) - set(stuck_ranks(64))


@pytest.mark.parametrize("ranks, step, ck, left_phase", [
    (32, 0.1, 2.0, "train"),  # short checkpoints of a fast job: the floor
    (64, 1.0, 20.0, "checkpoint"),  # the others still say checkpoint, but wait in the collective after it
    (128, 10.0, 150.0, "train"),  # long checkpoints: the warning after the teardown still names the node
])
def test_pause_variants_name_the_stuck_node_before_the_critical(ranks, step, ck, left_phase):
    stuck = f"n{ranks // 16}"
    # (heartbeats at least twice per checkpoint: a rank that never said so cannot be told to have left it)
    job, start = checkpoint_hang(ranks=ranks, step=step, hb=min(2.0, ck / 4), ck=ck, left_phase=left_phase, io=False,
                                 end=900.0, stuck=stuck)
    versions = hangs(replay(job.recording()))
    assert versions, "no hang alert"
    assert versions[0]["severity"] == "warning"
    assert versions[0]["starts_at"] - (start + ck) <= max(4 * ck, 30.0) + 2 * job.hb + 1.0
    assert all(culprits(a) == stuck_ranks(ranks, stuck) for a in versions), [a["summary"] for a in versions]


def culprit_hang(*, ranks: int = 8, step: float = 60.0, hb: float = 10.0, lag: float = 0.0, culprit: int = 3,
                 length: float = 900.0, steps: int = 12, incarnation: int | None = None):
    """``steps`` healthy steps, then ``culprit`` never issues the next collective that the others wait in; every
    rank's heartbeats go on, ``lag`` s behind the step events (a heartbeat thread that read the counters a moment
    before, or waited in the producer's queue)."""
    job = Job(ranks=ranks, step=step, hb=hb, hb_lag=lag, incarnation=incarnation)
    job.steps(steps)
    start = job.now

    def who(r, t):
        if t < lag:  # the heartbeat thread still reads the last step's values
            s, q = job._lagged(start + t)
            return {"step": s, "started": q, "done": q}
        return {"started": job.seq if r == culprit else job.seq + 1, "done": job.seq}

    job.wait(length, who)
    return job, start


@pytest.mark.parametrize("step, steps", [(0.02, 2000), (1.0, 60), (60.0, 12), (120.0, 8)])
def test_a_warning_comes_strictly_before_the_critical_at_every_pace(step, steps):
    job, start = culprit_hang(step=step, hb=min(10.0, max(1.0, step / 6)), steps=steps, length=700.0)
    versions = hangs(replay(job.recording()))
    severities = [a["severity"] for a in versions]
    assert "critical" in severities and severities[0] == "warning", [a["summary"] for a in versions]
    warn, crit = versions[0], next(a for a in versions if a["severity"] == "critical")
    assert warn["evidence"]["stalled_seconds"] < crit["evidence"]["stalled_seconds"]
    assert warn["evidence"]["warning_after_seconds"] < warn["evidence"]["critical_after_seconds"]
    assert all(culprits(a) == [3] for a in versions)


def test_heartbeats_behind_the_step_events_are_late_not_a_restart():
    # 0.5 s steps, heartbeats every second reporting what they read 2 s before: the 30 s warning names rank 5.
    job, start = culprit_hang(ranks=16, step=0.5, hb=1.0, lag=2.0, culprit=5, steps=400, length=120.0)
    alerts = replay(job.recording())
    versions = hangs(alerts)
    assert versions and versions[0]["severity"] == "warning", [a["summary"] for a in versions]
    assert versions[0]["starts_at"] - start <= 35.0 and culprits(versions[0]) == [5]
    assert "first step" not in versions[0]["summary"]
    assert not [a for a in alerts if a["type"] == "job_restart" or a.get("evidence", {}).get("resolution")
                == "job_restarted"]


@pytest.mark.parametrize("ranks, step, lag", [(4, 0.1, 0.5), (16, 0.5, 5.0), (64, 0.2, 2.0), (8, 2.0, 6.0)])
def test_lagging_heartbeat_variants_keep_the_warning_and_the_culprit(ranks, step, lag):
    job, start = culprit_hang(ranks=ranks, step=step, hb=1.0, lag=lag, culprit=ranks - 1, steps=int(100 / step),
                              length=60.0)
    alerts = replay(job.recording())
    versions = hangs(alerts)
    assert versions and versions[0]["severity"] == "warning"
    assert versions[0]["starts_at"] - start <= 30.0 + lag + 3.0
    assert all(culprits(a) == [ranks - 1] for a in versions)
    assert not any(a["status"] == "resolved" for a in versions)


def test_an_incarnation_tells_a_restart_from_a_late_heartbeat():
    from hang_recordings import T0

    # Heartbeats ~3 s behind with the same incarnation: not a restart. Then every rank back in a new process
    # (a higher incarnation) that resumes 2 steps back: a restart, though its steps went back less than a burst.
    job, start = culprit_hang(ranks=8, step=0.5, hb=1.0, lag=3.0, steps=200, length=60.0, incarnation=1000)
    job.incarnation = 2000
    job.n -= 2
    job.next_hb = job.now + 1.0
    job.hb_lag = 0.0
    job.steps(5)
    versions = hangs(replay(job.recording()))
    assert versions and culprits(versions[0]) == [3] and versions[0]["severity"] == "warning"
    assert versions[-1]["status"] == "resolved"
    assert versions[-1]["evidence"]["resolution"] == "job_restarted", versions[-1]["summary"]
    assert T0 < start


def test_the_incarnation_is_read_where_sent_and_old_recordings_keep_working():
    from stepwatch.models.wire.events import decode_message, event_to_dict, parse_event

    beat = {"v": 1, "kind": "heartbeat", "job": "j", "rank": 0, "ts": 1.0, "step": 3}
    assert parse_event(beat).incarnation is None  # an older monitor's heartbeat
    with_it = parse_event({**beat, "incarnation": 1_790_000_000_123})
    assert with_it.incarnation == 1_790_000_000_123 and event_to_dict(with_it)["incarnation"] == 1_790_000_000_123
    step = {"v": 1, "kind": "step", "job": "j", "rank": 0, "ts": 1.0, "step": 3, "step_time": 0.5, "incarnation": 7}
    assert parse_event(step).incarnation == 7 and "incarnation" not in parse_event(step).extra
    for bad in ("x", -1, 1.5, True):  # dead-lettered with a reason, never a crash
        events, rejected = decode_message(orjson.dumps({**beat, "incarnation": bad}))
        assert not events and rejected and "incarnation" in rejected[0].reason


def test_the_monitor_sends_its_process_incarnation_on_heartbeats():
    from stepwatch.producers.monitor import RankMonitor, process_incarnation

    sent = []
    with RankMonitor(job="j", rank=1, world_size=2, sink=sent.extend, heartbeat_interval=0, environ={}) as m:
        with m.step():
            pass
        m.heartbeat()
    beats = [e for e in sent if e["kind"] == "heartbeat"]
    assert beats and {e["incarnation"] for e in beats} == {m.incarnation} == {process_incarnation()}
    assert all("incarnation" not in e for e in sent if e["kind"] == "step")  # (the column decoder's plain steps)
