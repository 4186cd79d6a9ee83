"""The second generator (tests/gen2) itself: it writes the wire format stepwatch decodes, and its jobs behave
as synchronous training does, so the replay tests (tests/scenarios/test_gen2_replay.py) test stepwatch, not a broken
generator."""

from __future__ import annotations

from collections import defaultdict

import orjson
import pytest

from gen2 import pipeline, sync, telemetry
from gen2.plan import Plan, Restart, Slow, Stuck
from gen2.scenarios import catalog
from gen2.transport import Transport, messages, recording_lines
from stepwatch.models.wire.events import decode_message


def _steps(sent, kind: str = "step") -> dict[int, dict[int, dict]]:
    """step -> rank -> event (the last one, for a restarted job)."""
    out: dict[int, dict[int, dict]] = defaultdict(dict)
    for s in sent:
        if s.event["kind"] == kind:
            out[s.event["step"]][s.event["rank"]] = s.event
    return out


def test_every_line_of_every_scenario_decodes_without_a_rejection():
    for scenario in catalog():
        for line in recording_lines(scenario.sent(), scenario.transport, arrival=scenario.arrival):
            value = orjson.loads(line)
            value.pop("_arrival", None)
            events, rejected = decode_message(orjson.dumps(value))
            assert events and not rejected, (scenario.name, [r.reason for r in rejected])


def test_sync_job_every_rank_waits_for_the_slow_one_which_arrives_last_and_waits_least():
    plan = Plan(job="j", ranks=8, per_node=4, steps=40, slow=(Slow(5, 20, 1.4),))
    steps = _steps(sync.play(plan))
    for step in range(21, 41):
        by_rank = steps[step]
        times = [e["step_time"] for e in by_rank.values()]
        assert max(times) / min(times) < 1.05  # everyone waits at the all-reduce
        assert max(by_rank, key=lambda r: by_rank[r]["compute_time"]) == 5
        assert min(by_rank, key=lambda r: by_rank[r]["comm_time"]) == 5
        for e in by_rank.values():  # the parts add up to the step
            assert e["data_time"] + e["compute_time"] + e["comm_time"] == pytest.approx(e["step_time"], abs=1e-5)
    before = steps[10]
    assert max(e["compute_time"] for e in before.values()) / min(e["compute_time"] for e in before.values()) < 1.15


def test_host_clocks_are_offset_in_timestamps_not_in_durations():
    plan = Plan(job="j", ranks=12, per_node=4, steps=20, clock_offsets=((1, 4.0), (2, -2.5)))
    steps = _steps(sync.play(plan))
    for step, by_rank in steps.items():
        assert by_rank[4]["ts"] - by_rank[0]["ts"] == pytest.approx(4.0, abs=0.05)
        assert by_rank[8]["ts"] - by_rank[0]["ts"] == pytest.approx(-2.5, abs=0.05)
        assert by_rank[4]["step_time"] == pytest.approx(by_rank[0]["step_time"], rel=0.05)


def test_a_stuck_rank_never_issues_the_collective_the_others_wait_in():
    plan = Plan(job="j", ranks=8, per_node=4, steps=50, stuck=Stuck(3, 20, tail=30.0))
    sent = sync.play(plan)
    assert max(s.event["step"] for s in sent if s.event["kind"] == "step") == 19
    last = {}
    for s in sent:
        if s.event["kind"] == "heartbeat":
            last[s.event["rank"]] = s.event
    assert {r: (e["seq_started"], e["seq_completed"]) for r, e in last.items()} == {
        r: ((19, 19) if r == 3 else (20, 19)) for r in range(8)}
    assert max(s.at for s in sent) - min(s.at for s in sent if s.event["kind"] == "step" and s.event["step"] == 19) > 25


def test_a_restart_onto_a_spare_starts_steps_and_sequence_numbers_again_with_new_pids():
    plan = Plan(job="j", ranks=8, per_node=4, steps=40, restart=Restart(at=20, resume=15, moved=("j-n01", "spare-1")))
    sent = [s.event for s in sync.play(plan)]
    steps = [e for e in sent if e["kind"] == "step"]
    cut = next(i for i, e in enumerate(steps) if i and e["step"] < steps[i - 1]["step"])
    old, new = steps[:cut], steps[cut:]
    assert max(e["step"] for e in old) == 20 and min(e["step"] for e in new) == 16
    assert {e["node"] for e in new if e["rank"] >= 4} == {"spare-1"}
    assert not {e["pid"] for e in old} & {e["pid"] for e in new}
    collectives = [e for e in sent if e["kind"] == "collective"]
    assert [e["seq"] for e in collectives].count(1) == 16  # numbered from 1 in each run, on 8 ranks


