"""Families of the grid's neighbouring cases (the leftovers of issue 39 item 8), each as an invariant over
generated variants rather than the one pair that found it. Bounded: a few replays of small bases each.

Each family composes the harness's own transformations (transforms.py) with parameters the fixed grid does not
try, and holds the variant to its base's verdict (invariants.py).
"""

from __future__ import annotations

import pytest

from . import transforms as t
from .grid import base
from .invariants import check
from .recording import replay
from .verdict import verdict


def _held(source: str, rec) -> dict[str, str]:
    b = base(source)
    return check(b.verdict, verdict(replay(rec)), b.rec, rec)


# -- f: a hang right after a marked pause ----------------------------------------------------------------------
# The pause's heartbeats repeat a step a few behind the step events (gen2's heartbeat thread lags); counted in
# wall time that lag grew through the pause until it read as a restart, the job's progress was thrown away and
# the hang after the pause warned at half the timeout instead of ~30 s.


@pytest.mark.parametrize("phase,seconds", [("checkpoint", 45.0), ("checkpoint", 150.0), ("eval", 90.0),
                                           ("warmup", 40.0)])
def test_a_hang_after_a_pause_of_any_length_warns_as_without_it(phase: str, seconds: float):
    rec = t.pause_before_fault(base("gen2:hang-before-collective").rec, phase, seconds)
    assert not _held("gen2:hang-before-collective", rec)


@pytest.mark.parametrize("source", ["gen2:hang-before-collective", "gen3:tp_dp_hang"])
def test_heartbeats_a_step_behind_through_a_pause_are_not_a_restart(source: str):
    """Heartbeats 2 s behind the step events through a 60 s checkpoint, then the hang: as without the pause."""
    rec = t.pause_before_fault(t.heartbeat_stale_step(base(source).rec, 2.0), "checkpoint", 60.0)
    assert not _held(source, rec)


@pytest.mark.parametrize("source,phase,seconds", [("gen3:three_ranks", "checkpoint", 60.0),
                                                  ("gen3:three_ranks", "checkpoint", 120.0),
                                                  ("gen3:three_ranks", "eval", 45.0),
                                                  ("gen3:noisy_healthy_64", "checkpoint", 60.0)])
def test_a_pause_after_heartbeats_at_different_steps_is_no_partial_hang(source: str, phase: str, seconds: float):
    """Every rank enters a marked pause at one step boundary: its heartbeats through it say that step and the job's
    collectives done, whichever step each rank's last heartbeat before it said (gen3:three_ranks: 39, 42 and 44, read
    as two ranks past the collective the third waited at, a partial pause hang at 30 s)."""
    assert not _held(source, t.pause_before_fault(base(source).rec, phase, seconds))


# -- b: a producer's late messages are not a slowdown -----------------------------------------------------------
# Late messages at the start left the first steps incomplete, so the throughput rule's baseline began later; on a
# job of variable sequence lengths its step time alone then crossed the threshold while its tokens per second
# held. Whatever the lateness, the verdict is the base's.


@pytest.mark.parametrize("share,seconds,seed", [(0.02, 5.0, 4), (0.02, 5.0, 11), (0.05, 2.0, 1)])
def test_late_delivery_makes_no_throughput_drop(share: float, seconds: float, seed: int):
    source = "gen3:varlen_accum_straggler"
    assert not _held(source, t.late(base(source).rec, share, seconds, seed=seed))


@pytest.mark.parametrize("share,seconds", [(0.02, 5.0), (0.01, 30.0)])
def test_late_delivery_keeps_a_real_throughput_drop(share: float, seconds: float):
    source = "gen2:job-slowdown"
    assert "throughput_drop" in base(source).verdict.types
    assert not _held(source, t.late(base(source).rec, share, seconds, seed=4))


# -- c: hosts' clocks ahead of the process that sends the job's end ---------------------------------------------
# The last step events of a host whose clock runs ahead come stamped after the job's end; a rank whose heartbeat
# had told a step its step events still carried in flight read as going back, so they were a new run, which
# then "hung" for lack of events: an undetermined critical hang at the end of a healthy job.


@pytest.mark.parametrize("spread,seed", [(30.0, 5), (20.0, 6), (30.0, 8)])
def test_clocks_ahead_at_the_end_make_no_hang(spread: float, seed: int):
    source = "gen3:rank0_logging_role"
    rec = t.clock_offsets(base(source).rec, spread, seed=seed)
    got = verdict(replay(rec))
    assert "hang" not in got.types and got.types >= base(source).verdict.types


# -- a (second round): alert times on the broker's clock ---------------------------------------------------------
# A straggler named at the same step as in the base was stamped with its step's host time, so hosts tens of
# seconds ahead of the broker made it read that late (or early): models/alert_clock.py puts a job's alert times on
# the broker's clock where the hosts' are off. Whatever the hosts' error, the first alert's delay is the base's.


