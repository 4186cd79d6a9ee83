"""``stepwatch publish`` of one file per rank, on the real broker: the files go to the topic merged by time, each
in its own order (stepwatch/recording.py ``merge_lines``, the road ``stepwatch replay`` reads them by), so a
live worker sees the job as it ran and alerts as replay of the same files does.

The recording is real: tests/fixtures/lightning_ddp_four_ranks/slow_rank3_from12.jsonl (a 4-rank Lightning
DDP job on gloo, rank 3 ~40 % slower from step 12, captured with ``stepwatch record``), split by rank as
tests/cli/test_replay_per_rank.py splits it, its times moved to an hour ago (the worker judges on today's clock).
Sent one file after another, rank 0's whole run would come before rank 1's: each step would close with one
rank's events and the straggler would be lost (replay of the concatenation shows it here).
"""

from __future__ import annotations

import io
import time
from pathlib import Path

import orjson
import pytest

from stepwatch.config import Settings
from stepwatch.recording import merge_lines, read_lines, replay
from support import read_all_alerts, run_stepwatch, stepwatch_env, topic_messages
from test_replay_per_rank import RECORDING, split_by_rank, write

pytestmark = pytest.mark.kafka


def _rank(event: dict) -> int:
    return event["rank"] if type(event.get("rank")) is int else 0  # rank-less phase events: rank 0's file


def rebased(line: bytes, shift: float, *, arrival: bool = True) -> bytes:
    """The line with every event's ``ts`` (and with ``arrival``, its ``_arrival``) moved by ``shift`` seconds."""
    value = orjson.loads(line)
    for event in value["events"] if value.get("kind") == "batch" else [value]:
        event["ts"] += shift
    if arrival and "_arrival" in value:
        value["_arrival"] += shift
    return orjson.dumps(value)


def events_of(lines) -> list[dict]:
    """The events of recording lines, in order, as they go on the wire (``_arrival`` taken off)."""
    out = []
    for line in lines:
        value = orjson.loads(line)
        value.pop("_arrival", None)
        out.extend(value["events"] if value.get("kind") == "batch" else [value])
    return out


def _first_cause(alert: dict) -> tuple | None:
    causes = alert["evidence"].get("suspected_causes") or []
    return (causes[0]["category"], causes[0].get("node"), causes[0].get("component")) if causes else None


def view(alerts: list[dict]) -> list[tuple]:
    return [(a["id"], a["type"], a["status"], tuple(a["ranks"]), _first_cause(a)) for a in alerts]


def per_rank_files(recording: Path, folder: Path, skew: dict[int, float] | None = None) -> list[str]:
    """The recording split into one file per rank under ``folder``, moved to an hour ago; ``skew``: seconds
    added to a rank's event times (its host's clock off)."""
    lines = list(read_lines([str(recording)]))
    first = orjson.loads(lines[0])
    shift = time.time() - 3600 - first.get("_arrival", first["ts"])
    files = split_by_rank([rebased(line, shift) for line in lines])
    for rank, offset in (skew or {}).items():
        files[rank] = [rebased(line, offset, arrival=False) for line in files[rank]]
    folder.mkdir(exist_ok=True)
    return write(folder, files)


@pytest.fixture
def rank_files(tmp_path) -> list[str]:
    paths = per_rank_files(RECORDING, tmp_path / "ranks")
    assert len(paths) == 4
    return paths


