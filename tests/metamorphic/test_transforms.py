"""The transformations and invariants themselves (tests/metamorphic): each does what its docstring says on a
small hand-made recording (tests/recordings.py), and the invariants fail a wrong verdict. No replay: fast."""

from __future__ import annotations

import random
import statistics
from collections import Counter, defaultdict
from dataclasses import replace

import orjson
import pytest

from recordings import hang, straggler_and_slowdown

from . import transforms as t
from .invariants import check
from .recording import Line, Recording, from_lines, replay
from .verdict import Verdict, verdict

T0 = 1_764_000_000.0


def _hang() -> Recording:
    rec = from_lines("hang", [orjson.dumps(e) for e in hang("h", t0=T0, steps=10, tail=60.0)], onset=T0 + 10)
    return rec


def _straggler() -> Recording:
    return from_lines("s", [orjson.dumps(e) for e in straggler_and_slowdown("s", t0=T0, steps=60)], onset=T0 + 12)


def test_time_scale_scales_steps_and_keeps_the_heartbeat_period():
    rec = _hang()
    slow = t.time_scale(rec, 60.0)
    assert abs(slow.step_time() - 60.0) < 1e-6 and abs(slow.scale - 60.0 / rec.step_time()) < 1e-9
    beats = [e["ts"] for e in slow.events("heartbeat") if e["rank"] == 0]
    gaps = [b - a for a, b in zip(beats, beats[1:])]
    assert max(gaps) <= t.MAX_PERIOD["heartbeat"] + 1e-6 or max(gaps) <= 60.0 * 1.2  # stuck gaps filled
    assert slow.onset > rec.onset
    fast = t.time_scale(rec, 0.02)
    assert abs(fast.step_time() - 0.02) < 1e-6
    assert rec.lines == _hang().lines  # pure: the base is unchanged


def test_delivery_transforms_keep_each_producers_order_and_events():
    rec = _straggler()
    for variant in (t.reordered(rec, 3.0, seed=1), t.late(rec, 0.1, 30.0, seed=1)):
        assert variant.arrival and Counter(orjson.dumps(e) for e in variant.events()) == \
            Counter(orjson.dumps(e) for e in rec.events())
        by_rank: dict = {}
        for line in variant.lines:
            if line.event.get("kind") == "step":
                by_rank.setdefault(line.event["rank"], []).append(line.event["step"])
        assert all(steps == sorted(steps) for steps in by_rank.values())
    doubled = t.duplicated(rec, 0.5, seed=1)
    assert len(rec.lines) * 1.3 < len(doubled.lines) < len(rec.lines) * 1.7


def test_heartbeat_lag_delays_only_heartbeats():
    rec = _hang()
    lagged = t.heartbeat_lag(rec, 2.0, 1.0, seed=1)
    steps = [line for line in lagged.lines if line.event["kind"] == "step"]
    assert sorted(line.arrival for line in steps) == sorted(line.arrival for line in rec.lines
                                                            if line.event["kind"] == "step")
    lag = [b.arrival - b.event["ts"] for b in lagged.lines if b.event["kind"] == "heartbeat"]
    assert min(lag) >= 2.0 - 1e-9


def test_clock_offsets_move_stamps_not_arrivals():
    rec = t.reordered(_straggler(), 0.0)
    skewed = t.clock_offsets(rec, 30.0, seed=2)
    moved = {line.event["node"]: round(line.event["ts"] - old.event["ts"], 3)
             for line, old in zip(skewed.lines, rec.lines) if "node" in line.event}
    assert len(set(moved.values())) > 1 and all(abs(v) <= 30 for v in moved.values())
    assert [line.arrival for line in skewed.lines] == [line.arrival for line in rec.lines]


def test_clock_offsets_stamp_a_job_wide_marker_on_rank_0s_host():
    rec = t.reordered(t.pause_before_fault(_hang(), "checkpoint", 60.0), 0.0)  # job-wide phase markers, no node
    skewed = t.clock_offsets(rec, 30.0, seed=2)
    rank0 = next(line.event["node"] for line in rec.lines if line.event.get("rank") == 0 and "node" in line.event)
    moved = {line.event.get("node", "marker") if line.event["kind"] != "phase" else "marker":
             round(line.event["ts"] - old.event["ts"], 3) for line, old in zip(skewed.lines, rec.lines)}
    assert moved["marker"] == moved[rank0] != 0.0


def test_pause_shifts_the_fault_and_brackets_it():
    rec = _hang()
    paused = t.pause_before_fault(rec, "checkpoint", 60.0)
    phases = [(e["phase"], e["ts"]) for e in paused.events("phase")]
    at = phases[0][1]
    assert [p for p, _ in phases] == ["checkpoint", "train"] and phases[1][1] == at + 60.0
    last = max(e["ts"] for e in rec.events("step"))  # the stuck rank's hang begins after the last step: the pause
    assert abs(at - last) < 0.01 and paused.onset == rec.onset + 60.0  # comes at that step boundary
    during = [e for e in paused.events("heartbeat") if at < e["ts"] < at + 60]
    assert {e["rank"] for e in during} == {0, 1, 2, 3}


def _sync_job(ranks: int, pace: float, per_step: int, hb_every: float, spread: float, hang: bool,
              seed: int, tail: int = 20) -> tuple[Recording, int, int]:
    """A synchronous job of steps of ``pace`` s, ``per_step`` collectives each (4 at start-up), each rank's host
    clock up to ``spread`` s off, heartbeats every ``hb_every`` s at each rank's own phase saying the last step
    ended and the collectives done by then; the onset after 45 s at least (step 40 at least), where (``hang``) the
    last rank never reaches the step's first collective that the others wait in (``tail`` more steps without). Returns it,
    the last step before the onset and the job's count at its end."""
    rng = random.Random(seed)
    off = [(rng.random() * 2 - 1) * spread for _ in range(ranks)]
    off = [round(x - statistics.median(off), 3) for x in off]  # (around the true time: the onset's clock)
    onset = max(40, int(45.0 / pace))  # (45 s of heartbeats before it at least)
    steps = onset + tail
    events: list[tuple[float, dict]] = []

    def count(t: float) -> tuple[int, int]:  # (steps ended, collectives done) at true time t
        k = min(int((t - T0) / pace), onset if hang else steps)
        done = 4 + per_step * k
        if k < (onset if hang else steps):
            done += min(per_step, int(((t - T0) / pace - k) * (per_step + 1)))
        return k, done

    for k in range(onset if hang else steps):
        for r in range(ranks):
            end = T0 + (k + 1) * pace + rng.random() * 0.01 * pace
            events.append((end + 0.05, {"v": 1, "kind": "step", "job": "j", "rank": r, "node": f"n{r}", "step": k,
                                        "ts": round(end + off[r], 6), "step_time": pace}))
    last = T0 + steps * pace + (60.0 if hang else 0.0)
    for r in range(ranks):
        t = T0 + rng.random() * hb_every
        while t < last:
            k, done = count(t)
            started = done + 1 if hang and k >= onset and r != ranks - 1 else done
            events.append((t + 0.05, {"v": 1, "kind": "heartbeat", "job": "j", "rank": r, "node": f"n{r}",
                                      "ts": round(t + off[r], 6), "step": k - 1, "phase": "train",
                                      "seq_started": started, "seq_completed": done,
                                      "pgs": {"default": {"started": started, "completed": done}}}))
            t += hb_every
    events.sort(key=lambda x: x[0])
    rec = Recording("sync", tuple(Line(a, e) for a, e in events), onset=T0 + onset * pace + 0.02 * pace)
    return rec, onset - 1, 4 + per_step * onset


