"""Shadow settings on a live ``stepwatch worker`` on the real broker (issue 41 item 3): a candidate set with
``stepwatch config set --shadow`` runs beside the live rules on the same stream; the live alerts are those the
live settings make (nothing of the candidate's on the alerts topic), the candidate's alerts go to the
shadow-alerts topic only, tagged; ``stepwatch report --shadow`` compares the two joined with the feedback; and
``config promote-shadow`` / ``config unset --shadow`` make it live / drop it. (Without a broker, the invariants
over many candidates: tests/cli/test_shadow.py.)"""

from __future__ import annotations

import re
import time

import orjson
import pytest
from kafka import KafkaProducer

from opsupport import free_port, get, get_json, send_steps, wait_for
from stepwatch.models.shadow import identity, trial_types
from stepwatch.models.wire.feedback import Feedback, Verdict
from support import read_all_alerts, read_alerts, run_stepwatch

pytestmark = pytest.mark.kafka

CANDIDATE = {"straggler": {"critical_ratio": 2.5, "ratio_threshold": 2.0}}


def _metric(base: str, name: str) -> float:
    text = get(base + "/metrics")[1].decode()
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def test_a_shadow_setting_on_a_live_worker_reaches_its_own_topic_only_then_is_compared_promoted_and_unset(
        kafka_bootstrap, topic_prefix, start_worker):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    worker = start_worker(STEPWATCH_WORKER_WEB_PORT=str(port))
    env = worker.env
    assert wait_for(lambda: get(base + "/health")[0] == 200, what="/health 200")

    out = run_stepwatch("config", "set", "--shadow", "straggler.ratio_threshold=2.0",
                        "straggler.critical_ratio=2.5", env=env).stdout
    assert f"shadow {identity(CANDIDATE)}" in out, out
    wait_for(lambda: _metric(base, "stepwatch_shadow_active") == 1.0, what="the candidate running")
    assert get_json(base + "/config")[1]["global"] == {}  # the live settings untouched
    shown = run_stepwatch("config", "show", env=env).stdout.splitlines()
    assert shown == ["no runtime settings: every job uses the worker's own settings",
                     "shadow (on trial, not live): straggler.critical_ratio=2.5, straggler.ratio_threshold=2.0"], shown

    # A rank 1.3x slow: the live rules (ratio 1.10) page; the candidate (2.0) would not.
    send_steps(kafka_bootstrap, topic_prefix + "events", job="sh-job", ranks=16, steps=range(0, 60), slow_rank=3,
               factor=1.3)
    live = read_all_alerts(kafka_bootstrap, topic_prefix + "alerts",
                           until=lambda a: any(x["type"] == "straggler" for x in a))
    assert [(a["type"], a["status"], a["ranks"]) for a in live] == [("straggler", "firing", [3])], live
    assert not any("shadow" in a for a in live)
    shadow = read_alerts(kafka_bootstrap, topic_prefix + "shadow-alerts", until=lambda a: len(a) >= 1, quiet=3.0)
    assert shadow, worker.log_text()[-3000:]
    assert {a["shadow"]["id"] for a in shadow} == {identity(CANDIDATE)}
    assert {a["type"] for a in shadow} <= set(trial_types(["straggler"]))
    assert live[0]["id"] not in {a["id"] for a in shadow}
    assert _metric(base, 'stepwatch_shadow_alerts_total{result="sent"}') == len(shadow)

    # An SRE marked the live page false: the report says the candidate drops it, and what it adds.
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    try:
        producer.send(topic_prefix + "feedback", key=live[0]["id"].encode(), value=Feedback(
            alert_id=live[0]["id"], verdict=Verdict.FALSE, by="sre", at=time.time()).to_json()).get(timeout=30)
    finally:
        producer.close()
    report = orjson.loads(run_stepwatch("report", "--shadow", "--since", "1h", "--json", env=env).stdout)
    dropped = [c for c in report["changes"] if c["change"] == "dropped"]
    added = {c["id"] for c in report["changes"] if c["change"] == "added"}
    assert [(c["id"], c["verdict"]) for c in dropped] == [(live[0]["id"], "false")], report
    assert added == {a["id"] for a in shadow if a["status"] == "firing"} - {live[0]["id"]}, report
    assert report["summary"].startswith("drops 1 alert, 1 of them marked false; adds "), report["summary"]
    text = run_stepwatch("report", "--shadow", "--since", "1h", env=env).stdout
    assert "the candidate drops 1 alert, 1 of them marked false" in text, text

    # Promote: the candidate is the live setting in one step, the shadow cleared.
    out = run_stepwatch("config", "promote-shadow", env=env).stdout
    assert "promoted from the shadow" in out, out
    wait_for(lambda: get_json(base + "/config")[1]["global"] == CANDIDATE, what="the candidate live")
    wait_for(lambda: _metric(base, "stepwatch_shadow_active") == 0.0, what="the shadow cleared")
    assert run_stepwatch("config", "show", env=env).stdout.splitlines() == [
        "all jobs (*): straggler.critical_ratio=2.5, straggler.ratio_threshold=2.0"]

    # A new candidate, then unset: the trial stops, the live settings stay.
    run_stepwatch("config", "set", "--shadow", "straggler.window=8", env=env)
    wait_for(lambda: _metric(base, "stepwatch_shadow_active") == 1.0, what="the second candidate running")
    assert "no shadow settings" in run_stepwatch("config", "unset", "--shadow", env=env).stdout
    wait_for(lambda: _metric(base, "stepwatch_shadow_active") == 0.0, what="the trial stopped")
    assert get_json(base + "/config")[1]["global"] == CANDIDATE
    assert _metric(base, 'stepwatch_config_updates_total{result="rejected"}') == 0.0
    assert worker.proc.poll() is None
