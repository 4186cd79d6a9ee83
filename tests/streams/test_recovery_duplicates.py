"""A second life publishes nothing the first already did (issue 44, row 8; broker-free).

The first life runs the whole stream and publishes its alerts (the alerts topic); a restarted worker
rebuilds from the messages before a committed offset (any cut), remembers the topic, and reads the rest
again (what the first life had processed but not committed). The events are the same, so it may publish
nothing: no firing again (even one the topic has resolved), no resolution again, no node_suspect the
ledger derives again. The Kafka test (test_recovery_kafka.py) runs one such cut on the real broker.
"""

from __future__ import annotations

import pytest

from fleet import Job, job_events, xid_event
from stepwatch.models.pipeline import Message, Pipeline
from stepwatch.models.wire.events import encode_events
from stepwatch.sim.simulator import ClusterSimulator, SimulationSpec, StragglerFault
from stepwatch.streams.recovery import RecoverySpan, rebuild, settle

LATENCY = 0.05


def stream() -> list[tuple[bytes, float]]:
    """(message, broker time): a straggler that fires and resolves; a job on n7 whose GPU then falls off the bus
    (gpu_fault and a node_suspect naming both incidents), in time order."""
    spec = SimulationSpec(job="job-s", ranks=8, steps=140, start_time=1_764_000_000.0,
                          stragglers=(StragglerFault(rank=3, start_step=60, factor=1.6, end_step=75),))
    out = [(t, encode_events(batch)) for t, batch in ClusterSimulator(spec).steps()]
    job = Job("job-c", ["n6", "n7"], start=1_764_000_000.0, slow_node="n7", slow_from=30, checkpoint_at=None)
    events = job_events(job)
    out += [(max(e["ts"] for e in events[i:i + 8]), encode_events(events[i:i + 8])) for i in range(0, len(events), 8)]
    out.append((1_764_000_100.0, encode_events([xid_event("n7", 1, 79, 1_764_000_100.0)])))
    out.sort(key=lambda m: m[0])
    return [(raw, t + LATENCY) for t, raw in out]


def live(pipeline: Pipeline, messages: list[tuple[bytes, float]]) -> list:
    published = []
    for raw, at in messages:
        published += pipeline.feed([Message(raw)], arrival=at).alerts + pipeline.tick(at).alerts
    return published


STREAM = stream()
FIRST = live(Pipeline(), STREAM)


def test_the_stream_has_what_a_second_life_could_repeat():
    said = {(a.type, a.status) for a in FIRST}
    assert {("straggler", "firing"), ("straggler", "resolved"), ("gpu_fault", "firing"),
            ("node_suspect", "firing")} <= said


def said(alerts) -> list[tuple]:
    return [(a.id, a.type, a.status, a.severity) for a in alerts]


@pytest.mark.parametrize("cut, kill", [(c, k) for c in (0.02, 0.5) for k in (0.55, 0.9, 1.0)])
def test_two_lives_publish_what_one_uninterrupted_life_does(cut, kill):
    """The first life dies after ``kill`` of the stream, its group committed ``cut`` (fractions); the second
    rebuilds from the span before ``cut`` and reads on from there. Together: each alert once, as one life."""
    cut, kill = int(cut * len(STREAM)), int(kill * len(STREAM))
    first = live(Pipeline(), STREAM[:kill])
    second = Pipeline()
    span = RecoverySpan(partitions=(0,), event_messages=[(0, raw, at) for raw, at in STREAM[:cut]],
                        alerts=[a.to_dict() for a in first], resume_at={0: STREAM[cut][1]})
    unsettled: list = []
    _, reconcile = rebuild(second, span, now=STREAM[cut][1], unsettled=unsettled)
    again = second.publishable(reconcile) + live(second, STREAM[cut:])
    again += second.publishable(settle(second, unsettled, {0}, STREAM[-1][1]))
    assert said(first + again) == said(FIRST)


@pytest.mark.parametrize("ratio", [1.31, 1.5, 2.7])
def test_a_firing_read_back_is_said_whatever_the_figures_of_its_re_derivation(ratio):
    """A previous life's firing read back from the topic: the second life's version of the same episode that says
    no new word (its own ratio) is already said; one naming a cause the topic does not hold, or a higher severity,
    is news; once this life has published, its own updates go as usual."""
    from stepwatch.models.alerts import Alert
    from stepwatch.models.published import PublishedAlerts

    def straggler(ratio, severity="warning", **words):
        return Alert(id="s1", status="firing", type="straggler", severity=severity, job="j", ranks=(3,),
                     nodes=("n1",), starts_at=100.0, summary=f"straggler: {ratio}x",
                     evidence={"signal": "step_time", "ratio": ratio, **words})

    published = PublishedAlerts()
    published.remember(straggler(1.3).to_dict(), read_back=True)
    assert published.is_duplicate(straggler(ratio))
    assert not published.is_duplicate(straggler(ratio, incident="i9"))
    assert not published.is_duplicate(straggler(ratio, severity="critical"))
    published.remember(straggler(ratio, incident="i9"))  # this life published an update: the topic's latest
    assert not published.is_duplicate(straggler(ratio + 1, incident="i9"))
