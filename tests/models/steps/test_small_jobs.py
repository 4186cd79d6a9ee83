"""Small jobs (2-3 ranks): a rank judged against its own recent steps as well as its peers
(models/steps/straggler.py; issue 23 item 3). Recordings from tests/step_gen.py (not the simulator)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine_driver import replay
from small_job_gen import SmallJob
from step_gen import SyncJob
from stepwatch.models.pipeline import Pipeline, run_recording
from stepwatch.models.sinks import CapturingSink, drain
from stepwatch.models.wire.events import parse_event


def stragglers(job: SyncJob) -> list:
    alerts = list(replay(parse_event(e) for e in job.events()))
    return [a for a in alerts if a.type == "straggler" and a.evidence.get("horizon") == "short"]


@pytest.mark.parametrize("ranks, slow_rank", [(2, 1), (3, 0)])
def test_a_rank_40pct_slower_than_itself_in_a_small_job_is_named(ranks, slow_rank):
    job = SyncJob(job=f"small-{ranks}", ranks=ranks, steps=120, slow_rank=slow_rank, slow_from=30, lose=0.01)
    fired = [a for a in stragglers(job) if a.status == "firing"]
    assert fired, "the slow rank of a small job was not named"
    first = fired[0]
    assert first.ranks == (slow_rank,) and {a.ranks for a in fired} == {(slow_rank,)}
    assert first.evidence["baseline"] == "self" and first.evidence["signal"] == "compute_time"
    assert 30 <= first.evidence["first_step"] and first.evidence["detected_step"] <= 30 + 10
    assert 1.3 <= first.evidence["ratio"] <= 1.5
    assert "slower than its own recent steps" in first.summary and f"rank {slow_rank}" in first.summary


@pytest.mark.parametrize("ranks", [2, 3])
def test_no_false_alarm_on_a_healthy_small_job(ranks):
    job = SyncJob(job=f"healthy-{ranks}", ranks=ranks, steps=400, noise=0.03, lose=0.02, reorder=0.3)
    assert stragglers(job) == []


def test_a_job_wide_slowdown_of_a_small_job_names_no_rank():
    job = SyncJob(job="slowdown-2", ranks=2, steps=200, jobwide_factor=1.6, jobwide_from=40)
    assert stragglers(job) == []


def test_the_slow_rank_recovers_and_resolves_as_recovered():
    job = SyncJob(job="recover-2", ranks=2, steps=160, slow_rank=0, slow_from=30, slow_until=80)
    alerts = stragglers(job)
    assert [a.status for a in alerts] == ["firing", "resolved"]
    assert alerts[1].evidence["resolution"] == "recovered" and "back in line" in alerts[1].summary


# A loaded host, as measured on the real 2-rank Hugging Face job on a busy 2-core machine (tests/step_gen.py):
# a job-wide slowdown there still names no rank.
LOADED = dict(noise=0.05, load=0.25, load_p=0.4)


def test_a_job_wide_slowdown_on_a_loaded_host_names_no_rank():
    job = SyncJob(job="loaded-slowdown-2", ranks=2, steps=200, jobwide_factor=1.6, jobwide_from=40, **LOADED)
    assert stragglers(job) == []


# Recordings of the real 2-rank Hugging Face Trainer job (tests/fw_rank.py --framework hf, gloo, the callback
# only), taken from the events topic of live runs on a loaded machine (in the order the worker read them),
# replayed through the same Pipeline as the worker. slow_rank1_from30_loaded.jsonl (rank 1 +40 ms of compute,
# ~1.6x, from step 30) is the open issue 23 case: the small-job rule names nobody in it (docs/training.md).
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "hf_two_ranks"


def replayed_stragglers(name: str) -> list:
    lines = (FIXTURES / name).read_bytes().splitlines()
    alerts = drain(run_recording(Pipeline(), lines), CapturingSink()).alerts
    return [a for a in alerts if a.type == "straggler"]


def test_recorded_healthy_hf_two_rank_job_on_a_loaded_host_names_nobody():
    assert replayed_stragglers("healthy_loaded.jsonl") == []


def test_recorded_hf_two_rank_job_with_rank_1_slower_from_step_30_on_a_loaded_host_names_rank_1():
    fired = [a for a in replayed_stragglers("slow_rank1_from30_loaded.jsonl") if a.status == "firing"]
    assert fired, "rank 1 of the real 2-rank HF job, ~1.6x slower from step 30 on a loaded host, was not named"
    assert {a.ranks for a in fired} == {(1,)}
    assert fired[0].evidence["baseline"] == "self" and fired[0].evidence["detected_step"] <= 30 + 10
    assert 28 <= fired[0].evidence["first_step"] <= 32  # the onset, dated from the run (not the first verdict)


# Many seeded jobs per generator: a detector that trades misses for false alarms (or back) fails one of them.
SEEDS = range(8)


def first_named(alerts: list, rank: int) -> int | None:
    right = [a for a in alerts if a.status == "firing" and a.ranks == (rank,)]
    return right[0].evidence["detected_step"] if right else None


@pytest.mark.parametrize("ranks", [2, 3])
def test_a_rank_40pct_slower_on_a_loaded_host_is_named_within_10_steps_and_healthy_jobs_stay_quiet(ranks):
    detected, others, false_alarms = [], [], []
    for seed in SEEDS:
        slow_rank = seed % ranks
        alerts = stragglers(SyncJob(job=f"loaded-{ranks}-{seed}", ranks=ranks, steps=300, seed=seed,
                                    slow_rank=slow_rank, slow_from=30, compute=0.06, comm=0.01, lose=0.01,
                                    reorder=0.3, **LOADED))
        detected.append(first_named(alerts, slow_rank))
        others += [a for a in alerts if a.ranks != (slow_rank,)]
        false_alarms += stragglers(SyncJob(job=f"loaded-ok-{ranks}-{seed}", ranks=ranks, steps=300, seed=100 + seed,
                                           compute=0.06, comm=0.01, lose=0.01, reorder=0.3, **LOADED))
    assert others == [] and false_alarms == []
    assert all(d is not None for d in detected), detected
    assert sum(d <= 30 + 10 for d in detected) >= len(detected) - 1, detected


def gen2_stragglers(job: SmallJob) -> list:
    alerts = list(replay(parse_event(e) for e in job.events()))
    return [a for a in alerts if a.type == "straggler"]


@pytest.mark.parametrize("ranks", [2, 3])
def test_second_generator_healthy_small_jobs_name_nobody(ranks):
    # Unequal ranks, heavy-tailed noise, contention bursts, drift, checkpoints on rank 0, a job-wide 1.5x
    # slowdown, late/lost/reordered events and skewed clocks (tests/small_job_gen.py).
    alerts = [a for seed in SEEDS for a in gen2_stragglers(SmallJob(
        job=f"g2-ok-{ranks}-{seed}", ranks=ranks, steps=300, seed=200 + seed, jobwide_factor=1.5, jobwide_from=150))]
    # Measured (bench/small_jobs.py): 0-1 per 20 such jobs; the one-step rule before gave 9 (2 ranks) and 3 in 20.
    # The rare one: a burst that hits one rank 1.25x harder for 5 steps in a row (seed 200), a short episode.
    assert len([a for a in alerts if a.status == "firing"]) <= 1, alerts


@pytest.mark.parametrize("ranks", [2, 3])
def test_second_generator_a_rank_40pct_slower_is_named_and_nobody_else(ranks):
    detected = []
    for seed in SEEDS:
        slow_rank = seed % ranks
        alerts = gen2_stragglers(SmallJob(job=f"g2-{ranks}-{seed}", ranks=ranks, steps=300, seed=seed,
                                          slow_rank=slow_rank, burst_p=0.0))
        assert {a.ranks for a in alerts} <= {(slow_rank,)}
        detected.append(first_named(alerts, slow_rank))
    assert all(d is not None for d in detected), detected
    assert sum(d <= 30 + 10 for d in detected) >= len(detected) - 1, detected
    # Contention bursts (each rank +35% on average, independently, for 3-12 steps) can hide the onset for
    # longer; the slow rank is still the only one named.
    for seed in SEEDS:
        slow_rank = seed % ranks
        alerts = gen2_stragglers(SmallJob(job=f"g2b-{ranks}-{seed}", ranks=ranks, steps=300, seed=seed,
                                          slow_rank=slow_rank))
        assert {a.ranks for a in alerts} <= {(slow_rank,)}
