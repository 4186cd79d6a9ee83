"""Feedback on the real broker (issue 41, item 1): verdicts from ``stepwatch feedback`` and from the worker's
token-guarded ``POST /alerts/<id>/feedback`` reach the feedback topic, ``stepwatch report``'s precision,
``stepwatch feedback --export`` and the worker's ``/metrics``; wrong input is one line (CLI) or a 4xx (web)."""

from __future__ import annotations

import http.client
import json
import re
import time

import orjson
import pytest
from kafka import KafkaProducer

from opsupport import free_port, wait_for
from stepwatch.models.wire.feedback import Feedback, Verdict
from support import run_stepwatch, stepwatch_env

pytestmark = pytest.mark.kafka


def hand_alert(ident: str, starts: float, node: str) -> dict:
    return {"v": 1, "kind": "alert", "id": ident, "status": "firing", "type": "straggler", "severity": "warning",
            "job": "llm", "ranks": [3], "nodes": [node], "starts_at": starts, "ends_at": None, "summary": "slow rank",
            "evidence": {"onset_ts": starts - 20, "failure_class": "straggler_unexplained"},
            "labels": {"scope": "device"}, "annotations": {}}


def post(port: int, alert_id: str, body: dict, token: str | None) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        conn.request("POST", f"/alerts/{alert_id}/feedback", body=json.dumps(body), headers=headers)
        r = conn.getresponse()
        return r.status, json.loads(r.read() or b"{}")
    finally:
        conn.close()


