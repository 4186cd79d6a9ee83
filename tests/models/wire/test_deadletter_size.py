"""A dead letter always fits the topic (issue 44 row 10): too large, it keeps a prefix of the original bytes
with the whole message's size and sha256 (models/wire/deadletter.py). On the real broker, through a worker:
tests/models/wire/test_deadletter_size_kafka.py."""

from __future__ import annotations

import base64
import hashlib
import random

import orjson
import pytest

from stepwatch.models.wire.deadletter import (Rejected, deadletter_budget, deadletter_message, deadletter_record)

BUDGETS = (1_024, 4_096, 100_000, 999_488)


def _variants():
    """(raw, rejected parts, key): sizes around and far beyond each budget, big bad events, many parts."""
    rng = random.Random(44)
    for size in (0, 10, 700, 3_000, 75_000, 200_000, 921_600, 3_000_000):
        raw = rng.randbytes(size)
        yield raw, [Rejected("malformed JSON", raw)], b"job-1"
        yield raw, [Rejected("'rank' must be an integer", {"rank": "x" * size}, 0)], b"job-2"
        yield raw, [Rejected(f"bad {i}: " + "r" * 500, None, i) for i in range(2_000)], b"k" * 3_000
    yield None, [Rejected("no value", None)], None


def _check(out: bytes, raw: bytes | None, max_bytes: int) -> dict:
    assert len(out) <= max_bytes, (len(out), max_bytes)
    record = orjson.loads(out)
    if raw is None:
        assert record["value_b64"] is None
        return record
    kept = base64.b64decode(record["value_b64"])
    if record.get("truncated"):
        assert record["value_size"] == len(raw) and record["value_sha256"] == hashlib.sha256(raw).hexdigest()
        assert kept == raw[:record["value_kept"]]
    else:
        assert kept == raw  # it fit: the whole message, nothing said about truncation
        assert "value_sha256" not in record
    return record


@pytest.mark.parametrize("max_bytes", BUDGETS)
def test_every_dead_letter_fits_its_budget_and_identifies_the_whole_message(max_bytes):
    for raw, rejected, key in _variants():
        out = deadletter_message(rejected, cause="decode", topic="t", partition=0, offset=7, key=key, raw=raw,
                                 max_bytes=max_bytes)
        record = _check(out, raw, max_bytes)
        assert record["rejected_count"] == len(rejected) and record["offset"] == 7
        _check(deadletter_record(rejected[0], topic="t", partition=0, offset=7, key=key, raw=raw,
                                 max_bytes=max_bytes), raw, max_bytes)


def test_a_small_message_is_kept_whole_and_unlimited_is_unchanged():
    raw = b'{"not": json'
    rejected = [Rejected("malformed JSON", raw)]
    limited = deadletter_message(rejected, cause="decode", topic="t", partition=0, offset=1, key=b"j", raw=raw,
                                 max_bytes=deadletter_budget(1_000_000, b"j"))
    whole = orjson.loads(deadletter_message(rejected, cause="decode", topic="t", partition=0, offset=1, key=b"j",
                                            raw=raw))
    assert orjson.loads(limited).keys() == whole.keys() and "truncated" not in whole


def test_the_budget_leaves_room_for_the_key_and_the_record():
    assert deadletter_budget(1_000_000, b"k" * 100) == 1_000_000 - 512 - 100
    assert deadletter_budget(1_000_000, None) < 1_000_000