_PAUSE_CASES = random.Random(39).sample([
    (ranks, pace, per_step, hb, spread, hang, stale)
    for ranks in (2, 3, 8) for pace in (0.1, 0.34, 2.0) for per_step in (1, 3) for hb in (2.0, 5.0, 7.0)
    for spread in (0.0, 3.0) for hang in (False, True) for stale in (0.0, 2.0)], 40)


@pytest.mark.parametrize("ranks,pace,per_step,hb_every,spread,hang,stale", _PAUSE_CASES)
def test_pause_heartbeats_say_the_boundary_every_rank_ended(ranks, pace, per_step, hb_every, spread, hang, stale):
    """Invariant: through a marked checkpoint or eval every rank's heartbeat says the step the pause follows and the
    job's one count of collectives at that step's end, none in flight, whatever step and count its last heartbeat
    before said (each rank heartbeats at its own phase), its host clock, a heartbeat thread a few steps stale and a
    hang right after the pause; and after the pause the base's heartbeats resume unchanged, no count going back.
    (gen3:three_ranks / checkpoint 60s: copies of heartbeats from steps 39, 42 and 44 read as two ranks past the
    collective the third waited at, a false partial pause hang; counts carried on at a stale step's rate went
    past the ones after the pause, read as new processes: test_neighbours.py's stale heartbeats.)"""
    rec, step, want = _sync_job(ranks, pace, per_step, hb_every, spread, hang, seed=ranks * 7 + per_step)
    if stale:
        rec = t.heartbeat_stale_step(rec, stale)
    for phase, seconds in (("checkpoint", 60.0), ("eval", 30.0)):
        paused = t.pause_before_fault(rec, phase, seconds)
        inside = [e for e in paused.events("heartbeat") if e["phase"] == phase]
        assert {e["rank"] for e in inside} == set(range(ranks))
        said = {(e["step"], e["seq_started"], e["seq_completed"], e["pgs"]["default"]["started"],
                 e["pgs"]["default"]["completed"]) for e in inside}
        assert said == {(step, want, want, want, want)}, (phase, sorted(said)[:4])
        # (the base's heartbeats kept as they were, but for their times; each rank's counts never go back)
        fields = ("rank", "step", "seq_started", "seq_completed")
        assert Counter(tuple(e[f] for f in fields) for e in paused.events("heartbeat") if e["phase"] == "train") \
            == Counter(tuple(e[f] for f in fields) for e in rec.events("heartbeat"))
        for r in range(ranks):
            counts = [e["seq_completed"] for e in sorted(paused.events("heartbeat"), key=lambda e: e["ts"])
                      if e["rank"] == r]
            assert counts == sorted(counts)


def test_teardown_silences_the_waiting_ranks_only():
    rec = _hang()
    torn = t.teardown(rec, {"h": frozenset({3})}, 20.0)
    late_ranks = {e["rank"] for e in torn.events() if e["ts"] >= rec.onset + 20.0}
    assert late_ranks <= {3}


def test_world_size_grows_and_shrinks_around_the_culprit():
    rec = _straggler()
    big = t.world_size(rec, 32, {"s": frozenset({5})}, frozenset({"node-001"}))
    ranks = {e["rank"] for e in big.events("step")}
    assert ranks == set(range(32)) and {e["world_size"] for e in big.events("step")} == {32}
    assert all(e["node"] != "node-001~1" or e["rank"] not in (5,) for e in big.events("step"))
    small = t.world_size(rec, 2, {"s": frozenset({5})}, frozenset({"node-001"}))
    assert {e["rank"] for e in small.events("step")} == {0, 1} and small.rank_of("s", 5) == 1


@pytest.mark.parametrize("size", (4, 8, 64))
def test_world_size_grown_from_one_node_copies_only_healthy_ranks(size):
    """Invariant: growing copies healthy ranks only, also where every rank is on the fault's node (gen3's
    2-rank job on n00: its straggler was copied to 3 more ranks, a slow class the base never had)."""
    one_node = t.world_size(_straggler(), 2, {"s": frozenset({5})}, frozenset({"node-001"}))
    one_node = one_node.derive("one node", [Line(line.arrival, dict(line.event, node="node-001"))
                                            if "node" in line.event else line for line in one_node.lines])
    slow = one_node.rank_of("s", 5)
    big = t.world_size(one_node, size, {"s": frozenset({slow})}, frozenset({"node-001"}))
    compute = defaultdict(list)
    for e in big.events("step"):
        compute[e["rank"]].append(e.get("compute_time"))
    assert [r for r in compute if compute[r] == compute[slow]] == [slow]


def test_telemetry_added_and_removed():
    rec = _straggler()
    quiet = t.quiet_telemetry(rec, every=5.0)
    assert {e["kind"] for e in quiet.events()} >= {"gpu", "host"}
    assert t.without_telemetry(quiet).lines == rec.lines


def test_the_invariants_fail_a_wrong_verdict():
    alerts = [{"id": "a", "status": "firing", "type": "hang", "severity": "warning", "job": "h", "ranks": [3, 0],
               "nodes": ["node-003"], "starts_at": T0 + 30, "evidence": {"culprits": [{"rank": 3, "node": "node-003"}]}},
              {"id": "a", "status": "firing", "type": "hang", "severity": "critical", "job": "h", "ranks": [3, 0],
               "nodes": ["node-003"], "starts_at": T0 + 30, "evidence": {"culprits": [{"rank": 3, "node": "node-003"}]}}]
    rec = _hang()
    good = verdict(alerts)
    assert good.culprits == {3} and not good.critical_first and check(good, good, rec, rec) == {}
    torn = verdict([dict(alerts[1], id="b", evidence={"culprits": [{"rank": 0}]})])
    broken = check(good, torn, rec, rec)
    assert set(broken) == {"culprit", "warning_first"}
    assert "warning_first" not in check(torn, torn, rec, rec)  # the base's own failure is the base's
    late = Verdict(good.types, "hang", "h", good.culprits, good.node, None, T0 + 900)
    assert "delay" in check(good, late, rec, rec)
    assert set(check(good, verdict([]), rec, rec)) == {"types_kept", "culprit"}