def metric(port: int, verdict: str) -> float | None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    m = re.search(rf'^stepwatch_alert_feedback_total{{type="straggler",verdict="{verdict}"}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else None


def test_cli_and_web_feedback_reach_the_report_the_export_and_metrics(kafka_bootstrap, topic_prefix, start_worker,
                                                                      tmp_path):
    now = time.time()
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    try:  # what a worker published before: the worker below reads its open alerts back at start
        for k in range(4):
            producer.send(topic_prefix + "alerts", key=b"llm", value=orjson.dumps(hand_alert(f"s{k}", now - 600 + k,
                                                                                             f"node-{k}")))
        producer.flush()
    finally:
        producer.close()
    token = "t0ken-" + topic_prefix.strip(".")
    (tmp_path / "token").write_text(token + "\n")
    port = free_port()
    start_worker(STEPWATCH_WORKER_WEB_PORT=str(port), STEPWATCH_WORKER_WEB_TOKEN_FILE=str(tmp_path / "token"))
    env = stepwatch_env(kafka_bootstrap, topic_prefix, STEPWATCH_SECURITY_SASL_USERNAME="")

    # The CLI: two verdicts; wrong ones are one line each, before or without writing anything.
    assert "marked confirmed" in run_stepwatch("feedback", "s0", "confirmed", "--note", "bad HBM", env=env).stdout
    run_stepwatch("feedback", "s1", "false", env=env)
    for args, said in ((("s1", "maybe"), "unknown verdict 'maybe'"), (("nope", "false"), "no alert nope")):
        bad = run_stepwatch("feedback", *args, env=env, check=False)
        assert bad.returncode != 0 and said in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr

    # The web port: the same guard as every page; the verdict and the alert's type must be known.
    wait_for(lambda: post(port, "s2", {"verdict": "false"}, None)[0] == 401, what="the web port to answer")
    assert post(port, "s2", {"verdict": "false", "note": "noisy"}, token)[0] == 201
    assert post(port, "s3", {"verdict": "maybe"}, token) == (400, {"error": "unknown verdict 'maybe': expected "
                                                                             "confirmed, false or duplicate"})
    status, body = post(port, "never-seen", {"verdict": "false"}, token)
    assert status == 404 and "no alert never-seen" in body["error"]

    # /metrics: the verdicts in force, by type and verdict.
    wait_for(lambda: metric(port, "false") == 2.0 and metric(port, "confirmed") == 1.0, timeout=60,
             what="the verdicts in /metrics")

    # The report: precision of the straggler rule from the same verdicts; a settings change after the alerts makes
    # them the version before it.
    run_stepwatch("config", "set", "straggler.ratio_threshold=1.3", env=env)
    report = json.loads(run_stepwatch("report", "--json", env=env).stdout)
    row = report["precision"]["straggler"]
    assert [v.split(" ")[0] for v in row["versions"]] == ["before"] and row["versions"] and \
        next(iter(row["versions"].values()))["false"] == 2
    assert {k: row[k] for k in ("alerts", "with_feedback", "confirmed", "false", "precision")} == {
        "alerts": 4, "with_feedback": 3, "confirmed": 1, "false": 2, "precision": 0.3333}
    assert row["interval"][0] < 1 / 3 < row["interval"][1]
    text = run_stepwatch("report", env=env).stdout
    assert re.search(r"^  straggler\s+4\s+3\s+1\s+2\s+0\s+0\s+33%", text, re.M), text

    # The export: JSON Lines of the records, as the backtest's --labels reads them.
    lines = run_stepwatch("feedback", "--export", env=env).stdout.splitlines()
    records = {r.alert_id: r for r in map(Feedback.from_json, lines)}
    assert {k: r.verdict for k, r in records.items()} == {"s0": Verdict.CONFIRMED, "s1": Verdict.FALSE,
                                                          "s2": Verdict.FALSE}
    assert records["s0"].note == "bad HBM" and records["s0"].type == "straggler" and records["s0"].job == "llm"
    assert records["s2"].by == "web" and not records["s2"].automatic
    path = tmp_path / "labels.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert json.loads(run_stepwatch("report", "--json", "--feedback", str(path), env=env).stdout)["precision"] == \
        report["precision"]


def test_a_rule_with_low_precision_says_so_at_alertmanager_and_not_on_the_alerts_topic(kafka_bootstrap, topic_prefix,
                                                                                      start_worker):
    from opsupport import FakeAlertmanager, send_steps
    from support import read_alerts, topic_messages

    env = stepwatch_env(kafka_bootstrap, topic_prefix, STEPWATCH_SECURITY_SASL_USERNAME="")
    with FakeAlertmanager() as am:
        start_worker(STEPWATCH_ALERTMANAGER_URL=am.url, STEPWATCH_ALERTMANAGER_RESEND_INTERVAL="1",
                     STEPWATCH_ALERTMANAGER_LOW_PRECISION="0.9", STEPWATCH_ALERTMANAGER_LOW_PRECISION_MIN_FEEDBACK="2")
        for ident in ("old1", "old2"):  # two earlier straggler alerts judged false (their alerts long gone)
            record = Feedback(alert_id=ident, verdict=Verdict.FALSE, by="alice", at=time.time(), type="straggler")
            producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
            producer.send(topic_prefix + "feedback", key=ident.encode(), value=record.to_json()).get(timeout=30)
            producer.close()
        send_steps(kafka_bootstrap, topic_prefix + "events", job="live", ranks=16, steps=range(0, 40), slow_rank=5,
                   factor=1.4)
        read_alerts(kafka_bootstrap, topic_prefix + "alerts", until=lambda a: bool(a))
        # Firing alerts are re-sent every second: one of them carries the sentence once the feed has read the verdicts.
        said = wait_for(lambda: [a for a in am.alerts() if "precision" in a["annotations"]], timeout=60,
                        what="the low-precision sentence at Alertmanager")
        note = said[0]["annotations"]["precision"]
        assert "0 of 2 straggler alerts judged were confirmed" in note
        assert said[0]["annotations"]["summary"].endswith(f" {note}")
    # The alerts topic's records (what replay must reproduce byte for byte) never carry it.
    count = topic_messages(kafka_bootstrap, topic_prefix + "alerts")
    records = read_alerts(kafka_bootstrap, topic_prefix + "alerts", until=lambda a: len(a) >= count)
    assert records and not [a for a in records if "precision" in orjson.dumps(a).decode().lower()]
    assert run_stepwatch("feedback", "--export", env=env).stdout.count("\n") == 2
