"""Incarnations: a job restarted from its checkpoint with a lost node's ranks on a spare (models/hang/detector.py,
models/oncall/restarts.py, models/oncall/oncall.py; issue 26 item 6).

The recording is written by a generator of this file (not the project's simulator): 64 ranks on
node-00..node-07, 1 s steps, heartbeats with the default group's sequence numbers. At step 60
node-05 dies (ranks 40-47 fall silent while the others wait in collective 2 x 60 + 1); 90 s later the
launcher relaunches every rank from the checkpoint of step 50, node-05's ranks on ``spare-1``: new
processes, whose heartbeats come first (the checkpoint's step, sequence numbers from 0), then steps.
Some events are lost and some arrive out of order; one late heartbeat of the old process of rank 3
arrives after the restart.
"""

from __future__ import annotations

import random

from engine_driver import replay
from stepwatch.config import Settings
from stepwatch.models.detection import DetectionEngine
from stepwatch.models.wire.events import parse_event

T0 = 1_820_000_000.0
JOB = "job-spare"
WORLD, DEAD_NODE, SPARE = 64, "node-05", "spare-1"


def node(rank: int, restarted: bool) -> str:
    home = f"node-{rank // 8:02d}"
    return SPARE if restarted and home == DEAD_NODE else home


def recording(*, seed: int = 2) -> list[dict]:
    rng = random.Random(seed)
    out: list[dict] = []

    def hb(r, ts, step, seq_started, seq_completed, restarted):
        return {"v": 1, "kind": "heartbeat", "job": JOB, "rank": r, "ts": round(ts, 6), "step": step,
                "node": node(r, restarted), "seq_started": seq_started, "seq_completed": seq_completed}

    def steps(first: int, last: int, t: float, seq0: int, restarted: bool) -> float:
        for i, step in enumerate(range(first, last)):
            t += 1.0
            seq = seq0 + 2 * (i + 1)
            batch = []
            for r in range(WORLD):
                if rng.random() < 0.01:
                    continue  # lost
                batch.append({"v": 1, "kind": "step", "job": JOB, "rank": r, "step": step,
                              "ts": round(t + rng.uniform(0, 0.01), 6), "step_time": 1.0,
                              "node": node(r, restarted), "world_size": WORLD})
                if step % 2 == 0:
                    batch.append(hb(r, t + 0.02, step, seq, seq, restarted))
            if rng.random() < 0.3:
                rng.shuffle(batch)
            out.extend(batch)
        return t

    t = steps(0, 60, T0, 0, False)
    seq = 2 * 60
    dead = {r for r in range(WORLD) if node(r, False) == DEAD_NODE}
    for k in range(1, 91):  # node-05 is gone; the rest wait in the next collective
        out.extend(hb(r, t + k, 59, seq + 1, seq, False) for r in range(WORLD) if r not in dead and rng.random() > 0.02)
    t += 90 + 30  # relaunch, rendezvous, checkpoint load
    for r in range(WORLD):  # the new processes' first heartbeats: the checkpoint's step, counters from 0
        out.append(hb(r, t + rng.uniform(0, 0.5), 50, 0, 0, True))
    out.append(hb(3, t - 100.0, 59, seq + 1, seq, False))  # a late heartbeat of rank 3's old process
    steps(51, 120, t + 1, 0, True)
    return out


def test_a_restart_onto_a_spare_blames_nothing_on_the_spare():
    engine = DetectionEngine(Settings())
    alerts = list(replay((parse_event(e) for e in recording()), engine=engine))
    hangs = [a for a in alerts if a.type == "hang"]
    firing = [a for a in hangs if a.status == "firing"]
    assert firing, "the lost node raised no hang"
    # The hang names node-05's ranks as silent, and never a rank on the spare.
    assert firing[0].evidence["case"] == "silent_ranks"
    assert {c["node"] for c in firing[-1].evidence["culprits"]} == {DEAD_NODE}
    assert firing[-1].evidence["lost_nodes"] == [DEAD_NODE]
    assert all(SPARE not in a.nodes and all(c.get("node") != SPARE for c in a.evidence["culprits"]) for a in hangs)
    assert not any("never reached collective" in a.summary for a in hangs)
    # It resolved because the job restarted (new processes), not because an old step came back.
    resolved = [a for a in hangs if a.status == "resolved"]
    assert len(resolved) == 1 and resolved[0].evidence["resolution"] == "job_restarted", resolved
    assert "restarted" in resolved[0].summary
    assert engine.jobs[JOB].hang.job_restarts == 1
    # The restart is classed by its cause: the lost node, not a hang culprit; only node-05 is blamed.
    restarts = [a for a in alerts if a.type == "job_restart"]
    assert restarts and restarts[0].evidence["cause"] == "lost_node"
    assert restarts[0].evidence["cause_nodes"] == [DEAD_NODE]
    assert "a lost node (node-05)" in restarts[0].summary
    # The node ledger holds nothing against the healthy spare.
    ledger = engine.oncall.ledger
    assert SPARE not in ledger.incidents
    assert not any(a.type == "node_suspect" and SPARE in a.nodes for a in alerts)
    # After the restart the job is healthy: no new hang of the new processes.
    assert len({a.id for a in hangs}) == 1


