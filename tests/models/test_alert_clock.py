"""Alert times on the broker's clock when the job's hosts' clocks are off (models/alert_clock.py; the metamorphic
grid's ``clocks +-30s`` leftover): whatever the hosts' error, an alert found at the same step is stamped at the
same broker time, every version of one alert keeps one ``starts_at``, and hosts within the tolerance of the
broker keep their own times (nothing moves for a healthy cluster)."""

from __future__ import annotations

import dataclasses
import random

import pytest

from recordings import hang, straggler_and_slowdown
from stepwatch.models.alert_clock import MAX_KEPT, TOLERANCE_SECONDS, AlertClock
from stepwatch.models.alerts import Alert, AlertStatus
from stepwatch.models.detection import DetectionEngine
from stepwatch.models import alert_clock
from stepwatch.models.wire.events import parse_event
from stepwatch.models.wire.step_columns import StepColumns


T0 = 1_770_000_000.0


def _replay(events: list[dict], error: float | None, delivery: float, seed: int) -> list[Alert]:
    """The events stamped ``error`` seconds off true time (None: no arrival known), each arriving ``delivery``
    (+ jitter) after its true time; the timer ticks every second on the broker's clock."""
    rng = random.Random(seed)
    engine = DetectionEngine()
    out: list[Alert] = []
    next_tick = T0
    for e in events:
        true = e["ts"]
        arrival = true + delivery + rng.random() * 0.05
        while next_tick < arrival:
            out.extend(engine.tick(next_tick))
            next_tick += 1.0
        stamped = dict(e, ts=round(true + (error or 0.0), 6))
        out.extend(engine.process(parse_event(stamped), arrival=None if error is None else arrival))
    end = next_tick + 900
    while next_tick < end:
        out.extend(engine.tick(next_tick))
        next_tick += 1.0
    return out


def _first(alerts: list[Alert], kind: str) -> Alert:
    return next(a for a in alerts if a.type == kind and a.status == AlertStatus.FIRING)


def _one_start_per_id(alerts: list[Alert]) -> None:
    starts: dict[str, float] = {}
    for a in alerts:
        assert starts.setdefault(a.id, a.starts_at) == a.starts_at, a
        if a.ends_at is not None:
            assert a.ends_at >= a.starts_at - 1e-6, a


@pytest.mark.parametrize("seed", range(3))
def test_a_straggler_is_stamped_on_the_broker_clock_whatever_the_hosts_error(seed: int):
    rng = random.Random(seed)
    events = straggler_and_slowdown("clk", t0=T0)
    truth = _first(_replay(events, None, 0.0, seed), "straggler").starts_at  # stamped by right clocks
    for error in (rng.uniform(6, 60), -rng.uniform(6, 60)):
        delivery = rng.uniform(0.05, 1.0)
        alerts = _replay(events, error, delivery, seed)
        got = _first(alerts, "straggler")
        assert abs(got.starts_at - (truth + delivery)) < 0.2, (error, delivery, got.starts_at - truth)
        _one_start_per_id(alerts)


@pytest.mark.parametrize("error", [-(TOLERANCE_SECONDS - 1), 0.0, TOLERANCE_SECONDS - 1])
def test_clocks_within_the_tolerance_keep_the_hosts_times(error: float):
    events = straggler_and_slowdown("ok", t0=T0)
    stamped = [(a.id, a.starts_at, a.ends_at) for a in _replay(events, None, 0.0, 0) if a.type == "straggler"]
    shifted = [(a.id, a.starts_at - error, None if a.ends_at is None else a.ends_at - error)
               for a in _replay(events, error, 0.3, 0) if a.type == "straggler"]
    assert [s[0] for s in shifted] == [s[0] for s in stamped]
    assert all(abs(a[1] - b[1]) < 1e-5 for a, b in zip(shifted, stamped))


def test_a_hang_is_stamped_on_the_broker_clock_whatever_the_hosts_error():
    events = hang("h", t0=T0, steps=40, tail=120.0)
    base = _first(_replay(events, 0.0, 0.2, 0), "hang").starts_at
    for error in (-45.0, 30.0):
        alerts = _replay(events, error, 0.2, 0)
        assert abs(_first(alerts, "hang").starts_at - base) <= 1.0 + 1e-6, error  # (one tick)
        _one_start_per_id(alerts)


