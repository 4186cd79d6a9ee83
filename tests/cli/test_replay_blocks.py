"""A recording read by blocks (stepwatch/recording.py ``read_blocks``, models/sources.py ``recorded_blocks``: issue 41
item 5). Invariants, wherever the blocks happen to be cut (a block size of a few bytes to 1 MiB): the lines are
those of the file read line by line, and the replay's alerts and counts are those of the road before (a read per
arrival, line by line), with odd lines (bad JSON, an integer or missing ``_arrival``, a runtime setting, blank and
CRLF lines) anywhere."""

from __future__ import annotations

import io
import random

import orjson
import pytest

import stepwatch.recording as recording
from recordings import hang, straggler_and_slowdown
from stepwatch.config import Settings
from stepwatch.recording import merge_recorded, read_lines, replay

T0 = 1_764_000_000.0

ODD = [b"{not json", b'{"v":1,"kind":"step","job":"x","rank":-1,"step":1,"ts":1.0,"_arrival":1764000000.0}',
       orjson.dumps({"v": 1, "kind": "config", "_key": "rec-a", "straggler": {"ratio_threshold": 1.3}}),
       b"[1, 2]", b'"just a string"']


def _recording(seed: int) -> bytes:
    rng = random.Random(seed)
    events = sorted(straggler_and_slowdown("rec-a", t0=T0) + hang("rec-b", t0=T0 + 20), key=lambda e: e["ts"])
    lines = []
    for i, e in enumerate(events):
        at = round(e["ts"] + 0.1 + (i % 7) * 0.013, 6)
        what = rng.random()
        if what < 0.01:
            lines.append(orjson.dumps(e))  # no arrival: on the event's clock
        elif what < 0.02:
            lines.append(orjson.dumps(dict(e, _arrival=int(at))))  # an integer arrival
        else:
            lines.append(orjson.dumps(dict(e, _arrival=at)))
        if rng.random() < 0.01:
            lines.append(rng.choice(ODD))
    ends = [b"\n", b"\r\n", b"\n\n", b"  \n"]
    return b"".join(line + rng.choice(ends) for line in lines)[:-1]  # (the last line without its newline)


def _replay(path, *, blocks: bool) -> tuple[str, dict]:
    out = io.StringIO()
    stats = replay(merge_recorded([str(path)], blocks=blocks), Settings(), drain=120.0, out=out,
                   across_arrivals=blocks)
    return out.getvalue(), stats


@pytest.mark.parametrize("block", [97, 4096, 1 << 20])
def test_a_recording_read_by_blocks_replays_as_line_by_line(block, tmp_path, monkeypatch):
    path = tmp_path / "recording.jsonl"
    path.write_bytes(_recording(block))
    before = _replay(path, blocks=False)
    with path.open("rb") as f:
        expected = [line.strip() for line in f if line.strip()]
    monkeypatch.setattr(recording, "READ_BLOCK", block)
    assert list(read_lines([str(path)])) == expected
    after = _replay(path, blocks=True)
    assert after == before
    assert before[1]["alerts"] >= 2 and before[1]["rejected"] >= 1  # not vacuous


def test_a_line_longer_than_a_block_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(recording, "READ_BLOCK", 16)
    lines = [b"x" * 100, b"", b"short", b"y" * 40 + b"\r", b"z" * 33]
    path = tmp_path / "long.jsonl"
    path.write_bytes(b"\n".join(lines))
    assert list(read_lines([str(path)])) == [b"x" * 100, b"short", b"y" * 40, b"z" * 33]


@pytest.mark.parametrize("blocks", [True, False])
@pytest.mark.parametrize("seed", range(4))
def test_odd_first_lines_do_not_decide_whose_clock_the_arrivals_are(tmp_path, seed, blocks):
    """Whether a recording's arrivals are the broker's (``_arrival``, alert times then on the broker's clock:
    models/alert_clock.py) is told by its first JSON object, whatever odd lines (bad JSON, a runtime setting, not an
    object) come before it, read by blocks or line by line."""
    rng = random.Random(seed)
    for with_arrival in (True, False):
        good = [orjson.dumps({"v": 1, "kind": "step", "job": "j", "rank": r, "step": s, "ts": T0 + s,
                              "step_time": 1.0, "world_size": 2, **({"_arrival": T0 + s + 0.2} if with_arrival else {})})
                for s in range(20) for r in range(2)]
        path = tmp_path / f"rec-{with_arrival}.jsonl"
        odd = [line for line in ODD if b"_arrival" not in line]  # (a bad event with an arrival is a recorded one)
        path.write_bytes(b"\n".join(rng.sample(odd, rng.randrange(1, len(odd) + 1)) + good) + b"\n")

        class Engine:
            broker_arrivals = None

        engine = Engine()
        list(recording._told_arrivals(merge_recorded([str(path)], blocks=blocks), engine))
        assert engine.broker_arrivals is with_arrival
