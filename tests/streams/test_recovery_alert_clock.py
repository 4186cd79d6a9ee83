"""Alert times across a worker's restart (models/alert_clock.py, models/published.py; broker-free, the recovery road
of tests/streams/test_recovery_duplicates.py; tests/streams/test_recovery_kafka.py runs one cut on the real broker).

The job's hosts' clocks run ``error`` seconds off the broker (0, +-30 s, +-300 s), so its alert times go on the
broker's clock by the job's arrival lag. A first life reads the stream ``d1`` seconds behind the broker and dies
at a generated point; its group had committed an earlier one; the second life rebuilds from the span before the
commit (record times moved on by how far behind it resumes, ``d2``) and reads on. Together they must publish what
one life does, each alert once, with the times it would have: an episode the first life published keeps its times
(its shift read back from the topic), any other has the times of a life that read everything ``d2`` behind. With
``d1 == d2`` that is one life that never died. ``stepwatch replay`` of the stream as a recording with ``_arrival``
gives one life's times too (one road).
"""

from __future__ import annotations

import io
import random

import orjson
import pytest

from fleet import Job, job_events, xid_event
from stepwatch.config import Settings
from stepwatch.models.alert_clock import SHIFT_KEY, hosts_start
from stepwatch.models.pipeline import Message, Pipeline
from stepwatch.models.wire.events import encode_events
from stepwatch.recording import replay
from stepwatch.sim.simulator import ClusterSimulator, SimulationSpec, StragglerFault
from stepwatch.streams.recovery import RecoverySpan, rebuild, settle

T0 = 1_764_000_000.0
LATENCY = 0.05
ERRORS = (0.0, 30.0, -30.0, 300.0, -300.0)


def stream(error: float) -> list[tuple[bytes, float]]:
    """(message, broker time): a straggler that fires and resolves (job-s), a slow node's straggler (job-c) whose
    GPU then falls off the bus (its agent's clock right), the jobs' hosts ``error`` seconds off, in broker order."""
    spec = SimulationSpec(job="job-s", ranks=8, steps=140, start_time=T0 + error,
                          stragglers=(StragglerFault(rank=3, start_step=60, factor=1.6, end_step=75),))
    out = [(t - error, encode_events(batch)) for t, batch in ClusterSimulator(spec).steps()]
    job = Job("job-c", ["n6", "n7"], start=T0 + error, slow_node="n7", slow_from=30, checkpoint_at=None)
    events = job_events(job)
    out += [(max(e["ts"] for e in events[i:i + 8]) - error, encode_events(events[i:i + 8]))
            for i in range(0, len(events), 8)]
    out.append((T0 + 100.0, encode_events([xid_event("n7", 1, 79, T0 + 100.0)])))
    out.sort(key=lambda m: m[0])
    return [(raw, t + LATENCY) for t, raw in out]


STREAMS = {error: stream(error) for error in ERRORS}


def live(pipeline: Pipeline, messages: list[tuple[bytes, float]], behind: float) -> list:
    """What a worker reading ``messages`` ``behind`` seconds after they reached the broker publishes."""
    published = []
    for raw, at in messages:
        published += pipeline.feed([Message(raw)], arrival=at + behind).alerts + pipeline.tick(at + behind).alerts
    return published


_ONE: dict[tuple[float, float], list] = {}


def one(error: float, behind: float) -> list:
    """One life's alerts (computed once per case)."""
    if (error, behind) not in _ONE:
        _ONE[error, behind] = live(Pipeline(), STREAMS[error], behind)
    return _ONE[error, behind]


def said(alerts) -> list[tuple]:
    return [(a.id, a.type, a.status, a.severity) for a in alerts]


def times(alerts) -> list[tuple]:
    return [(a.id, a.status, round(a.starts_at, 3), None if a.ends_at is None else round(a.ends_at, 3))
            for a in alerts]


def episode(alert) -> tuple[str, float]:
    return alert.id, round(hosts_start(alert), 3)