@pytest.mark.parametrize("pace,ahead,after,late", [
    (pace, ahead, after, late) for pace in (0.02, 0.05, 0.1, 2.0, 10.0) for ahead in (-2.5, -1.0, 1.0, 2.5)
    for after in (3, 10) for late in (False, True)])
def test_the_delay_is_read_on_the_onsets_clock_whatever_host_stamped_the_alert(pace, ahead, after, late):
    """Invariant: a straggler named ``after`` steps after the onset in the base and, in a variant at another pace,
    at the same step or 4 later, is on time, whatever the offset from the broker's clock (the onset's) of the host
    whose step end stamped it: time_scale keeps host clock offsets at their wall-clock length, so the delay
    invariant takes the stamping host's offset out of both delays (gen3:gradual_slowdown and straggler_recovers at
    20 ms: alerts stamped on a host 0.7-2.5 s ahead, its offset scaled with the steps as if part of the delay;
    gen3:fast_flush_bursts at 2-120 s steps: stamped 2 s behind, its base delay read 0)."""
    rec, onset_step, _ = _sync_job(3, 0.34, 3, 5.0, 0.0, False, seed=11, tail=60)
    rec = rec.derive(None, [Line(line.arrival, dict(line.event, ts=line.event["ts"] + ahead))
                            if line.event.get("rank") == 0 else line for line in rec.lines])  # (rank 0's host)
    var = t.time_scale(rec, pace)

    def stamp(r: Recording, step: int) -> float:
        return next(e["ts"] for e in r.events("step") if e["rank"] == 0 and e["step"] == step)

    step = onset_step + after
    base = Verdict(frozenset({"straggler"}), "straggler", "j", frozenset({0}), first_at=stamp(rec, step))
    got = Verdict(frozenset({"straggler"}), "straggler", "j", frozenset({0}),
                  first_at=stamp(var, step + (4 if late else 0)))
    assert "delay" not in check(base, got, rec, var)
    assert "delay" not in check(base, base, rec, rec)
    if pace > 1.0:  # (and one named far later still breaks it; sped up, the base's lag keeps its length: seconds)
        slow = Verdict(frozenset({"straggler"}), "straggler", "j", frozenset({0}),
                       first_at=stamp(var, onset_step + 3 * after + 12))
        assert "delay" in check(base, slow, rec, var)


@pytest.mark.parametrize("ranks,pace,stall,chain", [
    (ranks, pace, stall, chain) for ranks in (2, 4, 8) for pace in (0.2, 0.5, 2.0) for stall in (20.0, 30.0)
    for chain in (1, 2, 3)])
