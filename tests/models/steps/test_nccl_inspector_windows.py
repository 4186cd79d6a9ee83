"""NCCL Inspector windows that fit the job (issue 43 item 8).

The agent sizes each communicator's windows from its collective rate (powers of two up to the
cap); the worker judges the largest window any rank used. Through the real reader on Inspector
logs in NCCL's format (tests/nccl_fixtures.py) and the worker's engine: a job with one
all-reduce per step gets its straggler named within a few steps of the onset, one with hundreds
per step as before, with a bounded event rate; and the verdicts do not depend on which sizes
the agents chose, only on the largest.
"""

from __future__ import annotations

import random

import pytest
from nccl_fixtures import exec_times, write_job

from stepwatch.models.detection import DetectionEngine
from stepwatch.models.steps.inspector import InspectorJudge
from stepwatch.models.wire.events import parse_event
from stepwatch.models.wire.nccl_events import NcclWindowEvent
from stepwatch.producers.nccl_inspector import InspectorReader, InspectorSettings, window_bounds
from stepwatch.producers.proc_identity import ProcTable

SECOND = 1_000_000


def _agent(host: dict, node: str, window: str = "auto") -> list[dict]:
    low, cap = window_bounds(window)
    reader = InspectorReader(InspectorSettings(directory=str(host["dir"]), window_min=low, window_size=cap),
                             node=node, procs=ProcTable(host["proc"]))
    return reader.poll(final=True)


def _job(tmp_path, *, windows=("auto", "auto"), **job) -> list[dict]:
    hosts = write_job(tmp_path, job="4242", **job)
    events = [e for (node, host), window in zip(hosts.items(), windows) for e in _agent(host, node, window)]
    return sorted(events, key=lambda e: e["ts"])


def _named_at(events: list[dict]) -> tuple[list[tuple[int, ...]], int | None, DetectionEngine]:
    """Straggler alerts fired, and the coll_sn that ends the window that fired the first."""
    engine, fired, at = DetectionEngine(), [], None
    for e in events:
        for a in engine.process(parse_event(e)):
            if a.type == "straggler" and a.status == "firing":
                fired.append(a.ranks)
                if at is None:
                    at = engine.jobs["4242"].inspector.last_verdict.end
    return fired, at, engine


def test_one_all_reduce_per_step_is_judged_per_step(tmp_path):
    """300 steps of 1 s, one all-reduce each, a NCCL dump each second; rank 11 late from step 100."""
    events = _job(tmp_path, n_colls=300, late_rank=11, late_from=100, us_per_coll=SECOND, dump_every=1)
    fired, at, engine = _named_at(events)
    assert fired == [(11,)]
    assert 100 < at <= 100 + 10  # named within ~10 steps (collectives) of the onset
    judge = engine.jobs["4242"].inspector
    assert judge.counts["judged"] >= 250  # a window per step once the rate is known (the first ones: the cap)
    # Events: about one per rank and step (a second), never more.
    by_rank = {}
    for e in events:
        by_rank[e["rank"]] = by_rank.get(e["rank"], 0) + 1
    assert max(by_rank.values()) <= 300 and {e["window_size"] for e in events} <= {1, 2, 4, 8, 16, 32, 64}


