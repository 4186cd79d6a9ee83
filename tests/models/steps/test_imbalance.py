"""Stage imbalance and rank classes (models/steps/imbalance.py) on recordings from a second generator
(tests/steady_jobs.py, numpy only)."""

from __future__ import annotations

import pytest

from steady_jobs import SteadyJob, firing


def test_a_4_stage_pipeline_with_stage_3_at_1_6x_gives_one_imbalance_naming_stage_3():
    stage_of = [r // 8 for r in range(32)]  # 4 stages of 8 data-parallel ranks
    job = SteadyJob(ranks=32, steps=600, noise=0.015, spike_rate=0.005, stage_of=stage_of,
                    stage_factor={3: 1.6}, seed=21)
    _, alerts = job.run()
    assert [a.type for a in alerts] == ["imbalance"]  # once, and nothing else (no straggler)
    a = alerts[0]
    ev = a.evidence
    assert a.severity == "info" and ev["kind"] == "stage" and ev["slow_groups"] == ["stage-3"]
    assert ev["groups"][0]["group"] == "stage-3" and ev["groups"][0]["ranks"] == list(range(24, 32))
    assert ev["groups"][0]["ratio"] == pytest.approx(1.6, abs=0.03)
    assert ev["wait_share"] == pytest.approx(0.6 / 1.6, abs=0.02)
    # Evenly partitioned, each stage would take the mean 1.15 instead of 1.6: 0.45 s less per step.
    assert ev["step_time"] - ev["balanced_step_time"] == pytest.approx(0.45, abs=0.03)
    assert ev["action"]["kind"] == "repartition" and "stage-3" in a.summary
    assert a.ranks == tuple(range(24, 32))


def test_balanced_stages_raise_nothing():
    stage_of = [r // 8 for r in range(32)]
    _, alerts = SteadyJob(ranks=32, steps=600, noise=0.015, spike_rate=0.01, stage_of=stage_of, seed=22).run()
    # (Only these types: with 27% of steps carrying some rank's spike, runs of spiky steps can move
    # the job's step time for a few steps, which is the throughput rule's business, not this one's.)
    assert [a for a in alerts if a.type in ("imbalance", "straggler")] == []


@pytest.mark.parametrize("seed", [0, 1])
def test_two_rank_classes_3x_apart_give_one_imbalance_and_no_straggler_flapping(seed):
    # 10 ranks, 5 of them 3x slower for the whole job (shared GPUs), interleaved on the nodes.
    job = SteadyJob(ranks=10, steps=1500, noise=0.03, spike_rate=0.01, ranks_per_node=2,
                    rank_factor={r: 3.0 for r in range(1, 10, 2)}, seed=seed)
    _, alerts = job.run()
    assert [(a.type, a.status) for a in alerts] == [("imbalance", "firing")]
    ev = alerts[0].evidence
    assert ev["kind"] == "classes" and [c["ranks"] for c in ev["classes"]] == [[1, 3, 5, 7, 9], [0, 2, 4, 6, 8]]
    assert ev["ratio"] == pytest.approx(3.0, rel=0.05) and not ev["split_by_node"]
    assert "shared GPUs" in ev["likely_reason"]


def test_within_its_class_a_rank_is_still_a_straggler():
    # Classes as above, and rank 4 (fast class) becomes 1.5x slower at step 300: slow for its class,
    # still far faster than the slow class.
    job = SteadyJob(ranks=10, steps=500, noise=0.02, ranks_per_node=2, rank_factor={r: 3.0 for r in range(1, 10, 2)},
                    slow={4: 1.5}, slow_from=300, seed=3)
    _, alerts = job.run()
    kinds = [(a.type, a.ranks) for a in firing(alerts)]
    assert kinds[0][0] == "imbalance" and ("straggler", (4,)) in kinds
    s = firing(alerts, "straggler")[0]
    assert s.evidence["detected_step"] - 300 < 10


def test_a_lone_slow_rank_is_a_straggler_not_a_class():
    job = SteadyJob(ranks=16, steps=200, noise=0.01, rank_factor={5: 2.0}, seed=4)
    _, alerts = job.run()
    assert [(a.type, a.ranks) for a in firing(alerts)] == [("straggler", (5,))]