def two_lives(error: float, cut: int, kill: int, d1: float, d2: float) -> tuple[list, list]:
    """(the first life's alerts, the second's) for a kill after ``kill`` messages, ``cut`` committed."""
    messages = STREAMS[error]
    first = live(Pipeline(), messages[:kill], d1)
    second = Pipeline()
    resume = messages[cut][1] if cut < len(messages) else messages[-1][1]
    span = RecoverySpan(partitions=(0,), event_messages=[(0, raw, at) for raw, at in messages[:cut]],
                        alerts=[a.to_dict() for a in first],
                        resume_at={0: resume} if cut < len(messages) else {})
    unsettled: list = []
    _, reconcile = rebuild(second, span, now=resume + d2, unsettled=unsettled)
    again = second.publishable(reconcile) + live(second, messages[cut:], d2)
    again += second.publishable(settle(second, unsettled, {0}, messages[-1][1] + d2))
    return first, again


def cases(n: int, seed: int = 41) -> list[tuple]:
    """Generated: hosts' error, commit and kill fractions, how far behind each life reads."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        error = ERRORS[i % len(ERRORS)]
        cut = rng.uniform(0.02, 0.95)
        kill = rng.uniform(cut, 1.0)
        d1 = rng.choice((0.0, 0.0, 20.0, 600.0))
        d2 = d1 if i % 3 == 0 else rng.choice((0.0, 20.0, 600.0))
        out.append(pytest.param(error, round(cut, 3), round(kill, 3), d1, d2,
                                id=f"err{error:+g}-cut{cut:.2f}-kill{kill:.2f}-behind{d1:g}->{d2:g}"))
    return out


def test_the_streams_have_shifted_alerts_of_every_kind_a_restart_could_repeat():
    for error in ERRORS:
        alerts = one(error, 0.0)
        assert {("straggler", "firing"), ("straggler", "resolved"), ("gpu_fault", "firing"),
                ("node_suspect", "firing")} <= {(a.type, a.status) for a in alerts}
        shifted = [a for a in alerts if a.job and SHIFT_KEY in a.evidence]
        assert bool(shifted) == (abs(error) > 5), (error, times(shifted))
        assert all(SHIFT_KEY not in a.evidence for a in alerts if not a.job)  # node alerts: the agents' times


@pytest.mark.parametrize("error, cut, kill, d1, d2", cases(15))
def test_a_restarted_worker_publishes_one_lifes_alerts_at_one_lifes_times(error, cut, kill, d1, d2):
    messages = STREAMS[error]
    cut, kill = int(cut * len(messages)), int(kill * len(messages))
    first, again = two_lives(error, cut, kill, d1, d2)
    both = first + again
    assert said(both) == said(one(error, d2))  # each alert once
    said_first = {episode(a) for a in first}
    expected = [a1 if episode(a2) in said_first else a2 for a1, a2 in zip(one(error, d1), one(error, d2))]
    assert times(both) == times(expected)
    starts: dict[tuple[str, float], float] = {}
    for a in both:  # one episode, one published starts_at, to the digit, across the lives
        assert starts.setdefault(episode(a), a.starts_at) == a.starts_at, a


@pytest.mark.parametrize("error", ERRORS)
def test_replay_of_the_recording_gives_the_live_roads_times(error):
    """One road: ``stepwatch replay`` of the stream with ``_arrival`` stamps what the live road does."""
    lines = [orjson.dumps({**orjson.loads(raw), "_arrival": at}) for raw, at in STREAMS[error]]
    out = io.StringIO()
    replay(lines, Settings.from_env(), out=out)
    replayed = [orjson.loads(line) for line in out.getvalue().splitlines() if line.strip()]
    live_times = {(a.id, a.status): (round(a.starts_at, 3), a.ends_at and round(a.ends_at, 3))
                  for a in one(error, 0.0)}
    for record in replayed:
        key = (record["id"], record["status"])
        if key in live_times:
            assert (round(record["starts_at"], 3), record["ends_at"] and round(record["ends_at"], 3)) \
                == live_times[key], (error, record["type"])
    assert {(r["id"], r["status"]) for r in replayed if r["type"] == "straggler"} \
        == {(a.id, a.status) for a in one(error, 0.0) if a.type == "straggler"}