@pytest.mark.parametrize("source,spread,seed", [("gen3:varlen_accum_straggler", 30.0, 5),
                                                ("gen3:two_stragglers", 45.0, 7),
                                                ("gen3:straggler_recurs", 20.0, 9),
                                                ("gen2:hang-before-collective", 30.0, 11)])
def test_hosts_clocks_off_the_broker_keep_the_delay(source: str, spread: float, seed: int):
    assert not _held(source, t.clock_offsets(base(source).rec, spread, seed=seed))


# -- c (second round): a shrunk job keeps every straggler -------------------------------------------------------
# Shrinking kept the first straggler only: the second one's ranks were dropped while the others' step and comm
# times still held its waits, a slower collective for no visible rank, which the throughput rule rightly read as a
# communication drop. The fault's ranks are every straggler's (verdict.fault_ranks); a world where they would be
# the majority is another fault (grid._minority).


@pytest.mark.parametrize("size", [5, 8, 12])
def test_a_shrunk_job_with_two_stragglers_keeps_the_verdict(size: int):
    source = "gen3:two_stragglers"
    b = base(source)
    assert len(b.hot[b.verdict.job]) == 2
    assert not _held(source, t.world_size(b.rec, size, b.hot, b.hot_nodes))


# -- e (second round): a producer's stall delays the alert by at most the stall --------------------------------
# ``late`` holds a message and queues the producer's later ones behind it: a straggler whose events are stuck in
# such a stall has its steps closed without it and is named at the first step its events reach in time. The
# verdict is the base's and the first alert comes at most the stall's length later (Recording.lateness).


@pytest.mark.parametrize("source,share,seconds,seed", [("gen3:straggler_recurs", 0.01, 30.0, 4),
                                                       ("gen3:straggler_recurs", 0.02, 15.0, 7),
                                                       ("gen3:varlen_accum_straggler", 0.01, 30.0, 8),
                                                       ("hand:straggler", 0.01, 30.0, 9)])
def test_a_stalled_producer_delays_the_alert_by_at_most_the_stall(source: str, share: float, seconds: float,
                                                                    seed: int):
    assert not _held(source, t.late(base(source).rec, share, seconds, seed=seed))


# -- b (second round): a culprit that dies after heartbeating through a pause keeps its cause -------------------
# A warm-up with no steps counts toward the stall (docs/hang.md: warm-up is training); the OOM-killed rank had
# heartbeated through it, so when it died it had been heard from a heartbeat timeout after the job's last step and
# was read as torn down, never silent: the OOM kill on its node, matched against a silent rank's last event, was
# lost. A rank behind the collective that falls silent while the waiting ranks live died by itself
# (models/hang/diagnosis.py): the host cause holds whatever the warm-up's length.


@pytest.mark.parametrize("seconds", [10.0, 20.0, 45.0])
def test_an_oom_killed_culprit_after_a_warmup_keeps_its_host_cause(seconds: float):
    source = "gen3:oom_killed_rank"
    assert base(source).verdict.cause == "host"
    assert not _held(source, t.pause_before_fault(base(source).rec, "warmup", seconds))


# -- the third round: paces the grid does not try ----------------------------------------------------------------
# At a long pace the harness used to stretch heartbeats and telemetry with the steps (a rank's heartbeats minutes
# apart, the OOM kill's host sample minutes after the death); with timers that keep their wall-clock period, what
# was left was the detector's: warm-up steps of 5-6 minutes at a 120 s pace warned as a hang at half the timeout
# (models/hang/detector.py ``thresholds``: never within 1.5x the job's own steps). At a fast pace the delivery lag
# and a marked checkpoint keep their wall-clock length, and so does the delay invariant's allowance for them.


@pytest.mark.parametrize("source,seconds", [("gen3:tp_dp_hang", 90.0), ("gen3:oom_killed_rank", 45.0),
                                            ("gen3:two_stragglers", 0.05), ("library:straggler-5pct-8", 0.05)])
def test_a_fault_at_another_pace_keeps_its_verdict(source: str, seconds: float):
    assert not _held(source, t.time_scale(base(source).rec, seconds))


# -- the node agent's family (agent2): a node incident's cause follows its members' ------------------------------
# Host samples 10-30 s apart (or late, or stamped off) come after the straggler fired: its members' causes turned
# host later, but the node incident of its 8 ranks kept its first member's input_pipeline (models/telemetry/
# incidents.py NodeIncidents: a member's new version was held, the incident never published again).


@pytest.mark.parametrize("seconds", [7.0, 10.0, 20.0, 30.0])
def test_a_node_incident_keeps_its_host_cause_at_every_agent_period(seconds: float):
    source = "library:host-io-64"
    assert base(source).verdict.cause == "host"
    assert not _held(source, t.agent_period(base(source).rec, seconds))
