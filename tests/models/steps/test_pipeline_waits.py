"""Pipeline waits are not network (issue 26 item 4): point-to-point receive waits behind a slow stage
are charged to that stage's compute (models/jobhealth/throughput.py ``combine``, models/jobhealth/comm.py on p2p ops).

Recordings from tests/pipeline_gen.py (a GPipe schedule from first principles, not the simulator).
"""

from __future__ import annotations

import pytest

from engine_driver import replay
from pipeline_gen import PipelineJob, events

NETWORK = ("comm_slowdown", "throughput_drop", "link_errors", "fabric")


def run(job: PipelineJob):
    return [a for a in replay(ev for _, ev in events(job)) if a.status == "firing"]


@pytest.mark.parametrize("sends", [True, False])
def test_one_slow_rank_of_stage_1_in_4_stages_x_8_dp_is_one_straggler_and_no_network_alert(sends):
    job = PipelineJob(stages=4, dp=8, slow_rank=1 * 8 + 3, slow_factor=1.3, sends=sends, seed=2)
    alerts = run(job)
    assert [a.type for a in alerts if a.type in NETWORK] == [], [a.summary for a in alerts]
    stragglers = [a for a in alerts if a.type == "straggler"]
    assert {a.ranks for a in stragglers} == {(11,)} and len({a.id for a in stragglers}) == 1
    assert stragglers[0].evidence["group"] == "stage1"
    # the job did slow down: the cost is on the straggler (models/steps/cost.py)
    assert stragglers[0].evidence["job_slowdown"] > 1.05


@pytest.mark.parametrize("sends", [True, False])
def test_a_slower_transfer_is_still_a_communication_slowdown(sends):
    alerts = run(PipelineJob(stages=4, dp=8, slow_link=True, link_factor=3.0, sends=sends, seed=3))
    comm = [a for a in alerts if a.type == "comm_slowdown"]
    assert comm and all(a.evidence["op"] in ("send", "recv") for a in comm)
    # one root cause (every pipeline replica's transfers slower): one incident, not an alert per group and op
    assert len({a.id for a in comm}) == 1, [a.summary for a in comm]
    assert {s["process_group"] for s in comm[-1].evidence["slowed"]} == {f"pp{d}" for d in range(8)}
    drops = [a for a in alerts if a.type == "throughput_drop"]
    assert drops and drops[0].evidence["layer"] == "communication"
    assert [a for a in alerts if a.type == "straggler"] == []


def test_a_healthy_pipeline_raises_nothing():
    assert run(PipelineJob(stages=4, dp=8, seed=4)) == []


# Issue 39 item 6: a 1F1B schedule whose receives are posted ahead (communication overlapped with compute), on a
# communicator per stage pair: every receive after a slow stage waits for it, so no transfer of those keys finds
# both sides ready. The waits are the slow stage's straggler, never a comm_slowdown ("every rank slowed alike").
ONE_F_ONE_B = dict(stages=4, dp=4, schedule="1f1b", overlap=True, p2p_groups="pair", steps=100)


@pytest.mark.parametrize("stage,seed", [(0, 5), (1, 2), (1, 7)])
def test_1f1b_with_an_early_stage_rank_27pct_slow_is_its_straggler_not_the_network(stage, seed):
    slow = stage * 4 + 2
    alerts = run(PipelineJob(slow_rank=slow, slow_factor=1.27, seed=seed, **ONE_F_ONE_B))
    assert [a.summary for a in alerts if a.type in NETWORK] == []
    stragglers = [a for a in alerts if a.type == "straggler"]
    assert {a.ranks for a in stragglers} == {(slow,)} and stragglers[0].evidence["group"] == f"stage{stage}"


def test_1f1b_slower_transfers_are_still_a_communication_slowdown():
    alerts = run(PipelineJob(slow_link=True, link_factor=3.0, seed=3, **ONE_F_ONE_B))
    comm = [a for a in alerts if a.type == "comm_slowdown"]
    assert comm and all(a.evidence["op"] in ("send", "recv") for a in comm)
    assert [a for a in alerts if a.type == "straggler"] == []


def test_p2p_waits_a_straggler_explains_feed_neither_baseline_nor_alert_and_resolve_an_open_one():
    from stepwatch.models.alerts import Alert
    from stepwatch.models.jobhealth.comm import P2P_HOLD_STEPS, CommSlowdownDetector
    from stepwatch.models.wire.events import CollectiveEvent

    straggler = Alert(id="s1", status="firing", type="straggler", severity="warning", job="j", ranks=(11,),
                      nodes=("n1",), starts_at=0.0, summary="straggler")
    state = {"step": 0, "explained": None}
    d = CommSlowdownDetector(job="j")
    d.explained, d.job_step = (lambda: state["explained"]), (lambda: state["step"])

    def feed(n: int, duration: float, start: int):
        out = []
        for i in range(start, start + n):
            state["step"] = i // 8  # 8 receives a step
            out += d.update(CollectiveEvent(job="j", rank=19, seq=i, op="recv", ts=1000.0 + i * 0.1,
                                            duration=duration, pg="pp3.2-3", bytes=8 << 20))
        return out

    assert feed(200, 0.004, 0) == []
    state["explained"] = straggler  # a slow stage: every receive after it waits 3x
    assert feed(200, 0.012, 200) == [] and d.explained_samples > 0
    state["explained"] = None  # it recovered, the waits too: nothing learned from them, nothing fires
    assert feed(100, 0.004, 400) == []
    # a slower transfer with no straggler: fires, but only P2P_HOLD_STEPS steps after it crossed
    fired = feed(200, 0.012, 500)
    assert [a.type for a in fired] == ["comm_slowdown"]
    assert fired[0].evidence["detected_seq"] - 500 >= 8 * P2P_HOLD_STEPS
    state["explained"] = straggler  # a straggler after all: the waits are its, the alert resolves as such
    [resolved] = feed(1, 0.012, 700)
    assert resolved.status == "resolved" and resolved.evidence["resolution"] == "explained"
    assert resolved.evidence["explained_by"] == "s1"
