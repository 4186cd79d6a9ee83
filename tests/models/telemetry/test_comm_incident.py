"""A job's comm slowdowns that overlap are one incident (models/jobhealth/comm.py, "One incident per job").

Hand-written collectives of a 4-rank job with two process groups (a data-parallel all-reduce ``dp`` and a
tensor-parallel all-gather ``tp``), every rank slowed alike from a given collective on, as a slower fabric does.
"""

from __future__ import annotations

from stepwatch.models.jobhealth.comm import MAX_INCIDENT_UPDATES, CommSlowdownDetector, CommEvidence
from stepwatch.models.wire.events import CollectiveEvent


def feed(detector, *, groups, seqs, slow, t0=1000.0):
    """Every group's collective ``seq`` for ``seq`` in ``seqs``, 4 ranks; ``slow(group, seq)``: its factor."""
    out = []
    for seq in seqs:
        for pg, op in groups:
            base = 0.010 if op == "allreduce" else 0.004
            for rank in range(4):
                out += detector.update(CollectiveEvent(job="j", rank=rank, seq=seq, op=op, pg=pg, ts=t0 + seq,
                                                       bytes=1 << 20, duration=base * slow(pg, seq) * (1 + rank / 1000),
                                                       node=f"n{rank // 2}"))
    return out


GROUPS = [("dp", "allreduce"), ("tp", "allgather")]


def test_two_groups_slowed_together_are_one_alert_that_resolves_once():
    d = CommSlowdownDetector(job="j")
    alerts = feed(d, groups=GROUPS, seqs=range(300), slow=lambda pg, s: 2.0 if 100 <= s < 180 else 1.0)
    assert {a.type for a in alerts} == {"comm_slowdown"}
    assert len({a.id for a in alerts}) == 1, [a.summary for a in alerts]
    firing = [a for a in alerts if a.status == "firing"]
    resolved = [a for a in alerts if a.status == "resolved"]
    assert len(resolved) == 1 and alerts[-1] is resolved[0]  # one resolution, once both recovered
    assert [(s["process_group"], s["op"]) for s in firing[-1].evidence["slowed"]] == [("dp", "allreduce"),
                                                                                  ("tp", "allgather")]
    assert "one incident: 1 more slowed with it: allgather on tp" in firing[-1].summary
    assert resolved[0].evidence["resolution"] == "recovered"
    assert resolved[0].evidence["slowed"] == firing[-1].evidence["slowed"]
    # The incident's evidence still reads as the first key's record
    assert CommEvidence.from_dict(resolved[0].evidence).process_group == firing[0].evidence["process_group"]
    assert d.open_alerts() == []


def test_one_slowed_group_is_the_same_alert_as_before():
    d = CommSlowdownDetector(job="j")
    alerts = feed(d, groups=GROUPS, seqs=range(300), slow=lambda pg, s: 2.0 if pg == "dp" and 100 <= s < 180 else 1.0)
    assert [a.status for a in alerts] == ["firing", "resolved"]
    assert "slowed" not in alerts[0].evidence and "one incident" not in alerts[0].summary
    assert alerts[1].summary.startswith("resolved: allreduce latency back to baseline")


def test_the_incident_stays_open_while_one_group_is_still_slow_and_a_later_slowdown_is_a_new_one():
    d = CommSlowdownDetector(job="j")
    # dp slow 100-180, tp slow 100-240; then dp again from 400 (after the incident resolved)
    slow = lambda pg, s: 2.0 if (100 <= s < 180) or (pg == "tp" and s < 240 and s >= 100) or (pg == "dp" and s >= 400) \
        else 1.0
    alerts = feed(d, groups=GROUPS, seqs=range(560), slow=slow)
    ids = list(dict.fromkeys(a.id for a in alerts))
    assert len(ids) == 2
    first = [a for a in alerts if a.id == ids[0]]
    assert [a.status for a in first][-1] == "resolved" and sum(a.status == "resolved" for a in first) == 1
    # resolved only after tp recovered: after collective 240
    assert first[-1].ends_at >= 1000.0 + 240
    second = [a for a in alerts if a.id == ids[1]]
    assert second[0].status == "firing" and second[0].evidence["process_group"] == "dp"


def test_many_groups_publish_a_few_versions_and_close_resolves_the_incident():
    groups = [(f"pp{i}", "recv") for i in range(12)]
    d = CommSlowdownDetector(job="j")
    alerts = feed(d, groups=[(pg, "allreduce") for pg, _ in groups], seqs=range(200),
                  slow=lambda pg, s: 3.0 if s >= 100 else 1.0)
    assert len({a.id for a in alerts}) == 1
    # versions at 1, 2, 4 and 8 keys joined, not one per key
    assert [len(a.evidence.get("slowed", [None])) for a in alerts] == [1, 2, 4, 8]
    assert len(alerts) <= MAX_INCIDENT_UPDATES + 1
    (closed,) = d.close(at=5000.0, reason="job ended")
    assert closed.status == "resolved" and closed.id == alerts[0].id and len(closed.evidence["slowed"]) == 12
    assert d.open_alerts() == []