def test_the_shift_is_kept_per_episode_and_bounded():
    clock = AlertClock()
    a = Alert(id="a", status=AlertStatus.FIRING, type="straggler", severity="warning", job="j", ranks=(1,),
              nodes=(), starts_at=100.0, summary="s")
    clock.choose([a], -20.0)
    assert clock.to_broker(a).starts_at == 80.0
    clock.choose([a], -21.0)
    assert clock.to_broker(a).starts_at == 80.0  # the first version's shift, not a new estimate
    done = a.resolved(at=130.0)
    clock.choose([done], -25.0)
    assert (clock.to_broker(done).starts_at, clock.to_broker(done).ends_at) == (80.0, 110.0)
    again = dataclasses.replace(a, starts_at=200.0)  # a new episode of the id: chosen afresh
    clock.choose([again], 1.0)
    assert clock.to_broker(again) is again  # (within the tolerance: as stamped)
    for i in range(1000):
        clock.choose([dataclasses.replace(a, id=str(i))], -20.0)
    assert len(clock) <= MAX_KEPT
    assert clock.to_broker(dataclasses.replace(a, id="999")).starts_at == 80.0  # the latest kept
    assert clock.shift(dataclasses.replace(a, id="0")) is None  # the least recently seen forgotten
    made = dataclasses.replace(a, id="incident", starts_at=300.0)  # one the outlet made of the job's alerts
    assert clock.to_broker(made).starts_at == 280.0  # the offset the job's latest alert was given


def test_enrichment_reads_the_hosts_times_and_only_what_leaves_moves():
    """The shift is made at the end of the outlet chain: the engine's alerts (what node telemetry enriches and the
    outlet cites) keep the hosts' times; the returned ones move by the job's offset, one shift per episode."""
    events = straggler_and_slowdown("clk", t0=T0)
    engine = DetectionEngine()
    seen: list[Alert] = []
    enrich = engine.telemetry.enrich

    def spy(alerts):
        seen.extend(alerts)
        return enrich(alerts)

    engine.telemetry.enrich = spy
    out: list[Alert] = []
    for e in events:
        out.extend(engine.process(parse_event(dict(e, ts=e["ts"] + 30.0)), arrival=e["ts"] + 0.5))
    hosts = {(a.id, a.status): a.starts_at for a in seen if a.type == "straggler"}
    left = [a for a in out if a.type == "straggler"]
    assert left and hosts
    for a in left:
        assert abs(hosts[a.id, a.status] - 29.5 - a.starts_at) < 0.1, a


def _roads(events: list[dict], per_message: int, batched: bool) -> list[dict]:
    """Each host stamps ``30 + rank / 2`` s ahead, and delivery slows (the job's lags move row by row); consecutive step events go as
    column runs of up to ``per_message`` (``batched``) or one at a time, ticks at the same message bounds."""
    engine = DetectionEngine()
    out: list[Alert] = []
    next_tick, i = T0, 0
    while i < len(events):
        j = i + 1
        while j < len(events) and j - i < per_message and events[i]["kind"] == events[j]["kind"] == "step":
            j += 1
        chunk = events[i:j]
        arrivals = [e["ts"] + 0.3 + 0.002 * (i + k) for k, e in enumerate(chunk)]  # (delivery slowly later)
        stamped = [parse_event(dict(e, ts=round(e["ts"] + 30.0 + 0.5 * (e.get("rank") or 0), 6))) for e in chunk]
        while next_tick < arrivals[0]:
            out.extend(engine.tick(next_tick))
            next_tick += 1.0
        if batched and chunk[0]["kind"] == "step":
            out.extend(engine.process_batch(StepColumns.of(stamped), arrival=arrivals))
        else:
            for ev, arrival in zip(stamped, arrivals):
                out.extend(engine.process(ev, arrival=arrival))
        i = j
    for _ in range(900):
        out.extend(engine.tick(next_tick))
        next_tick += 1.0
    # (what the clock decides; evidence.onset_ts differs by road apart from any clock: the outlet reads the job's
    # recent steps after the whole run, one event at a time after the firing row)
    return [{k: v for k, v in a.to_dict().items() if k in ("id", "status", "type", "ranks", "starts_at", "ends_at")}
            for a in out]


