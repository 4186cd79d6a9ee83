"""The worker's feedback feed without a broker (issue 41): the verdicts in force and their counts stay consistent
whatever the order, bound and tombstones; bad records are counted, not applied; the low-precision sentence goes to
Alertmanager's copy of an alert only; the web route's input checks."""

from __future__ import annotations

import random

import orjson
import pytest

from stepwatch.models.alerts import Alert
from stepwatch.models.wire.feedback import Feedback, Verdict
from streams.alertmanager import am_alert
from streams.feedback_feed import OTHER, FeedbackFeed, make_record, parse_request


def recount(feed: FeedbackFeed) -> dict:
    out: dict = {}
    for f in feed.verdicts.values():
        key = (feed.label(f.type), f.verdict)
        out[key] = out.get(key, 0) + 1
    return out


@pytest.mark.parametrize("seed", range(4))
def test_counts_always_match_the_verdicts_in_force(seed):
    rng = random.Random(seed)
    feed = FeedbackFeed(max_alerts=50)
    for k in range(2000):
        ident = f"a{rng.randrange(80)}"
        if rng.random() < 0.1:
            feed.apply(ident)  # a tombstone
            continue
        feed.apply(Feedback(alert_id=ident, verdict=rng.choice(list(Verdict)), by="x", at=float(k),
                            automatic=rng.random() < 0.3, type=rng.choice(["straggler", "hang", "weird", None])))
        assert len(feed.verdicts) <= 50
    assert feed.counts == recount(feed)
    assert {kind for kind, _ in feed.counts} <= {"straggler", "hang", OTHER}


def test_a_person_beats_the_machine_and_a_tombstone_takes_back():
    feed = FeedbackFeed()
    feed.apply(Feedback(alert_id="a", verdict=Verdict.FALSE, by="alice", at=1.0, type="hang"))
    feed.apply(Feedback(alert_id="a", verdict=Verdict.CONFIRMED, by="stepwatch", at=2.0, automatic=True, type="hang"))
    assert feed.counts == {("hang", Verdict.FALSE): 1}
    feed.apply_record(b"a", None)
    assert feed.counts == {} and not feed.verdicts


def test_a_record_that_is_not_feedback_is_counted_not_applied():
    feed = FeedbackFeed()
    for junk in (b"not json", b"[]", b'{"alert_id": "a", "verdict": "maybe"}', b'{"verdict": "false"}'):
        feed.apply_record(b"a", junk, "partition 0 offset 1")
    assert feed.refused == 4 and not feed.verdicts
    families = {f.name: f for f in feed.collect()}
    assert families["stepwatch_alert_feedback_refused"].samples[0].value == 4


def test_the_low_precision_sentence_needs_enough_verdicts_and_goes_to_alertmanager_only():
    feed = FeedbackFeed(low=0.5, min_feedback=10)
    for k in range(9):
        feed.apply(Feedback(alert_id=f"f{k}", verdict=Verdict.FALSE, by="x", at=1.0, type="straggler"))
    assert feed.note("straggler") is None  # 9 verdicts: not enough to say
    feed.apply(Feedback(alert_id="c", verdict=Verdict.CONFIRMED, by="x", at=1.0, type="straggler"))
    note = feed.note("straggler")
    assert note and "1 of 10 straggler alerts" in note and feed.note("hang") is None
    alert = Alert(id="s1", status="firing", type="straggler", severity="warning", job="j", ranks=(3,),
                  nodes=("n1",), starts_at=1.0, summary="rank 3 is slow")
    record = orjson.dumps(alert.to_dict())
    sent = am_alert(alert, now=2.0, resend_interval=60.0, precision_note=note)
    assert sent["annotations"]["summary"] == f"rank 3 is slow {note}" and sent["annotations"]["precision"] == note
    assert orjson.dumps(alert.to_dict()) == record  # the alerts-topic record is as it was
    assert "precision" not in am_alert(alert, now=2.0, resend_interval=60.0)["annotations"]


def test_the_web_route_checks_its_input():
    known = ("straggler", "llm")
    record = make_record("s1", {"verdict": "false", "note": "noisy", "by": "alice"}, known, now=5.0)
    assert (record.verdict, record.type, record.job, record.by, record.automatic) == (
        Verdict.FALSE, "straggler", "llm", "alice", False)
    assert make_record("s1", {"verdict": "confirmed"}, known, now=5.0).by == "web"
    for fields in ({"verdict": "transient"}, {"verdict": "maybe"}, {}):  # transient is the machine's word only
        with pytest.raises(ValueError, match="unknown verdict"):
            make_record("s1", fields, known, now=5.0)
    with pytest.raises(LookupError, match="no alert s9"):
        make_record("s9", {"verdict": "false"}, None, now=5.0)
    assert make_record("s9", {"verdict": "false", "type": "hang"}, None, now=5.0).type == "hang"
    with pytest.raises(ValueError):
        make_record("x" * 201, {"verdict": "false"}, known, now=5.0)
    assert parse_request(b"verdict=false&note=a+b", "application/x-www-form-urlencoded") == {"verdict": "false",
                                                                                           "note": "a b"}
    with pytest.raises(ValueError, match="not JSON"):
        parse_request(b"{", "application/json")
