"""Issue 3's real multi-process hang tests: ranks as OS processes publish through RankMonitor
(steps, heartbeats, collective sequence numbers) to the real broker; a running worker names
the culprit. No torch needed: the collective is a real cross-process barrier."""

from __future__ import annotations

import os
import signal

import pytest
from rank_procs import start_ranks, stop_all, wait_progress
from support import read_alerts

pytestmark = pytest.mark.kafka

# Short hang settings (seconds) so each test takes seconds: warning after 2 s without a
# step, critical after 12 s, a rank silent after 6 s without any event (heartbeats every 0.5 s:
# on a loaded 2-core machine, with four ranks, a worker and a JVM, a heartbeat can come seconds
# late; 12 heartbeats missed in a row is a frozen rank, not a busy machine).
HANG_ENV = dict(STEPWATCH_HANG_TIMEOUT_SECONDS="12", STEPWATCH_HANG_WARNING_FLOOR_SECONDS="2",
                STEPWATCH_HANG_HEARTBEAT_TIMEOUT_SECONDS="6", STEPWATCH_HANG_FIRST_STEP_TIMEOUT_SECONDS="60")
#: Deadlines for conditions (not expected durations): generous for a loaded machine.
ALERT_TIMEOUT = 150


def hang_alerts(alerts: list[dict], job: str) -> list[dict]:
    return [a for a in alerts if a["type"] == "hang" and a["job"] == job]


def test_sigstopped_rank_is_named_silent_and_the_hang_resolves_when_it_resumes(kafka_bootstrap, topic_prefix,
                                                                              start_worker):
    worker = start_worker(**HANG_ENV)
    env = {k: v for k, v in worker.env.items() if k.startswith(("STEPWATCH_", "KAFKA_"))}
    env["STEPWATCH_JOB"] = "frozen-job"
    procs, progress = start_ranks(env)
    try:
        wait_progress(progress, 1, 20, timeout=120)
        os.kill(procs[1].pid, signal.SIGSTOP)  # frozen: no step, no heartbeat, nothing
        alerts = read_alerts(kafka_bootstrap, topic_prefix + "alerts", timeout=ALERT_TIMEOUT, until=lambda a: any(
            x["evidence"].get("case") == "silent_ranks" for x in hang_alerts(a, "frozen-job")))
        silent = [a for a in hang_alerts(alerts, "frozen-job") if a["evidence"].get("case") == "silent_ranks"]
        assert silent, f"no silent_ranks hang alert: {alerts}\n{worker.log_text()[-3000:]}"
        alert = silent[-1]
        assert alert["status"] == "firing"
        assert alert["ranks"][0] == 1 and alert["nodes"][0] == "node-0"
        culprit = alert["evidence"]["culprits"][0]
        assert (culprit["rank"], culprit["state"]) == (1, "silent")
        assert culprit["last_heartbeat"] is not None
        assert set(alert["evidence"]["waiting"]["ranks"]) == {0, 2, 3}
        assert "silent" in alert["summary"] and "rank 1" in alert["summary"]

        os.kill(procs[1].pid, signal.SIGCONT)  # it resumes: the job steps again, the alert resolves
        alerts = read_alerts(kafka_bootstrap, topic_prefix + "alerts", timeout=ALERT_TIMEOUT, until=lambda a: any(
            x["status"] == "resolved" for x in hang_alerts(a, "frozen-job")))
        resolved = [a for a in hang_alerts(alerts, "frozen-job") if a["status"] == "resolved"]
        assert resolved and resolved[0]["id"] == alert["id"]
    finally:
        stop_all(procs)


def test_rank_stuck_before_a_collective_is_the_culprit_while_its_heartbeats_go_on(kafka_bootstrap, topic_prefix,
                                                                                   start_worker):
    worker = start_worker(**HANG_ENV)
    env = {k: v for k, v in worker.env.items() if k.startswith(("STEPWATCH_", "KAFKA_"))}
    env["STEPWATCH_JOB"] = "stuck-job"
    procs, progress = start_ranks(env, stall_rank=2, stall_step=25)
    try:
        alerts = read_alerts(kafka_bootstrap, topic_prefix + "alerts", timeout=ALERT_TIMEOUT, until=lambda a: any(
            x["severity"] == "critical" for x in hang_alerts(a, "stuck-job")))
        hangs = hang_alerts(alerts, "stuck-job")
        assert hangs, f"no hang alert: {alerts}\n{worker.log_text()[-3000:]}"
        assert [a["severity"] for a in hangs][:1] == ["warning"]  # early warning first, same id after
        assert len({a["id"] for a in hangs}) == 1
        for alert in hangs:
            ev = alert["evidence"]
            assert ev["case"] == "culprit_before_collective", ev
            assert alert["ranks"][0] == 2
            assert [c["rank"] for c in ev["culprits"]] == [2] and ev["culprits"][0]["state"] == "behind"
            assert set(ev["waiting"]["ranks"]) == {0, 1, 3}
            assert ev["silent"] == []  # its heartbeat thread kept reporting
            assert ev["step"] == 24 and ev["collective_seq"] == 26
        assert any(a["severity"] == "critical" for a in hangs)
    finally:
        stop_all(procs)
