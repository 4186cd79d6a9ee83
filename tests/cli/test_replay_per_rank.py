"""``stepwatch replay`` of one file per rank (or node): the files are merged by time, each in its own order
(stepwatch/recording.py ``merge_lines``), so replaying them is replaying one recording of the whole job.

The recording is real: tests/fixtures/lightning_ddp_four_ranks/slow_rank3_from12.jsonl is what the events
topic held after a 4-rank Lightning ``strategy="ddp"`` job on gloo (tests/fw_rank.py, rank 3 ~40 % slower
from step 12; ``stepwatch record``, so every line has its broker ``_arrival``). It is split here by rank, as
if each rank had written its own file; the messy cases (no broker time, host clocks that disagree, a rank's
events written out of order, lost lines) are made from it.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import orjson
import pytest

from recordings import write_files
from stepwatch.config import Settings
from stepwatch.recording import merge_lines, read_lines, replay

RECORDING = Path(__file__).resolve().parents[1] / "fixtures" / "lightning_ddp_four_ranks" / "slow_rank3_from12.jsonl"


def _rank(event: dict) -> int:
    # Rank 0's job-wide phase events carry no rank: they come from rank 0's process, so its file.
    return event["rank"] if type(event.get("rank")) is int else 0


def split_by_rank(lines: list[bytes]) -> dict[int, list[bytes]]:
    """Each rank's lines, in the recording's order (a batch envelope split into one per rank)."""
    files: dict[int, list[bytes]] = {}
    for line in lines:
        value = orjson.loads(line)
        if value.get("kind") != "batch":
            files.setdefault(_rank(value), []).append(line)
            continue
        by_rank: dict[int, list[dict]] = {}
        for event in value["events"]:
            by_rank.setdefault(_rank(event), []).append(event)
        for rank, events in by_rank.items():
            files.setdefault(rank, []).append(orjson.dumps(dict(value, events=events)))
    return files


def edit_events(line: bytes, fn) -> bytes:
    """The line with ``fn`` applied to each of its events (a batch's, or the lone one)."""
    value = orjson.loads(line)
    if value.get("kind") == "batch":
        return orjson.dumps(dict(value, events=[fn(dict(e)) for e in value["events"]]))
    return orjson.dumps(fn(value))


def no_arrival(line: bytes) -> bytes:
    value = orjson.loads(line)
    value.pop("_arrival", None)
    return orjson.dumps(value)


def write(tmp_path: Path, files: dict[int, list[bytes]]) -> list[str]:
    return write_files(tmp_path, {f"rank{rank:05d}": lines for rank, lines in files.items()})  # (in rank order)


def alerts_of(lines) -> list[dict]:
    out = io.StringIO()
    replay(lines, Settings(), out=out)
    return [orjson.loads(line) for line in out.getvalue().splitlines()]


def view(alerts: list[dict]) -> list[tuple]:
    """What an alert says, without the clock-derived figures (times, the on-call's compute share)."""
    return [(a["job"], a["type"], a["status"], tuple(a["ranks"]), a["evidence"].get("signal"),
             a["evidence"].get("detected_step")) for a in alerts]


@pytest.fixture(scope="module")
def recording() -> list[bytes]:
    return list(read_lines([str(RECORDING)]))


@pytest.fixture(scope="module")
def expected(recording) -> list[dict]:
    alerts = alerts_of(recording)
    # The recording's own verdict: rank 3 named from its compute time within 10 steps, nobody else.
    assert {(a["type"], tuple(a["ranks"])) for a in alerts} == {("straggler", (3,))}, view(alerts)
    assert alerts[0]["evidence"]["detected_step"] < 12 + 10
    return alerts


def test_per_rank_files_with_broker_times_replay_exactly_as_the_recording(recording, expected, tmp_path):
    paths = write(tmp_path, split_by_rank(recording))
    assert len(paths) == 4
    assert alerts_of(merge_lines(paths)) == expected  # every field, ids and times included
    # Read one after another, each step closed with one rank's events: the straggler was lost.
    assert not [a for a in alerts_of(read_lines(paths)) if a["type"] == "straggler"]


def test_the_replay_command_merges_the_files(recording, expected, tmp_path):
    from support import run_stepwatch

    paths = write(tmp_path, split_by_rank(recording))
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPWATCH_")}  # default settings, as above
    result = run_stepwatch("replay", *paths, env=env)
    assert [orjson.loads(line) for line in result.stdout.splitlines() if line.strip()] == expected, result.stderr


def test_a_missing_file_among_several_replays_nothing(recording, tmp_path):
    """Checked before the first alert: the alerts of the other ranks' files alone are not the job's."""
    from support import run_stepwatch

    paths = write(tmp_path, split_by_rank(recording))
    missing = tmp_path / "rank-9.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPWATCH_")}
    result = run_stepwatch("replay", *paths, str(missing), env=env, check=False)
    assert result.returncode != 0 and result.stdout == ""
    assert result.stderr.strip() == f"stepwatch replay: {missing}: no such file; nothing replayed"


