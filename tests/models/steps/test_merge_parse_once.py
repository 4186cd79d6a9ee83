"""Several recordings merged by time (stepwatch/recording.py ``merge_recorded``) are parsed once a line: the merge
parses each line for its time and hands the parsed line on (``RecordedLine``, models/sources.py), which replay's
pipeline and ``stepwatch publish`` take as it is. The files: the Lightning fixture split by rank, with the messy
lines a hand-merged set has (a config line, bad JSON, a batch with a non-object event, a line whose ``_arrival``
is not a Unix time)."""

from __future__ import annotations

import io

import orjson
import pytest

import stepwatch.models.sources as sources
from stepwatch import recording
from stepwatch.config import Settings
from stepwatch.recording import merge_lines, merge_recorded, read_lines, replay
from test_replay_per_rank import RECORDING, split_by_rank, write


class _Counting:
    """A function that counts its calls."""

    def __init__(self, fn) -> None:
        self.fn, self.calls = fn, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.fn(*args, **kwargs)


@pytest.fixture
def per_rank(tmp_path) -> list[str]:
    files = split_by_rank(list(read_lines([str(RECORDING)])))
    files[1][5:5] = [b'{"v":1,"kind":"config","_key":"*","straggler":{"ratio_threshold":1.05}}', b"not json {",
                     b'{"v":1,"kind":"batch","events":[1,{"ts":"x"}]}']
    return write(tmp_path, files)


@pytest.fixture
def parses(monkeypatch) -> tuple[_Counting, _Counting]:
    """Counters of the parses: the recording line parser's (``parse_value``) and any other (``orjson.loads``
    in stepwatch/recording.py)."""
    parse_value = _Counting(sources.parse_value)
    monkeypatch.setattr(sources, "parse_value", parse_value)
    loads = _Counting(orjson.loads)

    class _Orjson:
        def __getattr__(self, name):
            return loads if name == "loads" else getattr(orjson, name)

    monkeypatch.setattr(recording, "orjson", _Orjson())
    return parse_value, loads


def _lines(paths: list[str]) -> int:
    return sum(1 for _ in read_lines(paths))


def test_replay_of_several_files_parses_each_line_once(per_rank, parses):
    parse_value, loads = parses
    out = io.StringIO()
    stats = replay(merge_recorded(per_rank), Settings(), out=out)
    assert (parse_value.calls, loads.calls) == (_lines(per_rank), 0)
    assert stats["rejected"] == 3 and stats["alerts"] >= 1  # the bad lines dead-lettered, the straggler found
    # The same alerts as the bytes the merge puts in that order, each parsed by the pipeline alone.
    again = io.StringIO()
    replay(list(merge_lines(per_rank)), Settings(), out=again)
    assert again.getvalue() == out.getvalue()


def test_publish_of_several_files_parses_each_line_once(per_rank, parses):
    parse_value, loads = parses
    events = [recording._line_events(line) for line in merge_recorded(per_rank, what="publish")]
    assert (parse_value.calls, loads.calls) == (_lines(per_rank), 0)
    assert sum(1 for e, _ in events if e is None) == 2  # bad JSON, a batch with a non-object event
    # One file: each line parsed once, by the merge (its head, read for the hosts' clocks: recording.py
    # ``_one_recording``) or where it is used (the rest, bytes).
    parse_value.calls = 0
    for line in merge_recorded(per_rank[:1]):
        recording._line_events(line)
    assert parse_value.calls == _lines(per_rank[:1])


def test_a_line_over_the_message_limit_is_still_published_in_batches():
    from stepwatch.models.wire.wire import MAX_MESSAGE_BYTES

    event = {"v": 1, "kind": "heartbeat", "job": "j", "rank": 0, "ts": 1.0, "pad": "x" * 1000}
    n = MAX_MESSAGE_BYTES // 1000 + 10
    line = orjson.dumps({"v": 1, "kind": "batch", "events": [event] * n, "_arrival": 5.0})
    assert len(line) > MAX_MESSAGE_BYTES
    events, arrival = recording._line_events(line)
    assert (len(events), arrival) == (n, None)  # replay dead-letters such a message; publish splits it


def test_a_line_whose_arrival_is_not_a_unix_time_is_merged_by_its_event_time(tmp_path):
    """Replay's clock ignores an ``_arrival`` outside (0, 1e11) (models/sources.py); the merge places the line by
    its event time too, so one such line does not push the rest of its file behind every other file."""
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_bytes(b'{"kind":"step","ts":1.0,"n":"a1"}\n{"kind":"step","ts":2.0,"_arrival":1e12,"n":"a2"}\n'
                  b'{"kind":"step","ts":3.0,"n":"a3"}\n')
    b.write_bytes(b'{"kind":"step","ts":1.5,"n":"b1"}\n{"kind":"step","ts":2.5,"n":"b2"}\n'
                  b'{"kind":"step","ts":3.5,"n":"b3"}\n')
    order = [orjson.loads(line)["n"] for line in merge_lines([str(a), str(b)])]
    assert order == ["a1", "b1", "a2", "b2", "a3", "b3"]