def test_per_rank_files_published_merged_give_the_alerts_replay_gives(kafka_bootstrap, topic_prefix,
                                                                       start_worker, rank_files, tmp_path):
    worker = start_worker()
    env = worker.env
    replayed = run_stepwatch("replay", *rank_files, env=env)
    expected = [orjson.loads(line) for line in replayed.stdout.splitlines() if line.strip()]
    assert {(a["type"], tuple(a["ranks"])) for a in expected} == {("straggler", (3,))}, view(expected)
    # The old road, one file after another, loses it (each step closed with one rank's events).
    concatenated = io.StringIO()
    replay(read_lines(rank_files), Settings(), out=concatenated)
    assert "straggler" not in concatenated.getvalue()

    result = run_stepwatch("publish", *rank_files, env=env)  # as fast as possible
    assert "188 events" in result.stderr and "0 dropped" in result.stderr, result.stderr
    live = read_all_alerts(kafka_bootstrap, topic_prefix + "alerts", until=lambda a: len(a) >= len(expected))
    assert view(live) == view(expected), worker.log_text()[-3000:]
    assert "Traceback" not in worker.log_text()

    # What went to the topic, read back: the merged order, each rank's events in its file's order, and in
    # broker-time order across the files (each line stands at its _arrival; every file is in arrival order).
    captured = tmp_path / "captured.jsonl"
    run_stepwatch("record", "-o", str(captured), env=env)
    sent = events_of(read_lines([str(captured)]))
    assert sent == events_of(merge_lines(rank_files))
    assert sent != events_of(read_lines(rank_files))
    for rank, path in enumerate(rank_files):
        assert [e for e in sent if _rank(e) == rank] == events_of(read_lines([path])), path
    arrivals = {orjson.dumps(e): orjson.loads(line)["_arrival"] for path in rank_files
                for line in read_lines([path]) for e in events_of([line])}
    assert len(arrivals) == len(sent)  # every event told apart, so the order below is the topic's
    at = [arrivals[orjson.dumps(e)] for e in sent]
    assert at == sorted(at)
    assert len({_rank(e) for e in sent[:20]}) == 4  # the ranks interleaved from the start



def test_files_written_on_each_host_published_at_their_pace_give_the_alerts_replay_gives(
        kafka_bootstrap, topic_prefix, start_worker, tmp_path):
    # tests/fixtures/hf_two_ranks: a 2-rank Hugging Face Trainer job on gloo, rank 1 slow from step 30, each line
    # as its rank wrote it (no broker time: the events' own times place them), rank 1's host clock 0.2 s ahead
    # (a few steps), published paced (--speed 2: each line when its time has come, the merge deciding which).
    worker = start_worker()
    env = worker.env
    paths = per_rank_files(RECORDING.parents[1] / "hf_two_ranks" / "slow_rank1_from30_loaded.jsonl",
                           tmp_path / "ranks", skew={1: 0.2})
    assert len(paths) == 2 and b"_arrival" not in Path(paths[0]).read_bytes()
    replayed = run_stepwatch("replay", *paths, env=env)
    expected = [orjson.loads(line) for line in replayed.stdout.splitlines() if line.strip()]
    assert ("straggler", "firing", (1,)) in [(a["type"], a["status"], tuple(a["ranks"])) for a in expected]

    result = run_stepwatch("publish", "--speed", "2", *paths, env=env)
    assert "114 events" in result.stderr and "0 dropped" in result.stderr, result.stderr
    live = read_all_alerts(kafka_bootstrap, topic_prefix + "alerts", until=lambda a: len(a) >= len(expected))
    assert view(live) == view(expected), worker.log_text()[-3000:]
    assert "Traceback" not in worker.log_text()

@pytest.mark.parametrize("bad", ["missing", "directory", "stdin twice"])
def test_an_unreadable_file_among_several_publishes_nothing(kafka_bootstrap, topic_prefix, rank_files, tmp_path,
                                                            bad):
    env = stepwatch_env(kafka_bootstrap, topic_prefix)
    if bad == "missing":
        culprit = str(tmp_path / "rank4.jsonl")
        files = [*rank_files, culprit]  # last: read one after another, four ranks would already be out
    elif bad == "directory":
        culprit = str(tmp_path)
        files = [*rank_files[:2], culprit, *rank_files[2:]]
    else:
        culprit = "-"
        files = ["-", *rank_files, "-"]
    result = run_stepwatch("publish", *files, env=env, check=False, input="")
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and culprit in lines[0] and "nothing published" in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    assert topic_messages(kafka_bootstrap, topic_prefix + "events") == 0
    # The same files without the bad one go out whole: the check refuses the file, not the command.
    run_stepwatch("publish", *rank_files, env=env)
    assert topic_messages(kafka_bootstrap, topic_prefix + "events") > 0

