"""RELIABILITY.md rows that no test guarded (issue 27 finding 15): each test here fails when its row breaks.

Checked once by breaking the code (see the commit): ``MAX_COUNTER`` raised to 2**63 fails the counter
tests, ``MAX_BATCH_EVENTS`` raised fails the batch tests, the password's ``repr=False`` or the
``as_dict`` redaction removed fails the password tests.
"""

from __future__ import annotations

import orjson
import pytest

from stepwatch.config import SecuritySettings, Settings
from stepwatch.models.wire.events import encode_events
from stepwatch.models.pipeline import Message, Pipeline

T0 = 1_764_000_000.0
#: The documented bounds (docs/events.md), written out: the test must not follow the code if it changes.
MAX_COUNTER = 2**53
MAX_BATCH_EVENTS = 100_000


def step(rank: int, n: int, **extra) -> dict:
    return {"v": 1, "kind": "step", "job": "j", "rank": rank, "step": n, "ts": T0 + min(n, 5), "step_time": 1.0,
            **extra}


def feed(*raws: bytes):
    pipeline = Pipeline()
    out = pipeline.feed([Message(raw, b"j", "ev", 0, i) for i, raw in enumerate(raws)], arrival=T0 + 10)
    return pipeline, out


@pytest.mark.parametrize("field, event", [
    ("step", step(0, MAX_COUNTER + 1)),
    ("rank", step(MAX_COUNTER + 1, 1)),
    ("seq", {"v": 1, "kind": "collective", "job": "j", "rank": 0, "seq": MAX_COUNTER + 1, "op": "allreduce",
             "ts": T0, "duration": 0.1}),
    ("seq_started", {"v": 1, "kind": "heartbeat", "job": "j", "rank": 0, "ts": T0, "step": 1,
                     "seq_started": MAX_COUNTER + 1, "seq_completed": 0}),
])
def test_counters_beyond_2_53_are_dead_lettered_alone_or_in_a_batch(field, event):
    _, out = feed(orjson.dumps(event))
    assert [d.cause for d in out.deadletters] == ["decode"] and field in out.deadletters[0].rejected.reason
    pipeline, out = feed(encode_events([step(1, 1), event, step(2, 1)]))  # in a batch: that event alone
    assert [d.rejected.payload for d in out.deadletters] == [event]
    assert pipeline.engine.events_by_kind["step"] == 2


def test_a_counter_of_exactly_2_53_is_accepted():
    pipeline, out = feed(orjson.dumps(step(0, MAX_COUNTER)))
    assert out.deadletters == [] and pipeline.engine.events_by_kind["step"] == 1


def test_a_batch_over_100000_events_is_rejected_before_parsing():
    tiny = {"v": 1}  # not even valid events: the count alone decides, before any is parsed
    pipeline, out = feed(orjson.dumps({"v": 1, "kind": "batch", "events": [tiny] * (MAX_BATCH_EVENTS + 1)}))
    assert len(out.deadletters) == 1
    assert f"batch of {MAX_BATCH_EVENTS + 1} events exceeds {MAX_BATCH_EVENTS}" in out.deadletters[0].rejected.reason
    assert pipeline.engine.events_by_kind["step"] == 0


def test_the_sasl_password_is_redacted_in_repr_and_the_status_view():
    secret = "hunter2-" + "x" * 8
    settings = Settings(security=SecuritySettings(protocol="SASL_SSL", sasl_username="u", sasl_password=secret))
    assert secret not in repr(settings) and secret not in repr(settings.security)
    shown = settings.as_dict()
    assert shown["security"]["sasl_password"] == "***" and secret not in orjson.dumps(shown).decode()
    assert settings.security.sasl_password == secret  # the client still gets it