def test_per_rank_files_written_on_each_host_merge_by_event_time(recording, expected, tmp_path):
    # What each rank would write itself: no broker time, only its events' own timestamps.
    files = {r: [no_arrival(line) for line in lines] for r, lines in split_by_rank(recording).items()}
    assert view(alerts_of(merge_lines(write(tmp_path, files)))) == view(expected)


def test_host_clocks_that_disagree(recording, expected, tmp_path):
    # Rank 2's host 0.3 s ahead, rank 1's 0.2 s behind (several steps of ~80 ms): merged by the skewed times, the
    # per-host files put those ranks' steps out of place; step assembly still lines them up by step number.
    skew = {1: -0.2, 2: 0.3}

    def shifted(rank: int):
        return lambda e: dict(e, ts=e["ts"] + skew.get(rank, 0.0)) if "ts" in e else e

    files = {r: [edit_events(no_arrival(line), shifted(r)) for line in lines]
             for r, lines in split_by_rank(recording).items()}
    assert view(alerts_of(merge_lines(write(tmp_path, files)))) == view(expected)


def test_a_rank_file_out_of_time_order_is_replayed_in_its_own_order(recording, expected, tmp_path):
    # Rank 0's writer put some of its lines out of time order (two adjacent step lines swapped, three times):
    # the file's order is kept (a line that goes back in time stays behind the one before it).
    files = {r: [no_arrival(line) for line in lines] for r, lines in split_by_rank(recording).items()}
    rank0 = files[0]
    steps = [i for i, line in enumerate(rank0) if b'"kind":"step"' in line]
    for i in steps[5:35:10]:
        rank0[i], rank0[i + 1] = rank0[i + 1], rank0[i]
    merged = list(merge_lines(write(tmp_path, files)))
    assert [line for line in merged if line in rank0] == rank0
    assert view(alerts_of(merged)) == view(expected)


def test_lost_lines_are_lost_the_same_way_in_both(recording, tmp_path):
    # Three of rank 1's step lines lost (on the host, before any file was merged): the per-rank files and the
    # one recording with the same lines missing give the same alerts.
    lost = set()
    for line in recording:
        if b'"rank":1,' in line and b'"kind":"step"' in line and len(lost) < 3 and b'"step":2' in line:
            lost.add(line)
    assert len(lost) == 3
    kept = [line for line in recording if line not in lost]
    one = alerts_of(kept)
    assert alerts_of(merge_lines(write(tmp_path, split_by_rank(kept)))) == one
    assert [a["ranks"] for a in one if a["type"] == "straggler"][:1] == [[3]]


def test_merge_keeps_each_file_order_and_puts_timeless_lines_with_their_predecessor(tmp_path):
    a = tmp_path / "a.jsonl"
    b = tmp_path / "b.jsonl"
    a.write_bytes(b'{"kind":"step","ts":1.0,"n":"a1"}\n{"kind":"step","ts":3.0,"n":"a2"}\n'
                  b'{"kind":"step","ts":2.0,"n":"a3"}\n{"kind":"config","_key":"x","n":"a4"}\nnot json\n'
                  b'{"kind":"step","ts":5.0,"n":"a5"}\n')
    b.write_bytes(b'{"kind":"batch","events":[{"ts":0.5},{"ts":2.5}],"n":"b1"}\n{"kind":"step","ts":3.0,"n":"b2"}\n'
                  b'{"kind":"step","ts":4.0,"_arrival":9.0,"n":"b3"}\n{"kind":"step","ts":4.5,"n":"b4"}\n')
    order = [orjson.loads(line)["n"] if line.startswith(b"{") else "bad" for line in merge_lines([str(a), str(b)])]
    # a3 (ts 2) stays behind a2 (ts 3); a4 and the bad line go with a3; a batch stands at its latest event
    # (2.5); ties (3.0) go to the file named first; b3 stands at its arrival (9), b4 behind it.
    assert order == ["a1", "b1", "a2", "a3", "a4", "bad", "b2", "a5", "b3", "b4"]
    assert list(merge_lines([str(a)])) == list(read_lines([str(a)]))