def test_transport_loses_and_reorders_what_it_is_told_and_orders_by_arrival_or_time():
    plan = Plan(job="j", ranks=16, per_node=4, steps=100)
    sent = sync.play(plan)
    msgs = messages(sent, Transport(loss=0.04, reorder=0.05, seed=1))
    kept = sum(len(batch["events"]) for _, batch in msgs)
    assert 0.93 < kept / len(sent) < 0.99
    assert [at for at, _ in msgs] == sorted(at for at, _ in msgs)
    by_ts = [orjson.loads(line) for line in recording_lines(sent, arrival=False)]
    assert len(by_ts) == len(sent) and all("_arrival" not in e for e in by_ts)
    assert [e["ts"] for e in by_ts] == sorted(e["ts"] for e in by_ts)
    assert recording_lines(sent, Transport(loss=0.04, seed=1)) == recording_lines(sync.play(plan),
                                                                                  Transport(loss=0.04, seed=1))


def test_pipeline_a_slow_stage_makes_its_column_wait_in_recv_and_the_other_columns_in_the_all_reduce():
    plan = Plan(job="p", ranks=16, per_node=4, steps=30, stages=4, slow=(Slow(6, 10, 1.3),))  # stage 1, column 2
    sent = pipeline.play(plan)
    steps = _steps(sent)
    recv = {(s.event["step"], s.event["rank"]): s.event["duration"] for s in sent
            if s.event["kind"] == "collective" and s.event["op"] == "recv"}
    reduce = {(s.event["step"], s.event["rank"]): s.event["duration"] for s in sent
              if s.event["kind"] == "collective" and s.event["op"] == "all_reduce"}
    for step in range(12, 31):
        by_rank = steps[step]
        assert all(by_rank[r]["group"] == r // 4 for r in by_rank)
        stage1 = {r: by_rank[r]["compute_time"] for r in range(4, 8)}
        assert max(stage1, key=stage1.get) == 6
        for stage in (0, 2, 3):  # same stage: the slow column waits longer for its neighbour, less at the reduce
            column2, other = stage * 4 + 2, stage * 4 + 1
            assert recv[(step, column2)] > recv[(step, other)]
            assert reduce[(step, column2)] < reduce[(step, other)]
        times = [e["step_time"] for e in by_rank.values()]
        assert max(times) / min(times) < 1.1


def test_telemetry_counters_are_cumulative_and_the_throttled_gpu_is_the_slow_ranks_from_its_slow_step():
    plan = Plan(job="t", ranks=8, per_node=4, steps=60, slow=(Slow(6, 30, 1.3),), clock_offsets=((1, 4.0),))
    job = sync.play(plan)
    sent = telemetry.play(plan, job, throttle=telemetry.Throttle(6, 30))
    last: dict[tuple, dict] = {}
    for s in sorted(sent, key=lambda s: s.at):
        e = s.event
        if e["kind"] == "link":
            key = (e["node"], e["device"])
            if key in last:
                assert all(e["counters"][k] >= v for k, v in last[key].items())
            last[key] = e["counters"]
    hot = [s for s in sent if s.event["kind"] == "gpu" and s.event["throttle"]]
    assert {(s.event["node"], s.event["gpu"]) for s in hot} == {("t-n01", 2)}
    # Rank 6's step 30 begins when its step 29 ends; samples come every second.
    begins = next(s.at for s in job if s.event["kind"] == "step" and s.event["step"] == 29 and s.event["rank"] == 6)
    assert begins <= min(s.at for s in hot) < begins + 1.1
    node1 = next(s for s in sent if s.event["node"] == "t-n01")
    assert node1.event["ts"] - node1.at == pytest.approx(4.0)  # the host's clock, as its ranks write it


def test_python_m_gen2_writes_one_recording_per_scenario_and_a_fleet(tmp_path, capsys):
    from gen2.__main__ import main

    assert main(["healthy", "clock-skew-ts-order", "-o", str(tmp_path)]) == 0
    healthy = [orjson.loads(line) for line in (tmp_path / "healthy.jsonl").read_bytes().splitlines()]
    assert all(v["kind"] == "batch" and "_arrival" in v for v in healthy)
    by_ts = [orjson.loads(line) for line in (tmp_path / "clock-skew-ts-order.jsonl").read_bytes().splitlines()]
    assert by_ts and all(v["kind"] != "batch" and "_arrival" not in v for v in by_ts)
    assert main(["healthy", "warmup", "--fleet", "-o", str(tmp_path)]) == 0
    jobs = {e["job"] for line in (tmp_path / "fleet.jsonl").read_bytes().splitlines()
            for e in orjson.loads(line)["events"]}
    assert jobs == {"healthy", "warmup"}
    with pytest.raises(SystemExit):
        main(["no-such-scenario"])