@pytest.mark.parametrize("per_message", [8, 64])
def test_a_column_run_shifts_its_rows_alerts_as_one_event_at_a_time(per_message: int, monkeypatch):
    """The shift of an alert fired by a column run's earlier row is the job's offset as of that row (the lags
    change row by row here), so the column road publishes what one event at a time does."""
    events = straggler_and_slowdown("col", t0=T0)
    one = _roads(events, per_message, batched=False)
    assert _roads(events, per_message, batched=True) == one
    monkeypatch.setattr(alert_clock, "ON", False)
    hosts = {(a["id"], a["status"]): a["starts_at"] for a in _roads(events, per_message, batched=False)}
    moved = [hosts[a["id"], a["status"]] - a["starts_at"] for a in one if a["type"] == "straggler"]
    assert moved and all(d > 25.0 for d in moved), moved  # (the hosts' median error, ~32 s, taken off)


def _fed(job: str, error: float, events: list[dict]) -> tuple[DetectionEngine, list[Alert]]:
    """An engine fed ``events`` stamped ``error`` s off, each arriving 0.5 s after its true time, ticked as it goes."""
    engine = DetectionEngine()
    out: list[Alert] = []
    for e in events:
        out.extend(engine.process(parse_event(dict(e, ts=round(e["ts"] + error, 6))), arrival=e["ts"] + 0.5))
        out.extend(engine.tick(e["ts"] + 0.5))
    return engine, out


@pytest.mark.parametrize("error", [-40.0, 30.0])
def test_a_shifted_alert_carries_its_shift_and_a_held_one_of_an_evicted_job_leaves_on_it(error: float):
    """What leaves carries its shift (``SHIFT_KEY``: the hosts' times are starts_at less it). A version a stage held
    (on the hosts' clock) that leaves once its job is evicted, in a later call, goes on its episode's shift."""
    engine, out = _fed("gone", error, straggler_and_slowdown("gone", t0=T0))
    fired = _first(out, "straggler")
    assert abs(alert_clock.shift_of(fired) - (0.5 - error)) < 0.1, fired.evidence  # (arrival less stamp)
    held = alert_clock.with_shift(fired, 0.0)  # the version a stage held, on the hosts' clock
    assert alert_clock.SHIFT_KEY not in held.evidence
    assert abs(held.starts_at - (fired.starts_at + error - 0.5)) < 0.1
    engine.tick(T0 + 10 * 86_400.0)  # evicted as idle (a call of its own)
    assert "gone" not in engine.jobs
    left = engine.on_broker_clock([held])[0]
    assert (left.starts_at, alert_clock.shift_of(left)) == (fired.starts_at, alert_clock.shift_of(fired))


def test_an_alert_the_outlet_makes_of_a_job_no_rule_alerted_on_goes_on_the_broker_clock():
    """A restart of a healthy job (``job_restart``, made by the outlet, no rule alert before it) takes the job's offset
    as of the timer's latest visit; within the tolerance it keeps the hosts' times."""
    for error, moved in ((30.0, True), (2.0, False)):
        events = [e for e in straggler_and_slowdown("calm", t0=T0, slow=(0, 0), slowdown_from=10**6)
                  if e["kind"] == "step"]
        engine, out = _fed("calm", error, events)
        assert not [a for a in out if a.job == "calm"]
        restart = Alert(id="r1", status=AlertStatus.FIRING, type="job_restart", severity="warning", job="calm",
                        ranks=(), nodes=(), starts_at=T0 + 50.0, summary="job_restart")
        left = engine.on_broker_clock([restart])[0]
        assert (abs(left.starts_at - (T0 + 50.0 + 0.5 - error)) < 0.1) if moved else left is restart, (error, left)
