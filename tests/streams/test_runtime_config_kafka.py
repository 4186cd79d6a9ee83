"""Run-time settings through the Kafka config topic to a live ``stepwatch worker`` (issue 25): a worker-wide
node-rule setting written by ``stepwatch config set`` changes which telemetry alerts, and a job-scoped
``telemetry`` section sent raw to the topic is refused where an operator sees it (the status API's ``/config``
errors, the ``stepwatch_config_updates_total{result="rejected"}`` counter, the worker's log) while the worker
keeps judging. (A per-job section taking effect live: tests/streams/test_operator_kafka.py, test_pipeline_kafka.py.)"""

from __future__ import annotations

import re
import time

import orjson
import pytest
from kafka import KafkaProducer

from opsupport import free_port, get, get_json, wait_for
from stepwatch.producers.publisher import EventPublisher
from support import read_all_alerts, run_stepwatch

pytestmark = pytest.mark.kafka

GIB = 2**30


def _gpu_samples(node: str, temp: float, n: int, *, gpu: int = 0) -> list[dict]:
    """``n`` samples of one GPU at ``temp`` C, 0.1 s apart, the last about now (the worker's clock)."""
    now = time.time()
    return [{"v": 1, "kind": "gpu", "node": node, "gpu": gpu, "ts": round(now - (n - 1 - i) * 0.1, 6), "util": 95.0,
             "temp": temp, "mem_used": 40 * GIB, "mem_total": 80 * GIB, "power": 600.0, "power_limit": 700.0}
            for i in range(n)]


def _send(bootstrap: str, topic: str, samples: list[dict]) -> None:
    """Node telemetry keyed by node, as the agents send it (docs/events.md)."""
    with EventPublisher(bootstrap=bootstrap, topic=topic) as out:
        for node in dict.fromkeys(s["node"] for s in samples):
            out.send(node, [s for s in samples if s["node"] == node])
        out.flush()


def _metric(base: str, name: str) -> float:
    """One sample's value from ``/metrics`` (0 when not there yet)."""
    text = get(base + "/metrics")[1].decode()
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def _hot(alerts: list[dict], node: str) -> list[dict]:
    return [a for a in alerts if a["type"] == "gpu_hot" and node in a["nodes"]]


