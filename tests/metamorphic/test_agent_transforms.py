"""The node agent's transformations (transforms.py, "the node agent"): each keeps what its docstring says on a
generated telemetry recording, for several periods and seeds. No replay: fast."""

from __future__ import annotations

import pytest

from . import transforms as t
from .recording import Line, Recording

T0 = 1_764_000_000.0


def _rec(period: float = 5.0, seconds: float = 600.0, rate: int = 100, onset: float | None = 300.0) -> Recording:
    """One node: a rank's steps every second, a port's counters at ``rate``/s (10x from the onset), a GPU heating
    from the onset, sampled every ``period``."""
    lines, count, t_ = [], 0, 0.0
    while t_ <= seconds:
        ts = T0 + t_
        hot = onset is not None and t_ >= onset
        lines.append(Line(ts, {"v": 1, "kind": "link", "node": "n0", "ts": ts, "device": "mlx5_0", "port": 1,
                               "state": "ACTIVE", "counters": {"port_rcv_errors": count, "port_xmit_data": 7 * count}}))
        lines.append(Line(ts, {"v": 1, "kind": "gpu", "node": "n0", "ts": ts, "gpu": 0, "temp": 90.0 if hot else 60.0,
                               "sm_clock": 1200.0 if hot else 1980.0, "throttle": 64 if hot else 0, "ecc_sbe": 0}))
        count += int(rate * period * (10 if hot else 1))
        t_ += period
    for s in range(int(seconds)):
        lines.append(Line(T0 + s + 0.5, {"v": 1, "kind": "step", "job": "j", "rank": 0, "node": "n0", "step": s,
                                         "ts": T0 + s + 0.5, "step_time": 1.0}))
    lines.sort(key=lambda line: line.arrival)
    return Recording("agent", tuple(lines), onset=None if onset is None else T0 + onset)


def _series(rec: Recording, name: str = "port_rcv_errors") -> list[tuple[float, int]]:
    return [(e["ts"], e["counters"][name]) for e in rec.events("link")]


def _rate(series, a: float, b: float) -> float:
    inside = [(ts, v) for ts, v in series if a <= ts <= b]
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


@pytest.mark.parametrize("seconds", [1.0, 2.5, 10.0, 30.0])
@pytest.mark.parametrize("period", [2.0, 5.0])
def test_agent_period_keeps_the_rates_and_the_period(seconds, period):
    rec = _rec(period)
    out = t.agent_period(rec, seconds)
    series = _series(out)
    gaps = [b[0] - a[0] for a, b in zip(series, series[1:])]
    assert all(g >= min(seconds, period) * 0.999 for g in gaps) and max(gaps) <= max(seconds, period) + period + 1e-6  # (thinned on the base grid)
    assert all(b[1] >= a[1] for a, b in zip(series, series[1:]))  # still cumulative
    for a, b in ((T0, T0 + 290), (T0 + 330, T0 + 600)):  # the healthy and the faulty rate, per second
        assert _rate(series, a, b) == pytest.approx(_rate(_series(rec), a, b), rel=0.05)
    assert [e for e in out.events("step")] == [e for e in rec.events("step")]
    assert rec.lines == _rec(period).lines  # pure


@pytest.mark.parametrize("at", [100.0, 360.0])
def test_agent_restart_resets_every_counter_once_and_leaves_the_rest(at):
    rec = _rec()
    out = t.agent_restart(rec, T0 + at, down=20.0)
    series = _series(out)
    before = [v for ts, v in series if ts < T0 + at]
    after = [(ts, v) for ts, v in series if ts >= T0 + at]
    assert before == [v for ts, v in _series(rec) if ts < T0 + at]
    assert not [ts for ts, _ in series if T0 + at <= ts < T0 + at + 20.0]  # the agent was down
    assert after[0][1] < before[-1] or before[-1] == 0  # the reset: backwards once ...
    assert all(b[1] >= a[1] for a, b in zip(after, after[1:]))  # ... and cumulative again
    assert _rate(after, after[0][0], after[-1][0]) == pytest.approx(_rate(_series(rec), after[0][0], after[-1][0]))
    assert [e for e in out.events("step")] == [e for e in rec.events("step")]


@pytest.mark.parametrize("how", ["late", "duplicated", "reordered"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_telemetry_delivery_moves_telemetry_only_and_keeps_each_agent_in_order(how, seed):
    rec = _rec()
    out = t.telemetry_delivery(rec, how, seed=seed)
    assert [line for line in out.lines if line.event["kind"] == "step"] == \
        [line for line in rec.lines if line.event["kind"] == "step"]
    link = [e["ts"] for e in out.events("link")]
    assert link == sorted(link)  # an agent's own order is kept
    assert {e["ts"] for e in out.events("link")} == {e["ts"] for e in rec.events("link")}  # nothing lost


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_telemetry_clock_moves_telemetry_stamps_only(seed):
    rec = _rec()
    out = t.telemetry_clock(rec, 30.0, seed=seed)
    assert [e for e in out.events("step")] == [e for e in rec.events("step")]
    offs = {round(a["ts"] - b["ts"], 3) for a, b in zip(out.events("link"), rec.events("link"))}
    assert len(offs) == 1 and abs(offs.pop()) <= 30.0


@pytest.mark.parametrize("seconds", [120.0, 600.0])
def test_telemetry_drift_ramps_the_fault_and_ends_where_the_base_is(seconds):
    rec = _rec(seconds=1200.0)
    out = t.telemetry_drift(rec, seconds)
    assert out.onset == rec.onset + seconds
    temps = [(e["ts"], e["temp"]) for e in out.events("gpu")]
    assert all(b[1] >= a[1] for a, b in zip(temps, temps[1:]))  # rising, never jumping back
    mid = [v for ts, v in temps if rec.onset + 0.4 * seconds <= ts <= rec.onset + 0.6 * seconds]
    assert mid and all(60.0 < v < 90.0 for v in mid)
    assert [v for ts, v in temps if ts >= out.onset] == [e["temp"] for e in rec.events("gpu") if e["ts"] >= out.onset]
    series = _series(out)
    assert all(b[1] >= a[1] for a, b in zip(series, series[1:]))
    assert _rate(series, rec.onset + 10, rec.onset + 0.2 * seconds) < _rate(_series(rec), out.onset, T0 + 1200)
    assert [v for ts, v in series if ts >= out.onset] == [v for ts, v in _series(rec) if ts >= out.onset]
