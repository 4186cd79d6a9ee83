"""Replay at fleet speed (issue 41 item 5): lines of different ``_arrival`` are merged into the worker's column
batches, each row on its own arrival. The alerts are byte-identical JSON Lines to replay's previous road (a
read per arrival, ``across_arrivals=False``: one line a read for single-event recordings), and so are the
counts, on a sample of every recording family the tests use: the scenario library, tests/gen2, tests/gen3
and tests/recordings.py, with bad lines and recorded runtime settings mixed in."""

from __future__ import annotations

import io
import random

import orjson
import pytest

from gen2.scenarios import catalog
from gen2.transport import merge
from gen3.scenarios import scenarios as gen3_scenarios
from gen3.write import build
from recordings import hang, straggler_and_slowdown
from stepwatch.config import Settings
from stepwatch.recording import merge_recorded, replay
from stepwatch.sim import scenarios as library

T0 = 1_764_000_000.0


def _library(name: str, seed: int, limit: int | None = None) -> list[bytes]:
    """A library scenario as single-event lines, each with its own ``_arrival`` (a broker's jittered lag, so
    that neighbouring lines differ), a bad line now and then; its first ``limit`` lines (a bounded sample)."""
    rng = random.Random(seed)
    out = []
    for i, event in enumerate(e for _, batch in library.batches(library.get(name)) for e in batch):
        if isinstance(event.get("ts"), float):
            event = dict(event, _arrival=round(event["ts"] + 0.05 + rng.random() * 0.2, 6))
        out.append(orjson.dumps(event))
        if i % 1499 == 7:
            out.append(b'{"v":1,"kind":"step","job":"x","rank":-1,"step":1,"ts":1.0,"_arrival":1764000000.0}')
            out.append(b"{not json")
    return out[:limit]


def _hand_made() -> list[bytes]:
    """tests/recordings.py's incidents, one event a line, each stamped with its arrival; a runtime setting on the
    way (a config line, as ``stepwatch record`` writes them)."""
    events = sorted(straggler_and_slowdown("rec-a", t0=T0) + hang("rec-b", t0=T0 + 20), key=lambda e: e["ts"])
    lines = [orjson.dumps(dict(e, _arrival=round(e["ts"] + 0.1 + (i % 7) * 0.013, 6))) for i, e in enumerate(events)]
    config = orjson.dumps({"v": 1, "kind": "config", "_key": "rec-a", "straggler": {"ratio_threshold": 1.3}})
    return lines[:len(lines) // 2] + [config] + lines[len(lines) // 2:]


def _gen2() -> list[bytes]:
    """A few tests/gen2 scenarios as one broker stream (batch envelopes with ``_arrival``)."""
    chosen = [s for s in catalog() if s.name in ("straggler-2-ranks", "hang-skew-lossy", "flaky-gpu", "fabric-a")]
    return merge(s.timed_lines() for s in chosen)


def _gen3(name: str) -> list[bytes]:
    sc = next(s for s in gen3_scenarios() if s.name == name)
    return [line.encode() for line in build(sc)[0]]


RECORDINGS = {
    "library-hang-hang-64": lambda: _library("hang-hang-64", 1),
    "library-net-ib-errors-64": lambda: _library("net-ib-errors-64", 2, 20_000),
    "recordings-hand-made": _hand_made,
    "gen2-fleet": _gen2,
    "gen3-xid79_dead_rank": lambda: _gen3("xid79_dead_rank"),
    "gen3-link_fault": lambda: _gen3("link_fault"),
    "gen3-node_suspect_two_jobs": lambda: _gen3("node_suspect_two_jobs"),
    "gen3-envelopes_loose_types": lambda: _gen3("envelopes_loose_types"),
    "gen3-spare_straggles": lambda: _gen3("spare_straggles"),
}


def _replay(path, *, fast: bool, blocks: bool = True) -> tuple[bytes, dict]:
    out = io.StringIO()
    stats = replay(merge_recorded([str(path)], blocks=blocks), Settings.from_env(), drain=900.0, out=out,
                   across_arrivals=fast)
    return out.getvalue().encode(), stats


@pytest.mark.parametrize("name", sorted(RECORDINGS))
def test_fast_replay_is_byte_identical_to_a_read_per_arrival(name, tmp_path):
    """The road before (a read per arrival, line by line), the lines merged one by one, and the lines read a block at
    a time (``merge_recorded(blocks=True)``, what ``stepwatch replay`` does): the same bytes and counts."""
    path = tmp_path / f"{name}.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in RECORDINGS[name]()))
    before, before_stats = _replay(path, fast=False, blocks=False)
    assert before_stats["events"] > 0
    for blocks in (False, True):
        after, after_stats = _replay(path, fast=True, blocks=blocks)
        assert after == before, blocks
        assert after_stats == before_stats, blocks


def test_the_sample_raises_alerts_and_dead_letters(tmp_path):
    """The comparison above is not vacuous: the sample's recordings raise alerts and carry lines to reject."""
    alerts = rejected = 0
    for name in ("library-hang-hang-64", "gen3-xid79_dead_rank", "recordings-hand-made"):
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(b"".join(line + b"\n" for line in RECORDINGS[name]()))
        _, stats = _replay(path, fast=True)
        alerts += stats["alerts"]
        rejected += stats["rejected"]
    assert alerts >= 3
    assert rejected >= 1
