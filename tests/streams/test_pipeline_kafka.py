"""Live equals replay, on the real broker: a recording published with ``stepwatch publish`` to a running worker gives
on the alerts topic what ``stepwatch replay`` prints for the same file, and ``stepwatch record`` captures what
replays to the live alerts (the worker and replay share models/pipeline.py)."""

from __future__ import annotations

import time

import orjson
import pytest

import recordings
from conftest import WORKER_CONSUMERS
from support import read_all_alerts, run_stepwatch

pytestmark = pytest.mark.kafka


def _key(alert: dict) -> tuple:
    return alert["id"], alert["type"], alert["status"], tuple(alert["ranks"])


def _replayed(path, env, *extra: str) -> list[dict]:
    result = run_stepwatch("replay", *extra, str(path), env=env)
    return [orjson.loads(line) for line in result.stdout.splitlines() if line.strip()]


@pytest.mark.parametrize("worker_consumer", WORKER_CONSUMERS)
def test_live_alerts_equal_replay_and_record_replays_them(kafka_bootstrap, topic_prefix, start_worker, tmp_path):
    # A fresh machine: an empty HOME and no data directory configured (Faust's goes under ~/.cache).
    home = tmp_path / "home"
    home.mkdir()
    worker = start_worker(HOME=str(home), STEPWATCH_WORKER_DATADIR="")
    assert (home / ".cache" / "stepwatch").is_dir()
    path = recordings.write(tmp_path / "incident.jsonl",
                            recordings.straggler_and_slowdown("incident", t0=time.time() - 7200))
    expected = _replayed(path, worker.env)
    # What the recording holds (tests/recordings.py), written out: rank 5's straggler (steps 40-90), then the
    # job-wide slowdown from step 130, each resolved (the slowdown when the job ends).
    assert [(a["type"], a["status"], a["ranks"]) for a in expected] == [
        ("straggler", "firing", [5]), ("straggler", "resolved", [5]),
        ("throughput_drop", "firing", []), ("throughput_drop", "resolved", [])]

    run_stepwatch("publish", str(path), env=worker.env)  # as fast as possible
    live = read_all_alerts(kafka_bootstrap, topic_prefix + "alerts", until=lambda a: len(a) >= len(expected))
    assert [_key(a) for a in live] == [_key(a) for a in expected], worker.log_text()[-3000:]

    captured = tmp_path / "captured.jsonl"
    run_stepwatch("record", "--job", "incident", "-o", str(captured), env=worker.env)
    lines = [orjson.loads(line) for line in captured.read_bytes().splitlines()]
    assert lines and all("_arrival" in line for line in lines)
    assert sum(len(x["events"]) if x["kind"] == "batch" else 1 for x in lines) == len(path.read_bytes().splitlines())
    assert [_key(a) for a in _replayed(captured, worker.env)] == [_key(a) for a in live]


#: (the warning at a fraction of the timeout off: these tests are about the clock past a capture's end, with
#: the critical as the one alert; tests/models/hang/test_hang_pace.py holds the warning-before-critical rule)
HANG_ENV = {"STEPWATCH_HANG_TIMEOUT_SECONDS": "8", "STEPWATCH_HANG_WARNING_FLOOR_SECONDS": "3",
            "STEPWATCH_HANG_HEARTBEAT_TIMEOUT_SECONDS": "3", "STEPWATCH_HANG_WARNING_TIMEOUT_FRACTION": "0"}


def test_a_hang_published_at_its_own_pace_fires_as_replay_drain_says(kafka_bootstrap, topic_prefix, start_worker,
                                                                      tmp_path):
    worker = start_worker(**HANG_ENV)
    path = recordings.write(tmp_path / "hang.jsonl", recordings.hang("stuck", t0=time.time() - 3600, tail=6))
    assert not _replayed(path, worker.env)  # the capture ends before the hang is old enough
    expected = _replayed(path, worker.env, "--drain", "30")
    assert [(a["type"], a["severity"], a["evidence"]["case"]) for a in expected] == [
        ("hang", "critical", "silent_ranks")]

    run_stepwatch("publish", "--speed", "1", str(path), env=worker.env, timeout=120)
    live = read_all_alerts(kafka_bootstrap, topic_prefix + "alerts",
                           until=lambda a: any(x["type"] == "hang" for x in a))

    def hang_view(alerts):
        return [(a["id"], a["status"], a["severity"], a["evidence"]["case"], tuple(a["ranks"]),
                 [c["rank"] for c in a["evidence"]["culprits"]]) for a in alerts if a["type"] == "hang"]

    assert hang_view(live) == hang_view(expected), worker.log_text()[-3000:]
    assert hang_view(live)[0][5] == [3]  # the culprit: the silent rank


def test_record_captures_the_runtime_settings_and_replay_applies_them(kafka_bootstrap, topic_prefix, tmp_path):
    """No worker needed: set a threshold with ``stepwatch config``, publish a recording, record, replay: the
    capture holds the setting where it stood in arrival order."""
    from support import stepwatch_env

    env = stepwatch_env(kafka_bootstrap, topic_prefix)
    path = recordings.write(tmp_path / "incident.jsonl",
                            recordings.straggler_and_slowdown("incident", t0=time.time() - 7200))
    run_stepwatch("config", "set", "--job", "incident", "straggler.ratio_threshold=3.0",
                  "straggler.long_min_effect=0", env=env)  # long-horizon rule off too: it would report the 1.4x rank
    run_stepwatch("publish", str(path), env=env)
    captured = tmp_path / "captured.jsonl"
    run_stepwatch("record", "--job", "incident", "-o", str(captured), env=env)
    config = [orjson.loads(line) for line in captured.read_bytes().splitlines() if b'"config"' in line]
    assert [(c["_key"], c["straggler"]) for c in config] == [("incident", {"ratio_threshold": 3.0,
                                                                           "long_min_effect": 0.0})]
    assert {a["type"] for a in _replayed(path, env)} == {"straggler", "throughput_drop"}
    assert {a["type"] for a in _replayed(captured, env)} == {"throughput_drop"}  # set before the events came

    republished = stepwatch_env(kafka_bootstrap, topic_prefix + "again.")
    run_stepwatch("publish", str(captured), env=republished)  # the config line goes back to the config topic
    again = tmp_path / "again.jsonl"
    run_stepwatch("record", "-o", str(again), env=republished)
    assert [orjson.loads(line)["straggler"] for line in again.read_bytes().splitlines() if b'"config"' in line] == [
        {"ratio_threshold": 3.0, "long_min_effect": 0.0}]
