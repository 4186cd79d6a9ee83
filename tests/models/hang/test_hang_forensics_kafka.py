"""Hang forensics end to end (issue 18): real OS processes as ranks, real gloo collectives on a
subgroup and the default group, the real broker, a running worker.

* a rank stuck before its tensor-parallel collective, inside ``load_shard_slowly``: the alert
  names that rank, its process group, and carries its stack with that function;
* a SIGSTOPped rank cannot answer the stack request: it is listed in ``stack_missing`` while
  the others' stacks arrive.
"""

from __future__ import annotations

import os
import signal

import pytest
from rank_procs import start_ranks as start_barrier_ranks
from rank_procs import stop_all, wait_progress
from support import read_alerts

pytestmark = pytest.mark.kafka

# Warning after 2 s without a step; a rank silent after 3 s; unanswered stack requests given up after 6 s.
HANG_ENV = dict(STEPWATCH_HANG_TIMEOUT_SECONDS="300", STEPWATCH_HANG_WARNING_FLOOR_SECONDS="2",
                STEPWATCH_HANG_HEARTBEAT_TIMEOUT_SECONDS="3", STEPWATCH_HANG_FIRST_STEP_TIMEOUT_SECONDS="120",
                STEPWATCH_HANG_STACK_TIMEOUT_SECONDS="6")


def hang_alerts(alerts: list[dict], job: str) -> list[dict]:
    return [a for a in alerts if a["type"] == "hang" and a["job"] == job]


def rank_env(worker, job: str) -> dict:
    env = {k: v for k, v in worker.env.items() if k.startswith(("STEPWATCH_", "KAFKA_", "PYTHON"))}
    env["STEPWATCH_JOB"] = job
    return env


def wait_ready(progress, world: int, timeout: float = 120) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not all(progress[world + r] for r in range(world)):
        assert time.monotonic() < deadline, f"control readers not ready: {list(progress)}"
        time.sleep(0.1)


def test_rank_stuck_before_a_subgroup_collective_is_named_with_its_group_and_its_stack(kafka_bootstrap,
                                                                                       topic_prefix, start_worker):
    pytest.importorskip("torch", reason="the gloo ranks need torch")
    from pg_rank_procs import start_ranks

    worker = start_worker(**HANG_ENV)
    procs, progress = start_ranks(rank_env(worker, "tp-job"), stall_rank=2, stall_step=30)
    try:
        wait_ready(progress, 4)

        def has_stack(alerts):
            return any("2" in a["evidence"].get("stacks", {}) for a in hang_alerts(alerts, "tp-job"))

        alerts = read_alerts(kafka_bootstrap, topic_prefix + "alerts", timeout=60, until=has_stack)
        hangs = hang_alerts(alerts, "tp-job")
        assert hangs, f"no hang alert: {alerts}\n{worker.log_text()[-3000:]}"
        assert len({a["id"] for a in hangs}) == 1
        alert = [a for a in hangs if "2" in a["evidence"].get("stacks", {})][-1]
        ev = alert["evidence"]
        assert ev["case"] == "culprit_before_collective", ev
        assert alert["ranks"][0] == 2 and [c["rank"] for c in ev["culprits"]] == [2]
        assert ev["process_group_ranks"] == [2, 3] and ev["process_group"].startswith("pg")
        assert ev["process_group_waiting"]["ranks"] == [3]
        assert set(ev["waiting"]["ranks"]) == {0, 1, 3}
        assert list(ev["stacks"])[0] == "2"
        assert any(line.endswith(" load_shard_slowly") for line in ev["stacks"]["2"]), ev["stacks"]["2"]
        assert "rank 2 is in" in alert["summary"] and "load_shard_slowly" in alert["summary"]
        # The waiting ranks asked answer from inside the collective.
        assert set(ev["stack_request"]["ranks"]) >= {2, 3}
    finally:
        stop_all(procs)


def test_sigstopped_rank_is_listed_in_stack_missing(kafka_bootstrap, topic_prefix, start_worker):
    worker = start_worker(**HANG_ENV)
    procs, progress = start_barrier_ranks(rank_env(worker, "frozen-stacks"), wait_control=True)
    try:
        wait_progress(progress, 1, 20, timeout=120)
        os.kill(procs[1].pid, signal.SIGSTOP)  # frozen: no heartbeat, no answer
        alerts = read_alerts(kafka_bootstrap, topic_prefix + "alerts", timeout=60, until=lambda a: any(
            "stack_missing" in x["evidence"] for x in hang_alerts(a, "frozen-stacks")))
        final = [a for a in hang_alerts(alerts, "frozen-stacks") if "stack_missing" in a["evidence"]]
        assert final, f"no alert with stack_missing: {hang_alerts(alerts, 'frozen-stacks')}\n" \
                      f"{worker.log_text()[-3000:]}"
        ev = final[-1]["evidence"]
        assert ev["case"] == "silent_ranks" and ev["culprits"][0]["rank"] == 1
        assert ev["stack_missing"] == [1]
        assert set(ev["stacks"]) == {str(r) for r in ev["stack_request"]["ranks"]} - {"1"}
        assert ev["stacks"] and all(lines for lines in ev["stacks"].values())
        assert "no stack from rank(s) 1" in final[-1]["summary"]
    finally:
        stop_all(procs)
