"""Hang detection live, against the real broker: simulator -> Kafka -> worker -> alerts topic.

The worker checks for hangs on the wall clock; the simulator runs at real time (``--speed 1``),
so simulated time is wall time. Short timeouts from the environment keep each run near
half a minute: ~0.38 s steps with an occasional 0.9 s spike, so the warning comes after
5 x p99 ~ 2-4.5 s, critical after 8 s; the hang lasts 12 s.
"""

from __future__ import annotations

import pytest
from support import read_all_alerts, run_stepwatch, stepwatch_env

pytestmark = pytest.mark.kafka

HANG_ENV = {
    "STEPWATCH_HANG_TIMEOUT_SECONDS": "8",
    "STEPWATCH_HANG_WARNING_FACTOR": "5",
    "STEPWATCH_HANG_WARNING_FLOOR_SECONDS": "2",
    "STEPWATCH_HANG_HEARTBEAT_TIMEOUT_SECONDS": "2",
    "STEPWATCH_WORKER_TICK_INTERVAL": "0.5",
}


def _hangs(alerts: list[dict]) -> list[dict]:
    return [a for a in alerts if a.get("type") == "hang"]


def _states(hangs: list[dict]) -> list[dict]:
    """The last alert of each run of one state (status, severity), all under one id. A state may be published
    again while the diagnosis sharpens (a first warning that sees some ranks still stepping becomes silent_ranks
    once the heartbeats time out) and when the ranks' stacks are added (docs/hang.md); the order of the states and
    the final diagnosis of each are what is asserted."""
    out: list[dict] = []
    for alert in hangs:
        if out and (alert["status"], alert["severity"]) == (out[-1]["status"], out[-1]["severity"]):
            assert alert["id"] == out[-1]["id"], alert
            out[-1] = alert
            continue
        out.append(alert)
    return out


def _simulate(kafka_bootstrap: str, topic_prefix: str, *fault: str) -> None:
    env = stepwatch_env(kafka_bootstrap, topic_prefix)
    run_stepwatch("simulate", "--job", "hang-live", "--ranks", "8", "--ranks-per-node", "4", "--steps", "20",
                  "--compute-time", "0.2", "--heartbeat-interval", "0.5", "--speed", "1", *fault,
                  env=env, timeout=90)


@pytest.mark.parametrize("scenario, flag, case", [
    ("hang", "--hang", "culprit_before_collective"),
    ("frozen", "--frozen", "silent_ranks"),
])
def test_live_hang_alert_names_the_culprit_then_resolves(kafka_bootstrap, topic_prefix, start_worker, scenario,
                                                         flag, case):
    worker = start_worker(**HANG_ENV)
    # Rank 5 (on node-001) stops before step 15's first collective for 12 s, then resumes; 5 steps more end the job.
    _simulate(kafka_bootstrap, topic_prefix, "--scenario", scenario, flag, "5:15:12")
    # Every alert, until the topic stays quiet after the resolution: a second hang alert would be in the list.
    alerts = read_all_alerts(kafka_bootstrap, topic_prefix + "alerts",
                             until=lambda got: any(a["status"] == "resolved" for a in _hangs(got)), timeout=60)
    hangs = _states(_hangs(alerts))
    assert [(a["status"], a["severity"]) for a in hangs] == [
        ("firing", "warning"), ("firing", "critical"), ("resolved", "critical")], worker.log_text()[-3000:]
    assert len({a["id"] for a in hangs}) == 1
    for alert in hangs:
        ev = alert["evidence"]
        assert ev["case"] == case
        assert alert["ranks"][0] == 5 and alert["nodes"][0] == "node-001"
        assert ev["culprits"][0]["rank"] == 5
        assert ev["step"] == 14 and ev["collective_seq"] == 31
        assert alert["labels"]["alertname"] == "stepwatch_hang" and alert["annotations"]["ranks"].startswith("5")
    warning, critical, resolved = hangs
    if scenario == "frozen":
        assert warning["evidence"]["silent"][0]["rank"] == 5
        assert warning["evidence"]["silent"][0]["last_heartbeat"] is not None
    # Detection on the wall clock, in order: the warning once the stall passed k x p99 (and before the
    # 8 s timeout), critical once it passed the timeout, resolved after the 12 s hang. Not how soon
    # after: on a loaded machine a tick can come late.
    warn_after = warning["evidence"]["warning_after_seconds"]
    assert 2 <= warn_after < 8
    assert warn_after <= warning["evidence"]["stalled_seconds"] < critical["evidence"]["stalled_seconds"]
    assert 8 <= critical["evidence"]["stalled_seconds"]
    assert resolved["ends_at"] - warning["evidence"]["stalled_since"] >= 12
    print(f"{scenario}: warning after {warning['evidence']['stalled_seconds']:.2f} s (threshold {warn_after:.2f} s), "
          f"critical after {critical['evidence']['stalled_seconds']:.2f} s, resolved after "
          f"{resolved['ends_at'] - warning['evidence']['stalled_since']:.2f} s")