def test_chained_producer_stalls_delay_the_alert_by_the_whole_steps_they_held(ranks, pace, stall, chain):
    """Invariant: where producers' stalls chain (half the ranks' producers stall ``stall`` s from just before the
    onset, the other half's before the first half's queue arrives, ``chain`` stalls in all), a straggler named as
    many steps after the first step whose events all came on time as the base named it after the onset is on time:
    the delay allows what the variant's delivery held (the steps after the onset the worker could judge whole), not
    one stall (gen2:straggler-2-ranks / late 1% by 30s: four stalls of its 2 ranks' producers, no whole step for
    32 s after the onset, named 2.4 s after its events came). A straggler named 40 steps later still breaks it."""
    rec, onset_step, _ = _sync_job(ranks, pace, 3, 5.0, 0.0, False, seed=5, tail=int(4 * stall / pace) + 60)
    halves = (frozenset(range(ranks // 2)), frozenset(range(ranks // 2, ranks)))
    starts = [rec.onset - 1.0 + i * 0.7 * stall for i in range(chain)]

    def held(line: Line) -> float:  # (a stalled producer's messages queue behind it: sent when it recovers)
        at = line.arrival
        for i, a in enumerate(starts):
            if line.event.get("rank") in halves[i % 2] and a <= at < a + stall:
                at = a + stall
        return at

    var = replace(rec.derive("stalls", sorted((Line(held(line), line.event) for line in rec.lines),
                                              key=lambda line: line.arrival), arrival=True), lateness=stall)

    def stamp(step: int) -> float:
        return next(e["ts"] for e in rec.events("step") if e["rank"] == 0 and e["step"] == step)

    after = 6
    named = onset_step + after
    base = Verdict(frozenset({"straggler"}), "straggler", "j", frozenset({0}), first_at=stamp(named))
    recovered = starts[-1] + stall  # (the first step all of whose events came on time, then as many as the base)
    first = next(e["step"] for e in rec.events("step") if e["ts"] >= recovered)
    got = Verdict(frozenset({"straggler"}), "straggler", "j", frozenset({0}), first_at=stamp(first + after))
    assert "delay" not in check(base, got, rec, var)
    slow = Verdict(frozenset({"straggler"}), "straggler", "j", frozenset({0}), first_at=stamp(first + after + 40))
    assert "delay" in check(base, slow, rec, var)


def test_stale_heartbeat_steps_go_back_never_forward():
    rec = _hang()
    stale = t.heartbeat_stale_step(rec, 2.0)
    pairs = [(new.event["step"], old.event["step"]) for new, old in zip(stale.lines, rec.lines)
             if new.event["kind"] == "heartbeat"]
    assert all(n <= o for n, o in pairs) and any(n < o for n, o in pairs)
    assert [line.arrival for line in stale.lines] == [line.arrival for line in rec.lines]


def _slow_death(step: float = 0.5, hb: float = 2.0, steps: int = 60) -> Recording:
    """4 ranks on 2 nodes: ``steps`` steps with a 20 s marked checkpoint half-way, heartbeats every ``hb`` s
    (``step``: the step completed) and host samples every 5 s; then rank 3 dies (its node's next sample, 1.5 s later,
    counts an OOM kill) and the others heartbeat without progress for 60 s (a hang)."""
    events, t = [], T0
    next_hb, next_host = T0, T0 + 0.7
    done = {r: -1 for r in range(4)}

    def until(end: float, alive) -> None:
        nonlocal next_hb, next_host
        while min(next_hb, next_host) <= end:
            if next_hb <= next_host:
                events.extend({"v": 1, "kind": "heartbeat", "job": "d", "rank": r, "node": f"n{r // 2}",
                               "step": done[r], "ts": round(next_hb, 6)} for r in range(4) if alive(r) and done[r] >= 0)
                next_hb += hb
            else:
                kills = 1 if not alive(3) else 0
                events.extend({"v": 1, "kind": "host", "node": f"n{k}", "ts": round(next_host, 6), "load1": 1.0,
                               "oom_kills": kills if k == 1 else 0} for k in range(2))
                next_host += 5.0

    for n in range(steps):
        if n == steps // 2:
            events.append({"v": 1, "kind": "phase", "job": "d", "phase": "checkpoint", "ts": round(t, 6)})
            until(t + 20.0, lambda r: True)
            t += 20.0
            events.append({"v": 1, "kind": "phase", "job": "d", "phase": "train", "ts": round(t, 6)})
        t += step
        until(t, lambda r: True)
        for r in range(4):
            done[r] = n
            events.append({"v": 1, "kind": "step", "job": "d", "rank": r, "node": f"n{r // 2}", "step": n,
                           "ts": round(t, 6), "step_time": step})
    death = next_host - 1.5  # rank 3's last heartbeat lies within hb before it
    until(death, lambda r: True)
    until(t + 60.0, lambda r: r != 3)
    events.sort(key=lambda e: e["ts"])
    return from_lines("d", [orjson.dumps(e) for e in events], onset=t)


@pytest.mark.parametrize("seconds", [30.0, 60.0, 120.0])
def test_time_scale_keeps_heartbeats_and_telemetry_on_their_timers(seconds):
    rec = _slow_death()
    slow = t.time_scale(rec, seconds)
    steps = {r: sorted((e["ts"], e["step"]) for e in slow.events("step") if e["rank"] == r) for r in range(4)}
    beats = {r: sorted((e["ts"], e["step"]) for e in slow.events("heartbeat") if e["rank"] == r) for r in range(4)}
    last_step = max(ts for series in steps.values() for ts, _ in series)
    for r in range(4):
        # A stepping rank heartbeats at its timer's period (not the pace's), never ahead of the step it reached.
        stepping = [ts for ts, _ in beats[r] if steps[r][0][0] <= ts <= (last_step if r != 3 else beats[3][-1][0])]
        assert max(b - a for a, b in zip(stepping, stepping[1:])) <= 1.5 * t.MAX_PERIOD["heartbeat"] + 1e-6
        for ts, step in beats[r]:
            reached = max((s for when, s in steps[r] if when <= ts + 1e-6), default=-1)
            assert step <= max(reached, 0), (r, ts, step, reached)
        assert [s for _, s in beats[r]] == sorted(s for _, s in beats[r])
    # The hung ranks heartbeat with no progress; the dead one stays silent after its last heartbeat.
    assert {s for ts, s in beats[0] if ts > last_step} == {steps[0][-1][1]}
    dead = beats[3][-1][0]
    assert dead < last_step + 60.0 * max(1.0, seconds / 0.5) and not any(
        e["ts"] > dead for e in slow.events() if e.get("rank") == 3)
    # The agent's sample that counts the kill follows the rank's death by its own seconds, as in the base.
    kill = min(e["ts"] for e in slow.events("host") if e.get("oom_kills"))
    base_dead = max(e["ts"] for e in rec.events("heartbeat") if e["rank"] == 3)
    base_kill = min(e["ts"] for e in rec.events("host") if e.get("oom_kills"))
    assert abs((kill - dead) - (base_kill - base_dead)) < 1e-3
    # A marked checkpoint keeps its wall-clock length.
    marks = [e["ts"] for e in slow.events("phase")]
    assert abs((marks[1] - marks[0]) - 20.0) < 1e-3


def _shifted(rec: Recording, hosts: float) -> Recording:
    """The recording with every host clock ``hosts`` seconds off the broker's (stamps moved, arrivals kept)."""
    lines = [Line(line.arrival, dict(line.event, ts=round(line.event["ts"] + hosts, 6)) if "ts" in line.event
                  else line.event) for line in rec.lines]
    return rec.derive("shifted", lines)


def _pairs(n: int = 8, seed: int = 43) -> list[tuple[float, float, float]]:
    """(pace s, host clocks' shift from the broker s, end marker's gap after the last step s)."""
    rng = random.Random(seed)
    return [(pace, round(rng.uniform(-3.0, 3.0), 3), round(rng.uniform(0.05, 20.0), 3))
            for pace in (0.02, 0.1, 2.0, 10.0, 60.0, 120.0, 60.0, 120.0)[:n]]


@pytest.mark.parametrize("pace, hosts, gap", _pairs())
def test_time_scale_keeps_start_up_and_the_end_whatever_the_hosts_clocks(pace, hosts, gap):
    """Invariant: host clocks off the broker's (seconds, either way) stretch nothing: what comes before the first
    step keeps its stamps, the first step is where it was, the steps after it are the pace apart, and a job's end
    marker that followed its last step within the warning floor follows it by as many seconds, whatever the pace
    (gen3:fast_15ms at 60 s steps: hosts 1.6 s ahead made a 100-minute first step, critical; its end marker, 0.5 s
    after the last step, came 30 minutes after it, dropped: a hang at the end)."""
    events = straggler_and_slowdown("s", t0=T0, steps=60)
    last = max(e["ts"] for e in events if e["kind"] == "step")
    for e in events:
        if e["kind"] == "phase" and e["phase"] == "end":
            e["ts"] = round(last + gap, 6)
    base = _shifted(from_lines("s", [orjson.dumps(e) for e in sorted(events, key=lambda e: e["ts"])],
                               onset=T0 + 12), hosts)
    scaled = t.time_scale(base, pace)
    first = {e["rank"]: e["ts"] for e in base.events("step") if e["step"] == 0}
    moved = [abs(e["ts"] - first[e["rank"]]) for e in scaled.events("step") if e["step"] == 0]
    assert min(moved) < 1e-5 and max(moved) < 0.01 * max(1.0, scaled.scale)  # (the ranks' own ms apart, scaled)
    before = [e["ts"] for e in base.events() if e["ts"] < min(first.values()) - 0.01]
    assert [e["ts"] for e in scaled.events() if e["ts"] < min(first.values()) - 0.01] == before

    def ends(rec: Recording) -> list[float]:
        return [statistics.median(e["ts"] for e in rec.events("step") if e["step"] == k) for k in range(60)]

    assert ends(scaled)[2] - ends(scaled)[1] == pytest.approx(scaled.scale * (ends(base)[2] - ends(base)[1]), rel=0.01)
    end = [e["ts"] for e in scaled.events("phase") if e["phase"] == "end"]
    scaled_last = max(e["ts"] for e in scaled.events("step"))
    assert len(end) == 1 and end[0] - scaled_last == pytest.approx(gap, abs=1e-3)


def _port_down_hang(clock: float, down: float, step: float = 0.5) -> Recording:
    """2 nodes of 2 ranks, 40 steps of ``step`` s (heartbeats every 2 s), then every rank heartbeats without progress
    for 120 s: n1's port goes down ``down`` s after the last step and a GPU of n1 logs an Xid 0.2 s after it;
    the node samples (every 2 s) and the Xid are stamped on a clock ``clock`` s off the ranks' (broker times:
    every event arrives 0.05 s after it happened)."""
    events: list[tuple[float, dict]] = []  # (true time, event)
    t, beat = T0, T0 + 0.3
    for n in range(40):
        t += step
        while beat <= t:
            events += [(beat, {"v": 1, "kind": "heartbeat", "job": "p", "rank": r, "node": f"n{r // 2}",
                               "step": n - 1, "ts": round(beat, 6)}) for r in range(4) if n > 0]
            beat += 2.0
        events += [(t, {"v": 1, "kind": "step", "job": "p", "rank": r, "node": f"n{r // 2}", "step": n,
                        "ts": round(t, 6), "step_time": step}) for r in range(4)]
    last = t
    while beat <= last + 120.0:
        events += [(beat, {"v": 1, "kind": "heartbeat", "job": "p", "rank": r, "node": f"n{r // 2}", "step": 39,
                           "ts": round(beat, 6)}) for r in range(4)]
        beat += 2.0
    sample = T0 + 0.9
    while sample <= last + 120.0:
        for k in range(2):
            bad = k == 1 and sample >= last + down
            events.append((sample, {"v": 1, "kind": "link", "node": f"n{k}", "ts": round(sample + clock, 6),
                                    "device": "mlx5_0", "port": 1, "state": "DOWN" if bad else "ACTIVE",
                                    "counters": {"symbol_error": 900 if bad else 0, "link_downed": int(bad)}}))
        sample += 2.0
    events.append((last + 0.2, {"v": 1, "kind": "xid", "node": "n1", "ts": round(last + 0.2 + clock, 6),
                                "gpu": 1, "xid": 79, "message": "GPU has fallen off the bus."}))
    events.sort(key=lambda p: p[0])
    return from_lines("p", [orjson.dumps(dict(e, _arrival=round(at + 0.05, 6))) for at, e in events], onset=last)


def _downs(pace: float) -> list[tuple[float, float, float]]:
    rng = random.Random(int(pace * 100) + 47)
    return [(pace, round(rng.choice((-1.0, 1.0)) * rng.uniform(1.5, 3.0), 3), round(rng.uniform(0.5, 20.0), 3))]


@pytest.mark.parametrize("pace, clock, down", [c for pace in (10.0, 30.0, 60.0, 120.0) for c in _downs(pace)])
def test_time_scale_keeps_node_samples_at_their_seconds_from_a_hang(pace, clock, down):
    """Invariant: at a slow pace a node's samples stay where they were from the job's last step, in seconds: a
    port that went down ``down`` s into the hang reads down within a sampling period after that, and an Xid
    0.2 s into it stays within a second of it, whatever the clock the agent stamps them on (seconds off the
    ranks', which time_scale reads from their arrival). gen3:link_down_hang at 60 s steps: its port down 1.3 s
    into the hang was 100 s in, past the hang's cause window; gen3:xid79_dead_rank: its Xid, stamped 2.5 s
    behind its node's ranks, was 200 s before the hang."""
    base = _port_down_hang(clock, down)
    slow = t.time_scale(base, pace)
    last = max(e["ts"] for e in slow.events("step"))
    first_down = min(e["ts"] for e in slow.events("link") if e["state"] == "DOWN") - clock
    period = max(e2["ts"] - e1["ts"] for e1, e2 in zip(*(
        [e for e in slow.events("link") if e["node"] == "n0"][i:] for i in (0, 1))))
    assert down - 1e-3 <= first_down - last <= down + period + 2.0 + 1e-3
    xid = next(slow.events("xid"))["ts"] - clock
    assert abs(xid - last - 0.2) < 1.0
def _relaunched(pace: float, back: int, down: float, *, spread: float = 0.0, steps: int = 60) -> Recording:
    """4 ranks on 2 nodes (node 1's clock ``spread`` s ahead) step every ``pace`` s; after step ``steps - 1`` all die
    and ``down`` s later new processes resume at step ``steps - 1 - back`` (the steps after it computed twice) for
    another ``steps`` steps; heartbeats every 2 s."""
    events, t = [], T0

    def run(first: int, count: int, t: float) -> float:
        beat = t
        for step in range(first, first + count):
            t += pace
            while beat < t:
                events.extend({"v": 1, "kind": "heartbeat", "job": "r", "rank": r, "node": f"n{r // 2}",
                               "step": step - 1, "ts": round(beat + spread * (r // 2), 6)} for r in range(4))
                beat += 2.0
            events.extend({"v": 1, "kind": "step", "job": "r", "rank": r, "node": f"n{r // 2}", "step": step,
                           "ts": round(t + spread * (r // 2), 6), "step_time": pace} for r in range(4))
        return t

    t = run(0, steps, t)
    run(steps - 1 - back, steps, t + down)
    events.sort(key=lambda e: e["ts"])
    return from_lines("r", [orjson.dumps(e) for e in events], onset=None)


@pytest.mark.parametrize("pace,back,down,spread", [(0.39, 20, 20.0, 0.0), (0.5, 50, 5.0, 3.0), (2.0, 5, 90.0, 0.0),
                                                   (0.1, 2, 30.0, 2.0), (10.0, 30, 20.0, 0.0)])
@pytest.mark.parametrize("seconds", [0.02, 0.1, 2.0, 10.0, 60.0, 120.0])
def test_time_scale_keeps_a_relaunchs_downtime(pace, back, down, spread, seconds):
    """Invariant: a restarted job's downtime keeps its wall-clock length at every pace (the launcher's and the
    checkpoint load's time, not the steps'): each rank's first step of the new run ends the downtime plus one step
    after its last of the old run. Its two runs compute the same steps: read one by one, they never mix (mixed,
    held_intervals took each repeated step's end as the median of both runs' and the downtime was scaled: at 20 ms
    steps gen2:restart-clean's 20 s relaunch became 1 s, at 120 s steps 100 minutes)."""
    rec = _relaunched(pace, back, down, spread=spread)
    scaled = t.time_scale(rec, seconds)
    assert abs(scaled.step_time() - seconds) < 1e-6
    for r in range(4):
        series = sorted((e["ts"], e["step"]) for e in scaled.events("step") if e["rank"] == r)
        i = next(k for k in range(1, len(series)) if series[k][1] < series[k - 1][1])
        gap = series[i][0] - series[i - 1][0]
        assert abs(gap - (down + seconds)) < 0.01 * down + 1e-3, (r, gap, down + seconds)


def _two_jobs(later: float, startup: float, hosts: float, lag: float = 0.05) -> Recording:
    """Job "a" (2 ranks, 0.5 s steps) from T0 for 100 steps; job "b" (2 ranks, 0.4 s steps, heartbeats every 5 s)
    begins ``later`` s into it and heartbeats ``startup`` s before its first step; every host ``hosts`` s off the
    broker's clock, every event arriving ``lag`` s after it happened."""
    events: list[dict] = []
    for n in range(100):
        events += [{"v": 1, "kind": "step", "job": "a", "rank": r, "node": "a0", "step": n,
                    "ts": round(T0 + 0.5 * (n + 1), 6), "step_time": 0.5} for r in range(2)]
    first = T0 + later + startup
    beat = T0 + later
    while beat < first:
        events += [{"v": 1, "kind": "heartbeat", "job": "b", "rank": r, "node": "b0", "step": -1, "phase": "train",
                    "ts": round(beat + 0.1 * r, 6)} for r in range(2)]
        beat += 5.0
    for n in range(60):
        events += [{"v": 1, "kind": "step", "job": "b", "rank": r, "node": "b0", "step": n,
                    "ts": round(first + 0.4 * n, 6), "step_time": 0.4} for r in range(2)]
    raw = [orjson.dumps(dict(e, ts=round(e["ts"] + hosts, 6), _arrival=round(e["ts"] + lag, 6)))
           for e in sorted(events, key=lambda e: e["ts"])]
    return from_lines("two", raw, onset=None)


def _later_jobs(seed: int = 47) -> list[tuple[float, float, float, float]]:
    """(pace s, when job b begins s, its start-up s, hosts' shift from the broker s)."""
    rng = random.Random(seed)
    return [(pace, round(rng.uniform(5.0, 40.0), 3), round(rng.uniform(6.0, 35.0), 3), round(rng.uniform(-3.0, 3.0), 3))
            for pace in (0.02, 0.1, 2.0, 10.0, 60.0, 120.0, 0.05, 30.0)]


@pytest.mark.parametrize("pace, later, startup, hosts", _later_jobs())
def test_time_scale_keeps_a_later_jobs_start_up(pace, later, startup, hosts):
    """Invariant: a job that begins after another's first step keeps its own start-up at its wall-clock length
    before its own first step, whatever the pace (a launcher's and the framework's seconds, not the other job's
    steps); its first step is where the scaled time puts it. gen3:start_and_end's jobB, heartbeating 30 s before
    its first step a minute into jobA's run, had that start-up scaled with jobA's steps: 53 minutes at 60 s steps,
    a critical first-step hang with no warning."""
    base = _two_jobs(later, startup, hosts)
    scaled = t.time_scale(base, pace)

    def start_up(rec: Recording) -> tuple[float, float]:
        first = min(e["ts"] for e in rec.events("step") if e["job"] == "b")
        beats = [e["ts"] for e in rec.events("heartbeat") if e["job"] == "b" and e["ts"] < first]
        return first, first - min(beats)

    first, length = start_up(scaled)
    assert length == pytest.approx(start_up(base)[1], abs=1e-3)
    # (job b's first step on the scaled time of job a's: its distance from a's first step's end scaled, the hosts'
    # offset kept)
    assert first - (T0 + 0.5 + hosts) == pytest.approx(scaled.scale * (later + startup - 0.5), rel=1e-3, abs=1e-3)


def _shared_nodes(later: float, clocks: dict[tuple[str, str], float]) -> Recording:
    """Jobs "a" and "b" (6 ranks each, two on each of nodes n0-n2, 0.4 s steps, 60 steps) on the same nodes, b
    beginning ``later`` s after a; each job's events stamped on clocks of its own (``clocks[(job, node)]``: s off
    true time; gen3 draws each job's), every event arriving 0.05 s after it happened."""
    events = []
    for job, start in (("a", T0), ("b", T0 + later)):
        for n in range(60):
            for r in range(6):
                node = f"n{r // 2}"
                true = start + 0.4 * (n + 1)
                events.append({"v": 1, "kind": "step", "job": job, "rank": r, "node": node, "step": n,
                               "ts": round(true + clocks[(job, node)], 6), "step_time": 0.4, "_arrival": true + 0.05})
    events.sort(key=lambda e: e["_arrival"])
    return from_lines("shared", [orjson.dumps(dict(e, _arrival=round(e["_arrival"], 6))) for e in events], onset=None)


def _shared_node_clocks(seed: int = 53) -> list[tuple[float, float, dict]]:
    """(pace s, when b begins s: during a's run or after it, each job's host clocks)."""
    rng = random.Random(seed)
    out = []
    for pace in (0.02, 0.1, 2.0, 10.0, 60.0, 120.0):
        for later in (rng.uniform(5.0, 20.0), rng.uniform(30.0, 200.0)):
            clocks = {(job, f"n{k}"): round(rng.uniform(-3.0, 3.0), 3) for job in "ab" for k in range(3)}
            out.append((pace, round(later, 3), clocks))
    return out


@pytest.mark.parametrize("pace, later, clocks", _shared_node_clocks())
def test_time_scale_keeps_each_jobs_clock_offsets_on_shared_nodes(pace, later, clocks):
    """Invariant: the ranks of one job end a step at once whatever the pace, so a step's stamps differ across its
    nodes by those nodes' clock offsets only, at wall-clock length, as in the base, also where two jobs ran on the
    same nodes with clocks of their own (gen3 draws each job's; NTP may step a host's clock between two jobs). One
    offset per node over both jobs was wrong by up to seconds for each, and time_scale scales that error with the
    steps: gen3:node_suspect_two_jobs at 120 s steps had jobB's step 0 spread 440 s over its nodes (a new hang),
    and at 20 ms steps n01's events 1.4 s late against n00's (jobA's straggler lost)."""
    base = _shared_nodes(later, clocks)
    scaled = t.time_scale(base, pace)

    def spreads(rec: Recording) -> dict[tuple, float]:
        by_step: dict[tuple, dict[str, float]] = defaultdict(dict)
        for e in rec.events("step"):
            by_step[(e["job"], e["step"])][e["node"]] = e["ts"]
        return {(key, node): ts - by_step[key]["n0"] for key, nodes in by_step.items() for node, ts in nodes.items()}

    want, got = spreads(base), spreads(scaled)
    assert got.keys() == want.keys()
    worst = max(abs(got[k] - want[k]) for k in want)
    assert worst < 0.01, worst


def _sim_hang(world: int, pace: float, kind: str, duration: float, *, hb: float = 5.0, seed: int = 0,
              steps: int = 16, at: int = 10) -> tuple[Recording, dict[str, frozenset[int]]]:
    """The simulator's job of ``world`` ranks at ``pace`` s steps whose rank ``world // 3`` stops before step
    ``at``'s first collective (``kind``: ``hang`` heartbeats on, ``frozen`` silent, ``dead`` exits) for ``duration``
    s, then resumes (a dead rank never does: the job is killed then); its onset and culprit by job."""
    from stepwatch.sim.simulator import ClusterSimulator, HangFault, SimulationSpec

    culprit = world // 3
    fault = HangFault(rank=culprit, step=at, kind=kind, duration=duration, recover=kind != "dead")
    spec = SimulationSpec(job="j", ranks=world, steps=steps, seed=seed, compute_time=0.8 * pace,
                          data_time=0.05 * pace, comm_time=0.15 * pace, warmup_steps=2, heartbeat_interval=hb,
                          hangs=(fault,), start_time=T0)
    lines = sorted((Line(float(e["ts"]), e) for _, batch in ClusterSimulator(spec).steps() for e in batch),
                   key=lambda line: line.arrival)
    onset = max(line.event["ts"] for line in lines if line.event.get("kind") == "step" and line.event["step"] == at - 1)
    return Recording(f"sim-{kind}-{world}", tuple(lines), onset=onset, arrival=False), {"j": frozenset({culprit})}


def _teardowns(n: int = 18, seed: int = 61) -> list[tuple[int, float, float, str, float]]:
    """(world, pace s, teardown s after the onset, the culprit's kind, s it stays stopped past the teardown)."""
    rng = random.Random(seed)
    kinds = ("frozen", "hang", "dead")
    return [(rng.choice((8, 16, 64, 256)), rng.choice((0.1, 0.5, 2.0, 10.0, 60.0)),
             rng.choice((60.0, 120.0, 300.0, 600.0)), kinds[i % 3], round(rng.uniform(20.0, 400.0), 1))
            for i in range(n)]


_PROGRESS = ("step", "seq_started", "seq_completed")


@pytest.mark.parametrize("world, pace, after, kind, more", _teardowns())
def test_teardown_keeps_the_culprit_stuck_and_the_job_unended(world, pace, after, kind, more):
    """Invariant: after the watchdog tore the waiting ranks down, nothing of the job goes past the hang: no waiting
    rank is heard from, the culprit reports no step or collective past what it had reported before the teardown
    (its peers are gone: a frozen rank that resumes, or a hung one that goes on, fails in its next collective or was
    SIGKILLed with the job), and no job-wide marker comes (a killed job sends no ``phase: end``); what came before
    the teardown is kept, and so is a stuck culprit's heartbeating while it stays stuck. (library:hang-frozen-64's
    culprit resumed 660 s in and completed its last 80 steps alone after a teardown at 120 s: the torn-down ranks
    then read as behind it and were named.)"""
    rec, hot = _sim_hang(world, pace, kind, after + more)
    cut = rec.onset + after
    torn = t.teardown(rec, hot, after)
    culprit = next(iter(hot["j"]))
    assert [line for line in torn.lines if line.arrival < cut] == [line for line in rec.lines if line.arrival < cut]
    later = [line.event for line in torn.lines if line.arrival >= cut]
    assert {e.get("rank") for e in later} <= {culprit}
    assert not [e for e in later if e.get("kind") == "phase"]
    reached = {k: max((e[k] for e in rec.events() if e.get("rank") == culprit and isinstance(e.get(k), int)
                       and e["ts"] < cut), default=-1) for k in _PROGRESS}
    assert all(e[k] <= reached[k] for e in later for k in _PROGRESS if isinstance(e.get(k), int))
    # The base's culprit does go on after it (this case tests something), and while stuck it is kept as it was.
    went_on = [e for e in rec.events() if e.get("rank") == culprit and e["ts"] >= cut
               and any(isinstance(e.get(k), int) and e[k] > reached[k] for k in _PROGRESS)]
    assert bool(went_on) == (kind != "dead")
    stuck = [e for e in rec.events() if e.get("rank") == culprit and cut <= e["ts"] < rec.onset + after + more]
    assert [e for e in later if e["ts"] < rec.onset + after + more] == stuck
    assert bool(stuck) == (kind == "hang")


def _start_up_on_skewed_nodes(later: float, startup: float, clocks: dict[tuple[str, str], float],
                              seed: int) -> Recording:
    """Jobs "a" and "b" (12 ranks each, two on each of nodes n0-n5, 0.4 s steps, 60 steps) on the same nodes, b's
    first step ``later`` s after a's, each job's events stamped on clocks of its own (``clocks[(job, node)]``: s off
    true time) with a host's jitter (up to 2 ms a stamp, drawn with ``seed``: the nodes' offsets are medians, not
    differences of two stamps); job b heartbeating on each of its nodes every 5 s for ``startup`` s before its
    first step; every event arriving 0.05 s after it happened."""
    rng = random.Random(seed)
    events = []
    for job, start in (("a", T0), ("b", T0 + later)):
        for n in range(60):
            for r in range(12):
                node = f"n{r // 2}"
                true = start + 0.4 * (n + 1)
                events.append({"v": 1, "kind": "step", "job": job, "rank": r, "node": node, "step": n, "step_time": 0.4,
                               "ts": round(true + clocks[(job, node)] + rng.uniform(0.0, 0.002), 6), "_arrival": true + 0.05})
    first = T0 + later + 0.4
    beat = first - startup
    while beat < first - 0.5:
        events += [{"v": 1, "kind": "heartbeat", "job": "b", "rank": r, "node": f"n{r // 2}", "step": -1,
                    "phase": "train", "ts": round(beat + clocks[("b", f"n{r // 2}")], 6), "_arrival": beat + 0.05}
                   for r in range(12)]
        beat += 5.0
    events.sort(key=lambda e: e["_arrival"])
    return from_lines("start-up", [orjson.dumps(dict(e, _arrival=round(e["_arrival"], 6))) for e in events],
                      onset=None)


def _start_up_clocks(seed: int = 59) -> list[tuple[float, float, float, dict, int]]:
    """(pace s, when b's first step comes s, its start-up s, each job's host clocks, the jitter's seed)."""
    rng = random.Random(seed)
    out = []
    for pace in (0.02, 0.1, 2.0, 10.0, 60.0, 120.0):
        for k in range(2):
            clocks = {(job, f"n{n}"): round(rng.uniform(-3.0, 3.0), 3) for job in "ab" for n in range(6)}
            out.append((pace, round(rng.uniform(5.0, 20.0), 3), round(rng.uniform(6.0, 30.0), 3), clocks, k))
    return out


@pytest.mark.parametrize("pace, later, startup, clocks, seed", _start_up_clocks())
def test_time_scale_keeps_a_later_jobs_start_up_on_each_nodes_clock(pace, later, startup, clocks, seed):
    """Invariant: whatever the pace and each node's clock offset, every event of a job before its own first step
    keeps its wall-clock distance before that step on its node's clock (its start-up), and time_scale returns.
    The start-up was moved as 'the first step, moved' minus its distance, the first step put back on the node's
    clock as start + offset - offset: where that rounds below start it was start-up again, and time_scale recursed
    until the stack ran out (library:multi-job-3, three jobs on shared nodes: a RecursionError at every pace)."""
    base = _start_up_on_skewed_nodes(later, startup, clocks, seed)
    scaled = t.time_scale(base, pace)

    def start_ups(rec: Recording) -> dict[int, float]:
        """Each rank of b: its earliest heartbeat's distance before its node's first step of b."""
        first = {}
        for e in rec.events("step"):
            if e["job"] == "b":
                first[e["node"]] = min(first.get(e["node"], e["ts"]), e["ts"])
        out: dict = {}
        for e in rec.events("heartbeat"):
            if e["job"] == "b" and e["ts"] < first[e["node"]]:
                out[e["rank"]] = max(out.get(e["rank"], 0.0), first[e["node"]] - e["ts"])
        return out

    want, got = start_ups(base), start_ups(scaled)
    assert got.keys() == want.keys() and want
    # (up to the first step's stamps' jitter, scaled with the steps as a step's time is)
    assert max(abs(got[k] - want[k]) for k in want) < 0.002 * max(1.0, scaled.scale) + 1e-3


def _checkpointed_job(ranks: int, pace: float, save: float, end_lag: float, seed: int) -> Recording:
    """A healthy job of ``ranks`` ranks at ``pace`` s steps, 120 steps, whose marked checkpoint after step 59 takes
    ``save`` s; its end marker (``train``) arrives ``end_lag`` s after it was sent, the other events 0.05-0.2 s;
    the recording's onset is step 60's start, right after the checkpoint (as the library's steady bases: the fault
    begins at the step after a checkpoint)."""
    rng = random.Random(seed)
    lines = [Line(T0, {"v": 1, "kind": "phase", "job": "ck", "ts": T0, "phase": "train"})]
    t = T0
    onset = None
    for step in range(120):
        t += pace
        for rank in range(ranks):
            ts = t + rng.uniform(0, 0.002 * pace)
            lines.append(Line(ts + rng.uniform(0.05, 0.2), {
                "v": 1, "kind": "step", "job": "ck", "rank": rank, "step": step, "ts": round(ts, 6),
                "step_time": pace, "compute_time": 0.8 * pace, "comm_time": 0.2 * pace, "node": f"n{rank // 4}",
                "world_size": ranks}))
        if step == 59:
            begin = t  # (sent by rank 0 as its step ended: before the other hosts' stamps of that step's end)
            lines.append(Line(begin + 0.05, {"v": 1, "kind": "phase", "job": "ck", "ts": round(begin, 6),
                                             "phase": "checkpoint", "step": 60}))
            t = begin + save
            lines.append(Line(t + end_lag, {"v": 1, "kind": "phase", "job": "ck", "ts": round(t, 6),
                                            "phase": "train", "step": 60}))
            onset = t - 0.5 * save  # (inside the base's pause: the boundary the variant looks for is step 59's end)
    lines.append(Line(t + 0.2, {"v": 1, "kind": "phase", "job": "ck", "ts": round(t + 0.1, 6), "phase": "end"}))
    lines.sort(key=lambda line: line.arrival)
    return Recording("ck", tuple(lines), onset=onset)


@pytest.mark.parametrize("ranks, pace, save, end_lag, phase, seconds, seed", [
    (ranks, pace, save, end_lag, phase, seconds, seed)
    for ranks, pace, save, end_lag, phase, seconds, seed in zip(
        [4, 8, 16, 64, 8, 4, 16, 8, 64, 4, 8, 16],
        [0.2, 1.0, 0.5, 1.5, 0.3, 2.0, 1.0, 0.5, 0.4, 1.0, 0.2, 1.5],
        [22.0, 10.0, 25.0, 20.0, 15.0, 28.0, 22.0, 12.0, 25.0, 18.0, 26.0, 20.0],
        [0.15, 0.15, 0.3, 0.15, 0.5, 0.15, 0.2, 0.4, 0.15, 0.3, 0.15, 0.2],
        ["warmup", "eval", "checkpoint", "warmup", "eval", "warmup", "checkpoint", "warmup", "eval", "warmup",
         "checkpoint", "eval"],
        [20.0, 30.0, 60.0, 20.0, 30.0, 20.0, 60.0, 20.0, 30.0, 20.0, 60.0, 30.0],
        range(12))])
def test_a_pause_where_the_base_is_already_paused_follows_the_base_pause(ranks, pace, save, end_lag, phase,
                                                                         seconds, seed):
    """Invariant: a pause variant placed where the base is in its own marked pause begins after the base's pause
    ends (its marker stamped and arriving after the base's end marker) and leaves the base's pause whole: no
    stretch reads as training without steps, and a healthy job gets no hang. (Inserted inside it, the variant's
    own ``train`` cut the base's checkpoint short: library:steady-5pct-noise4-64 / warmup 20s, a hang.)"""
    base = _checkpointed_job(ranks, pace, save, end_lag, seed)
    varied = t.pause_before_fault(base, phase, seconds)
    begin, end = (next(line for line in varied.lines if line.event.get("kind") == "phase"
                       and line.event.get("step") == 60 and line.event["phase"] == which)
                  for which in ("checkpoint", "train"))
    inserted = [line for line in varied.lines if line.event.get("kind") == "phase" and "step" not in line.event
                and T0 < line.event["ts"] and line.event["phase"] != "end"]
    assert [line.event["phase"] for line in inserted] == [phase, "train"]
    assert inserted[0].event["ts"] > end.event["ts"] and inserted[0].arrival > end.arrival
    assert end.event["ts"] - begin.event["ts"] == pytest.approx(save, abs=1e-5)
    alerts = [a for a in replay(varied) if a["status"] == "firing"]
    assert not [a for a in alerts if a["type"] == "hang"], [a["summary"] for a in alerts]
