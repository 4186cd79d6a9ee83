"""Recordings without a broker: ``stepwatch replay --drain/--until`` on a capture that ends inside a hang, and the
pure parts of ``stepwatch record``/``publish`` (job filter, ``_arrival``, wire keys). With a broker:
tests/streams/test_pipeline_kafka.py."""

from __future__ import annotations

import os

import orjson

import recordings
from stepwatch.recording import _job_filter, _line_events, parse_time, unreadable, wire_key
from support import run_stepwatch, stepwatch_env

T0 = 1_700_000_000.0
#: (the warning at a fraction of the timeout off: these tests are about the clock past a capture's end, with
#: the critical as the one alert; tests/models/hang/test_hang_pace.py holds the warning-before-critical rule)
HANG_ENV = {"STEPWATCH_HANG_TIMEOUT_SECONDS": "8", "STEPWATCH_HANG_WARNING_FLOOR_SECONDS": "3",
            "STEPWATCH_HANG_HEARTBEAT_TIMEOUT_SECONDS": "3", "STEPWATCH_HANG_WARNING_TIMEOUT_FRACTION": "0"}


def test_replay_drain_and_until_run_the_clock_past_the_end_of_the_capture(tmp_path):
    path = recordings.write(tmp_path / "hang.jsonl", recordings.hang("stuck", t0=T0, tail=6))
    env = stepwatch_env("", "t.", **HANG_ENV)

    def alerts(*args):
        result = run_stepwatch("replay", *args, str(path), env=env)
        return [orjson.loads(line) for line in result.stdout.splitlines()]

    assert alerts() == []
    drained = alerts("--drain", "30")
    assert [(a["type"], a["severity"], a["evidence"]["case"]) for a in drained] == [
        ("hang", "critical", "silent_ranks")]
    assert [c["rank"] for c in drained[0]["evidence"]["culprits"]] == [3]
    assert [a["id"] for a in alerts("--until", "2023-11-14T22:13:50Z")] == [drained[0]["id"]]  # T0 + 30 s


def test_parse_time_takes_unix_seconds_and_iso():
    assert parse_time("1700000000.5") == 1_700_000_000.5
    assert parse_time("2023-11-14T22:13:20Z") == T0 == parse_time("2023-11-14T22:13:20")
    assert parse_time("2023-11-14T23:13:20+01:00") == T0


def test_record_keeps_the_jobs_asked_for_and_all_node_telemetry():
    step = {"v": 1, "kind": "step", "job": "a", "rank": 0, "step": 1, "ts": T0, "step_time": 1.0}
    other = dict(step, job="b")
    gpu = {"v": 1, "kind": "gpu", "node": "n1", "ts": T0, "gpu": 0}
    assert _job_filter(step, {"a"}) is step
    assert _job_filter(other, {"a"}) is None
    assert _job_filter(gpu, {"a"}) is gpu
    batch = {"v": 1, "kind": "batch", "events": [step, other, gpu]}
    assert _job_filter(batch, {"a"})["events"] == [step, gpu]
    assert _job_filter({"v": 1, "kind": "batch", "events": [other]}, {"a"}) is None


def test_publish_reads_arrival_and_keys_as_the_wire_format_says():
    step = {"v": 1, "kind": "step", "job": "a", "rank": 0, "step": 1, "ts": T0, "step_time": 1.0}
    events, arrival = _line_events(orjson.dumps({"v": 1, "kind": "batch", "events": [step], "_arrival": T0 + 2}))
    assert events == [step] and arrival == T0 + 2
    assert _line_events(b"{not json") == (None, None)
    assert _line_events(b"[1]") == (None, None)
    assert wire_key(step) == ("events", "a")
    assert wire_key({"v": 1, "kind": "phase", "job": "a", "ts": T0, "phase": "end"}) == ("events", "a")
    assert wire_key({"v": 1, "kind": "link", "node": "n7", "ts": T0}) == ("telemetry", "n7")


def test_replay_applies_recorded_runtime_settings_where_they_stand(tmp_path):
    """A ``stepwatch config set`` captured by ``stepwatch record`` (a config line) changes the thresholds from there on,
    as it did live: here a straggler threshold no rank reaches (and the long-horizon straggler rule off), so the
    straggler is not reported."""
    events = recordings.straggler_and_slowdown("incident", t0=T0)
    env = stepwatch_env("", "t.")
    plain = recordings.write(tmp_path / "plain.jsonl", events)
    tuned = tmp_path / "tuned.jsonl"
    config = {"v": 1, "kind": "config", "straggler": {"ratio_threshold": 3.0, "long_min_effect": 0.0}, "_key": "incident", "_arrival": T0}
    tuned.write_bytes(orjson.dumps(config) + b"\n" + plain.read_bytes())

    def types(path):
        result = run_stepwatch("replay", str(path), env=env)
        return sorted({orjson.loads(line)["type"] for line in result.stdout.splitlines()})

    assert types(plain) == ["straggler", "throughput_drop"]
    assert types(tuned) == ["throughput_drop"]
    assert wire_key(dict(config)) == ("config", "incident")


def test_unreadable_names_the_first_file_that_cannot_be_read_and_opens_none(tmp_path):
    good = tmp_path / "a.jsonl"
    good.write_bytes(b"{}\n")
    assert unreadable([str(good), "-", str(good)]) is None
    assert unreadable([str(good), str(tmp_path / "b.jsonl"), str(tmp_path)]) == f"{tmp_path / 'b.jsonl'}: no such file"
    assert unreadable([str(tmp_path), str(good)]) == f"{tmp_path}: is a directory"
    assert unreadable(["-", str(good), "-"]) == "-: stdin named twice (it can be read once)"
    assert unreadable([f"{good}/x"]) == f"{good}/x: Not a directory"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert unreadable([str(fifo), str(good)]) is None  # not opened: no writer needed, none let through


def test_publish_checks_every_file_before_the_broker(tmp_path):
    """A missing file among several is named in one line, before any connection (a closed port here: had the
    command connected first, the line would say the bootstrap is unreachable). With a broker, nothing sent:
    tests/producers/test_publish_per_rank_kafka.py."""
    from test_cli_first_hour import closed_port

    good = tmp_path / "a.jsonl"
    good.write_bytes(b'{"v":1,"kind":"phase","job":"j","ts":1.0,"phase":"train"}\n')
    missing = tmp_path / "b.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STEPWATCH_", "KAFKA_"))}
    result = run_stepwatch("publish", "--bootstrap", f"127.0.0.1:{closed_port()}", str(good), str(missing),
                           env=env, check=False, timeout=30)
    assert result.returncode != 0
    assert result.stderr.strip() == f"stepwatch publish: {missing}: no such file; nothing published"