def test_single_rank_restarts_do_not_reset_the_job():
    # One rank's process restarting (its counters back to 0) while the job steps on is no job restart.
    events = [e for e in recording() if e["ts"] < T0 + 40]
    t = max(e["ts"] for e in events)
    events.append({"v": 1, "kind": "heartbeat", "job": JOB, "rank": 9, "ts": t + 0.5, "step": 39, "node": "node-01",
                   "seq_started": 0, "seq_completed": 0})
    engine = DetectionEngine(Settings())
    alerts = list(replay((parse_event(e) for e in events), engine=engine))
    hang = engine.jobs[JOB].hang
    assert hang.incarnations == 1 and hang.job_restarts == 0
    assert hang.step >= 38 and not [a for a in alerts if a.type == "hang"]


def relaunch(*, downtime: float, stagger: float, others_wait: bool) -> list[dict]:
    """Steps 0-59, then every process dies at once (``others_wait=False``: the whole job crashed) and after
    ``downtime`` s the launcher brings the ranks back one by one, ``stagger`` s apart (new processes: the
    checkpoint's step, counters from 0); or (``others_wait=True``) only rank 9's process restarts and the others
    live on, waiting in the next collective, and no step completes."""
    out = [e for e in recording() if e["ts"] < T0 + 60.5 and e["kind"] == "step"]
    t = max(e["ts"] for e in out)

    def hb(r, ts, step, started, completed):
        return {"v": 1, "kind": "heartbeat", "job": JOB, "rank": r, "ts": round(ts, 6), "step": step,
                "node": node(r, False), "seq_started": started, "seq_completed": completed}

    if others_wait:
        out.append(hb(9, t + 1.0, 50, 0, 0))
        for k in range(1, 200):
            out.extend(hb(r, t + k, 59, 121, 120) for r in range(WORLD) if r != 9)
        return out
    t += downtime
    for r in range(WORLD):
        out.append(hb(r, t + r * stagger, 50, 0, 0))
    t += WORLD * stagger
    for step in range(51, 70):
        t += 1.0
        out.extend({"v": 1, "kind": "step", "job": JOB, "rank": r, "step": step, "ts": round(t, 6), "step_time": 1.0,
                    "node": node(r, False), "world_size": WORLD} for r in range(WORLD))
    return out


def test_a_relaunch_whose_first_processes_come_up_early_is_no_hang():
    # 45 s down, then the new processes' heartbeats over 32 s (the first up long before the rest): while every
    # old process is gone and new ones keep coming, the job is being relaunched; a hang warning (30 s) naming the
    # ranks not up yet as silent culprits would be a false page.
    engine = DetectionEngine(Settings())
    alerts = list(replay((parse_event(e) for e in relaunch(downtime=45.0, stagger=0.5, others_wait=False)),
                         engine=engine))
    assert not [a for a in alerts if a.type == "hang"], [a.summary for a in alerts]
    assert engine.jobs[JOB].hang.job_restarts == 1
    assert [a.evidence["cause"] for a in alerts if a.type == "job_restart" and a.status == "firing"] == ["crash"]


def test_one_rank_in_a_new_process_while_the_others_wait_is_a_hang():
    alerts = list(replay(parse_event(e) for e in relaunch(downtime=0.0, stagger=0.0, others_wait=True)))
    assert [a for a in alerts if a.type == "hang" and a.status == "firing"]



def test_restarts_of_an_independent_generators_job_raise_no_hang_after_the_resume():
    """gen2 (tests/gen2, not this file's generator): a 32-rank job dies after step 60 and comes back from the
    checkpoint of step 50 70 s later, node 3's ranks on a spare; every rank's last events of the old processes
    are delivered late (lost and reordered events), some after the new processes' first ones. The new run took
    its last progress from those (stamped at the crash) and a hang warning said 78 s without a step, 8 s after
    the job had resumed: none may come after the resume.

    During the 70 s down, every rank silent, the job has stopped: the live worker's timer warns at the 30 s floor
    (a frozen job's ranks fall silent too), and replay, ticking through the silence as live does
    (models/sources.py ``gap_ticks``), says the same. That warning resolves as the relaunch at the resume, and the
    restart is reported."""
    import io

    import orjson
    from gen2 import sync
    from gen2.plan import Plan, Restart
    from gen2.transport import Transport, timed_lines
    from stepwatch.recording import replay as replay_lines

    plan = Plan(job="restart-gen2", ranks=32, per_node=8, steps=250, warmup=3,
                restart=Restart(at=60, resume=50, downtime=70.0, moved=("restart-gen2-n03", "spare-7")))
    lines = [line for _, line in timed_lines(sync.play(plan), Transport(loss=0.03, reorder=0.05, seed=7))]
    out = io.StringIO()
    replay_lines(lines, Settings(), drain=900.0, out=out)
    alerts = [orjson.loads(line) for line in out.getvalue().splitlines()]
    said = [a["summary"] for a in alerts]
    assert [(a["type"], a["status"]) for a in alerts if a["type"] == "job_restart"] == [
        ("job_restart", "firing"), ("job_restart", "resolved")], said
    hangs = [a for a in alerts if a["type"] == "hang"]
    assert all(a["severity"] == "warning" for a in hangs), said  # never critical: a relaunch, not a 10-minute hang
    firing = [a for a in hangs if a["status"] == "firing"]
    resolved = [a for a in hangs if a["status"] == "resolved"]
    assert len({a["id"] for a in firing}) <= 1 and len(resolved) == len({a["id"] for a in firing}), said
    resumed = min(a["ends_at"] for a in alerts if a["type"] == "job_restart" and a["status"] == "resolved")
    assert all(a["starts_at"] < resumed for a in firing), said  # none after the resume
    assert all(a["evidence"].get("resolution") == "job_restarted" for a in resolved), said
