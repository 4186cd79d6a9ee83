"""The long-horizon straggler rule (models/steps/long_straggler.py) on recordings from a second
generator (tests/steady_jobs.py, numpy only)."""

from __future__ import annotations

import pytest

from steady_jobs import SteadyJob, firing
from support import full_or


def _long(alerts, status="firing"):
    return [a for a in alerts if a.type == "straggler" and a.evidence.get("horizon") == "long"
            and a.status == status]


@pytest.mark.parametrize("seed,messy", [(0, False), (1, True)])
def test_a_5_percent_straggler_in_128_ranks_is_found_within_300_steps_with_its_cost(seed, messy):
    # messy: 0.5% of events lost, events of a step in random order
    job = SteadyJob(ranks=128, steps=600, noise=0.01, slow={42: 1.05}, slow_from=100, seed=seed,
                    drop_rate=0.005 if messy else 0.0, shuffle=messy)
    engine, alerts = job.run()
    found = firing(alerts, "straggler")
    assert [a.ranks for a in found] == [(42,)]  # the long rule only: the short one is for 10% and more
    alert = found[0]
    ev = alert.evidence
    assert alert.severity == "info" and ev["horizon"] == "long" and alert.nodes == ("n005",)
    assert ev["detected_step"] - 100 <= 300 and ev["first_step"] >= 95
    assert 1.04 <= ev["ratio"] <= 1.06
    # The job waits for it most steps by ~5% minus the healthy spread of the slowest other rank.
    assert 0.005 < ev["step_share_lost"] < 0.05
    assert ev["gpu_hours_lost_per_day"] == pytest.approx(128 * 24 * ev["step_share_lost"], rel=0.01)
    assert "GPU-hours a day" in alert.summary and alert.to_dict()["labels"]["severity"] == "info"
    assert [a for a in alerts if a.status == "resolved"] == []  # still slow at the end: one alert, open


def test_a_3_percent_straggler_is_found_and_resolves_when_back():
    job = SteadyJob(ranks=64, steps=900, noise=0.01, slow={7: 1.03}, slow_from=50, slow_until=500, seed=5)
    _, alerts = job.run()
    assert [a.ranks for a in _long(alerts)] == [(7,)]
    assert _long(alerts)[0].evidence["detected_step"] <= 350
    resolved = _long(alerts, "resolved")
    assert [a.ranks for a in resolved] == [(7,)] and resolved[0].id == _long(alerts)[0].id


def test_below_the_minimum_effect_nothing_fires():
    # 1.5% slower, steadily: real, but below the 3% worth a report.
    _, alerts = SteadyJob(ranks=64, steps=1500, noise=0.005, slow={7: 1.015}, seed=6).run()
    assert firing(alerts) == []


# CI: the heavy-tailed run only (its noise is the plain run's plus spikes); STEPWATCH_FULL_GRID=1: both.
@pytest.mark.parametrize("spike_rate", full_or([0.0, 0.01], [0.01]))
def test_a_healthy_job_raises_nothing_over_3000_steps_also_with_heavy_tails(spike_rate):
    job = SteadyJob(ranks=128, steps=3000, noise=0.01, spike_rate=spike_rate, seed=11, drop_rate=0.002, shuffle=True)
    _, alerts = job.run()
    assert firing(alerts) == []


def test_heavy_tailed_student_t_noise_raises_nothing():
    # Symmetric heavy tails (t with 2 degrees of freedom: infinite variance), unbiased.
    import numpy as np

    class TJob(SteadyJob):
        pass

    job = TJob(ranks=64, steps=2000, noise=0.0, seed=12)
    rng = np.random.default_rng(12)
    base = job.messages

    def messages():
        import orjson
        for raw in base():
            obj = orjson.loads(raw)
            for ev in obj["events"]:
                ev["compute_time"] = max(0.05, ev["compute_time"] * (1 + 0.01 * float(rng.standard_t(2))))
            yield orjson.dumps(obj)

    job.messages = messages
    _, alerts = job.run()
    assert firing(alerts) == []


def test_a_rank_slow_for_long_then_slower_is_one_incident():
    # 6% slower from step 100 (the long rule pages, info), then 1.5x from step 500 (the short rule): the short
    # rule's alert continues the long one's incident (same id and start, escalated), and it resolves once.
    job = SteadyJob(ranks=64, steps=800, noise=0.01, slow={9: 1.06}, slow_from=100, slow_until=500,
                    episodes=[(500, 650, {9: 1.5})], seed=3)
    _, alerts = job.run()
    mine = [a for a in alerts if a.type == "straggler"]
    assert {a.ranks for a in mine} == {(9,)}
    assert len({a.id for a in mine}) == 1, [(a.id, a.status, a.summary[:60]) for a in mine]
    assert [(a.status, a.severity, a.evidence.get("horizon")) for a in mine][:2] == [
        ("firing", "info", "long"), ("firing", "warning", "short")]
    assert len({a.starts_at for a in mine}) == 1
    assert [a.status for a in mine].count("resolved") == 1