def test_config_set_changes_a_node_rule_on_a_live_worker_and_a_job_scoped_node_section_is_refused(
        kafka_bootstrap, topic_prefix, start_worker):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    worker = start_worker(STEPWATCH_WORKER_WEB_PORT=str(port))
    env = worker.env
    assert wait_for(lambda: get(base + "/health")[0] == 200, what="/health 200")
    telemetry, alerts_topic = topic_prefix + "telemetry", topic_prefix + "alerts"
    gpu_consumed = 'stepwatch_events_consumed_total{kind="gpu"}'

    # Under the default (85 C): a GPU at 72 C is not hot; one at 90 C is (the worker judges telemetry).
    _send(kafka_bootstrap, telemetry, _gpu_samples("cfg-warm", 72.0, 5) + _gpu_samples("cfg-ctl", 90.0, 5))
    wait_for(lambda: _metric(base, gpu_consumed) >= 10, what="the first 10 GPU samples consumed")
    alerts = read_all_alerts(kafka_bootstrap, alerts_topic, until=lambda a: bool(_hot(a, "cfg-ctl")))
    assert [a["evidence"]["threshold_c"] for a in _hot(alerts, "cfg-ctl")] == [85.0], worker.log_text()[-3000:]

    # The real CLI writes the worker-wide setting to the config topic; the running worker takes it.
    out = run_stepwatch("config", "set", "host.gpu_hot_temp_c=70", env=env).stdout
    assert "host.gpu_hot_temp_c=70" in out, out
    wait_for(lambda: get_json(base + "/config")[1]["effective_default"]["host"]["gpu_hot_temp_c"] == 70.0,
             what="the new threshold on the running worker")
    wait_for(lambda: _metric(base, 'stepwatch_config_updates_total{result="applied"}') == 1.0, what="1 applied")

    # The same GPU at the same 72 C is hot now: one alert, judged against 70 C, none before the change.
    _send(kafka_bootstrap, telemetry, _gpu_samples("cfg-warm", 72.0, 4))
    alerts = read_all_alerts(kafka_bootstrap, alerts_topic, until=lambda a: bool(_hot(a, "cfg-warm")))
    warm = _hot(alerts, "cfg-warm")
    assert [(a["status"], a["evidence"]["threshold_c"], a["evidence"]["samples"]) for a in warm] == [
        ("firing", 70.0, 3)], worker.log_text()[-3000:]

    # A job-scoped node-rule section, sent raw (``config set --job`` refuses it before sending): the worker
    # refuses it, says so, and changes nothing.
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    try:
        producer.send(topic_prefix + "config", key=b"cfg-job", value=orjson.dumps(
            {"v": 1, "kind": "config", "telemetry": {"link_error_window": 40}, "updated_at": time.time()}))
        producer.flush()
    finally:
        producer.close()
    wait_for(lambda: _metric(base, 'stepwatch_config_updates_total{result="rejected"}') == 1.0,
             what="the job-scoped telemetry section rejected")
    config = get_json(base + "/config")[1]
    assert config["errors"] == ["cfg-job: worker-wide sections (telemetry) are set for '*' only"]
    assert "cfg-job" not in config["jobs"] and config["global"] == {"host": {"gpu_hot_temp_c": 70.0}}
    assert config["effective_default"]["telemetry"]["link_error_window"] != 40
    assert _metric(base, 'stepwatch_config_updates_total{result="applied"}') == 1.0
    assert "ignored runtime settings for 'cfg-job'" in worker.log_text()

    # ... and keeps running on the settings it had: another GPU at 72 C is hot under 70 C.
    assert worker.proc.poll() is None
    _send(kafka_bootstrap, telemetry, _gpu_samples("cfg-next", 72.0, 3))
    alerts = read_all_alerts(kafka_bootstrap, alerts_topic, until=lambda a: bool(_hot(a, "cfg-next")))
    assert [(a["status"], a["evidence"]["threshold_c"]) for a in _hot(alerts, "cfg-next")] == [("firing", 70.0)]
    assert len(_hot(alerts, "cfg-warm")) == 1 and len(_hot(alerts, "cfg-ctl")) == 1

    # ``config show`` prints what the topic holds, the refused scope marked so.
    shown = run_stepwatch("config", "show", env=env).stdout.splitlines()
    assert shown == ["all jobs (*): host.gpu_hot_temp_c=70.0",
                     "job cfg-job: telemetry.link_error_window=40 (refused by the workers: telemetry set for '*' "
                     "only)"], shown
    # ... and as JSON: the topic's content as it is, the refusal said on stderr.
    shown = run_stepwatch("config", "show", "--json", env=env)
    assert orjson.loads(shown.stdout) == {"*": {"host": {"gpu_hot_temp_c": 70.0}},
                                        "cfg-job": {"telemetry": {"link_error_window": 40}}}, shown.stdout
    assert "job cfg-job: refused by the workers (telemetry set for '*' only)" in shown.stderr, shown.stderr

    # A job setting for that job drops the refused section (kept, the workers would refuse this one too) and
    # takes effect on the running worker.
    result = run_stepwatch("config", "set", "--job", "cfg-job", "straggler.ratio_threshold=1.5", env=env)
    assert "dropped telemetry" in result.stderr and "telemetry" not in result.stdout, result
    wait_for(lambda: get_json(base + "/config")[1]["jobs"] == {"cfg-job": {"straggler": {"ratio_threshold": 1.5}}},
             what="the job's setting applied")
    wait_for(lambda: _metric(base, 'stepwatch_config_updates_total{result="applied"}') == 2.0, what="2 applied")
    assert _metric(base, 'stepwatch_config_updates_total{result="rejected"}') == 1.0

    # Values out of their range, written raw to the topic by someone else (issue 44 finding 3: a 10^9-step
    # window grew a worker to 14.6 GB; a 0 s timeout): each message refused and counted, the scope's last good
    # settings kept, the worker alive.
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    try:
        for section, values in (("straggler", {"window": 1_000_000_000}), ("hang", {"timeout_seconds": 0})):
            producer.send(topic_prefix + "config", key=b"*", value=orjson.dumps(
                {"v": 1, "kind": "config", section: values, "updated_at": time.time()}))
        producer.flush()
    finally:
        producer.close()
    wait_for(lambda: _metric(base, 'stepwatch_config_updates_total{result="rejected"}') == 3.0,
             what="both out-of-range messages rejected")
    config = get_json(base + "/config")[1]
    assert config["global"] == {"host": {"gpu_hot_temp_c": 70.0}}, config
    assert config["effective_default"]["straggler"]["window"] == 5
    assert config["effective_default"]["hang"]["timeout_seconds"] > 0
    assert worker.proc.poll() is None