def test_hundreds_of_collectives_per_step_keep_the_cap_and_its_event_bound(tmp_path):
    """128 all-reduces per 1 s step, 60 steps, rank 3 late from step 30: windows of 64 (the cap), named within a
    few steps, at most one event per 64 collectives per rank."""
    per_step = 128
    events = _job(tmp_path, n_colls=60 * per_step, late_rank=3, late_from=30 * per_step,
                  us_per_coll=SECOND // per_step, dump_every=per_step)
    fired, at, _ = _named_at(events)
    assert fired == [(3,)] and 30 * per_step < at <= 33 * per_step
    assert {e["window_size"] for e in events} == {64}
    assert len(events) == 16 * 60 * per_step // 64


@pytest.mark.parametrize("windows", [("16", "16"), ("16", "4"), ("4", "16"), ("16", "auto:8"), ("auto", "16"),
                                     ("16", "1")])
def test_the_verdict_depends_on_the_largest_size_only(tmp_path, windows):
    """Each node's agent chose its own size: the windows judged, the lateness and the alert are those of every rank
    at the largest size."""
    job = dict(n_colls=300, late_rank=11, late_from=100, us_per_coll=SECOND, dump_every=1)
    reference = _named_at(_job(tmp_path / "ref", windows=("16", "16"), **job))
    fired, at, engine = _named_at(_job(tmp_path / "mixed", windows=windows, **job))
    assert (fired, at) == reference[:2] and fired == [(11,)]
    # The job's last window may stay open: a rank with smaller windows never reports past its end.
    judged = reference[2].jobs["4242"].inspector.counts["judged"]
    assert judged - 1 <= engine.jobs["4242"].inspector.counts["judged"] <= judged


# -- the judge, on generated size schedules ----------------------------------------------------

def _windows(rank: int, times: list[list[int]], rng: random.Random, cap: int) -> list[NcclWindowEvent]:
    """One rank's events, its size changing at random as an agent may: powers of two up to ``cap``, growing only at
    a boundary of the larger size."""
    out, sn, n = [], 0, len(times)
    while sn < n:
        size = rng.choice([s for s in (1, 2, 4, 8, 16, 32, 64) if s <= cap and sn % s == 0])
        execs = [times[i][rank] for i in range(sn, min(sn + size, n))]
        out.append(NcclWindowEvent(job="j", rank=rank, ts=float(sn), comm="c", op="AllReduce", window=sn // size,
                                   window_size=size, count=len(execs), exec_sum=sum(execs) / 1e6,
                                   exec_median=sorted(execs)[len(execs) // 2] / 1e6, n_ranks=8, node=f"n{rank}"))
        sn += size
    return out


def _judge_all(streams: list[list[NcclWindowEvent]], rng: random.Random):
    """Interleave the ranks' streams (each in order, as Kafka keeps a key's), judge; verdicts and alerts."""
    judge, verdicts, alerts = InspectorJudge(job="j"), [], []
    cursors = [0] * len(streams)
    while any(c < len(s) for c, s in zip(cursors, streams)):
        r = rng.choice([i for i, s in enumerate(streams) if cursors[i] < len(s)])
        judged = judge.counts["judged"]
        alerts.extend((a.ranks, a.status, a.evidence["detected_step"]) for a in judge.update(streams[r][cursors[r]]))
        cursors[r] += 1
        if judge.counts["judged"] > judged:
            verdicts.append(judge.last_verdict)
    return verdicts, alerts


@pytest.mark.parametrize("seed", range(6))
def test_any_sizes_a_rank_switches_between_give_the_verdicts_of_the_largest(seed):
    rng = random.Random(seed)
    times = exec_times(8, 640, late_rank=seed % 8, late_us=2000, seed=seed, late_from=320)
    big = rng.randrange(8)  # one rank always at the cap: the largest size everywhere
    mixed = [_windows(r, times, rng, 16) if r != big else _at(times, r, 16) for r in range(8)]
    reference = [_at(times, r, 16) for r in range(8)]
    got, got_alerts = _judge_all(mixed, rng)
    want, want_alerts = _judge_all(reference, random.Random(seed))
    assert [(v.start, v.end, v.ranks) for v in got] == [(v.start, v.end, v.ranks) for v in want]
    for g, w in zip(got, want):
        assert g.lateness == pytest.approx(w.lateness, abs=1e-9)
    assert got_alerts == want_alerts and [a[0] for a in want_alerts if a[1] == "firing"] == [(seed % 8,)]


def _at(times: list[list[int]], rank: int, size: int) -> list[NcclWindowEvent]:
    out = []
    for start in range(0, len(times), size):
        execs = [times[i][rank] for i in range(start, min(start + size, len(times)))]
        out.append(NcclWindowEvent(job="j", rank=rank, ts=float(start), comm="c", op="AllReduce",
                                   window=start // size, window_size=size, count=len(execs),
                                   exec_sum=sum(execs) / 1e6, exec_median=sorted(execs)[len(execs) // 2] / 1e6,
                                   n_ranks=8, node=f"n{rank}"))
    return out


def test_a_rank_that_never_reports_bounds_what_the_judge_holds():
    judge = InspectorJudge(job="j", max_open=32)
    times = exec_times(8, 400, late_rank=None, late_us=0, seed=1)
    for r in range(7):  # rank 7 is silent
        for e in _at(times, r, 1):
            judge.update(e)
    assert judge.held() <= 7 * 32 and judge.counts["judged"] == 0
    assert judge.counts["incomplete"] >= 400 - 32


@pytest.mark.parametrize("value, bounds", [("auto", (1, 64)), ("AUTO:16", (1, 16)), ("auto:100", (1, 64)),
                                           ("64", (64, 64)), ("12", (12, 12))])
def test_the_window_setting(value, bounds):
    assert window_bounds(value) == bounds


@pytest.mark.parametrize("value", ["", "big", "0", "auto:0", "-3"])
def test_a_bad_window_setting_is_one_line(value):
    with pytest.raises(ValueError, match="NCCL Inspector window") as exc:
        window_bounds(value)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("seed", range(4))
def test_an_agent_changing_sizes_sends_aligned_disjoint_windows_holding_every_record(tmp_path, seed):
    """The job's pace changes (1 to 400 collectives a second, dumps every few to many): each rank's windows are powers
    of two up to the cap, aligned, never overlapping, every record in exactly one, and a healthy job is judged whole."""
    rng = random.Random(seed)
    at, t = [], 0
    for _ in range(rng.randint(2, 4)):  # segments of a pace
        gap = rng.choice([2 * SECOND, SECOND, SECOND // 10, SECOND // 400])
        for _ in range(rng.randint(20, 400)):
            at.append(t)
            t += gap
    hosts = write_job(tmp_path, job="4242", n_colls=len(at), late_rank=None, at_us=at,
                      dump_every=rng.choice([1, 7, 50]))
    events = sorted((e for node, host in hosts.items() for e in _agent(host, node)), key=lambda e: e["ts"])
    for rank in range(16):
        mine = [e for e in events if e["rank"] == rank]
        ranges = [(e["window"] * e["window_size"], (e["window"] + 1) * e["window_size"]) for e in mine]
        assert all(e["window_size"] in (1, 2, 4, 8, 16, 32, 64) for e in mine)
        assert all(a[1] <= b[0] for a, b in zip(ranges, ranges[1:]))  # in order, disjoint
        assert sum(e["count"] for e in mine) == len(at)
        assert len(mine) <= 2 * t / SECOND + len(at) / 64 + 8  # ~2 a second or one per 64 collectives
    _, _, engine = _named_at(events)
    judge = engine.jobs["4242"].inspector
    assert judge.counts["judged"] >= 1 and judge.counts["count_mismatch"] == judge.counts["incomplete"] == 0
