"""The second set of transformations (issue 39 item 8, the brief's noise list): benign noise in the steps,
relabelling, unrelated jobs beside the faulty one, a drifting culprit, a phase around the onset, a restart or
an elastic resize before the fault. Pure functions of a recording, like transforms.py's (whose helpers they
use); each docstring says what must not change.

Noise in the steps follows synchronous training: extra time ``e`` on rank ``r`` in step ``s`` makes every rank
end step ``s`` later by ``D = max(busy + e) - max(busy)`` (busy: compute + data time), the others waiting for it
(their ``comm_time`` grows by ``D - e``); every later event of the job happens ``D`` later, heartbeats go on at
their period through the longer step (a timer sends them), node telemetry (a node's own timer) does not move.
"""

from __future__ import annotations

import bisect
import random
import statistics
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace

from .recording import Line, Recording, is_telemetry
from .transforms import (_advanced, _merged, _moved, _periods, _seq_rates, _sorted, _stream, pause_before_fault,
                         world_size)

#: ``extra(job, rank, step, event) -> (field, seconds)``: the time added to one rank's step (None: none).
Extra = Callable[[str, int, int, dict], "tuple[str, float] | None"]


def _num(e: dict, f: str) -> float:
    v = e.get(f)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0


def _busy(e: dict) -> float:
    """A rank's own work in a step (what it did before it waited for the others)."""
    if "compute_time" in e or "data_time" in e:
        return _num(e, "compute_time") + _num(e, "data_time")
    return _num(e, "step_time") - _num(e, "comm_time")


def complete_steps(rec: Recording) -> dict[str, dict[int, dict[int, dict]]]:
    """Per job, the steps every rank of the job completed once (job -> step -> rank -> event); a job whose ranks
    repeat a step (a restart) is left out: its steps are two runs'."""
    seen: dict[str, dict[int, dict[int, dict]]] = defaultdict(lambda: defaultdict(dict))
    restarted: set[str] = set()
    for e in rec.events("step"):
        job, rank, step = e.get("job"), e.get("rank"), e.get("step")
        if not isinstance(job, str) or not isinstance(rank, int) or not isinstance(step, int):
            continue
        had = seen[job][step].get(rank)
        if had is not None and had.get("ts") != e.get("ts"):
            restarted.add(job)
        seen[job][step].setdefault(rank, e)
    out = {}
    for job, steps in seen.items():
        if job in restarted:
            continue
        ranks = set().union(*(set(by_rank) for by_rank in steps.values()))
        out[job] = {s: by_rank for s, by_rank in steps.items() if set(by_rank) == ranks}
    return out


def stretch(rec: Recording, what: str, extra: Extra) -> Recording:
    """Ranks' steps longer by ``extra`` (module docstring: the others wait, later events move, heartbeats go on).

    Invariant (of the callers): benign noise is not a fault; the verdict is the base's."""
    jobs = complete_steps(rec)
    added: dict[tuple[str, int, int], tuple[str, float]] = {}  # (job, rank, step) -> (field, seconds)
    longer: dict[str, dict[int, float]] = {}  # job -> step -> D
    for job in sorted(jobs):
        longer[job] = {}
        for step in sorted(jobs[job]):
            by_rank = jobs[job][step]
            before = max(_busy(e) for e in by_rank.values())
            for rank in sorted(by_rank):
                x = extra(job, rank, step, by_rank[rank])
                if x is not None and x[1]:
                    added[(job, rank, step)] = x
            # (an extra may be negative: the busiest rank's work shrinks, and the step with it)
            after = max(_busy(e) + added.get((job, r, step), ("", 0.0))[1] for r, e in by_rank.items())
            longer[job][step] = after - before
    cum: dict[str, tuple[list[int], list[float]]] = {}
    for job, d in longer.items():
        steps = sorted(d)
        total, acc = 0.0, []
        for s in steps:
            total += d[s]
            acc.append(total)
        cum[job] = (steps, acc)

    def through(job: str, step: int) -> float:
        """The time added to the job up to the end of ``step``."""
        steps, acc = cum.get(job, ([], []))
        i = bisect.bisect_right(steps, step) - 1
        return acc[i] if i >= 0 else 0.0

    # When each rank (its own clock) and the job (the median rank) ended each step: later events move with them.
    ends: dict[tuple, list[tuple[float, int]]] = defaultdict(list)
    job_ends: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for job, steps in jobs.items():
        for s, by_rank in steps.items():
            for r, e in by_rank.items():
                ends[(job, r)].append((e["ts"], s))
            job_ends[job].append((statistics.median(e["ts"] for e in by_rank.values()), s))
    for series in (*ends.values(), *job_ends.values()):
        series.sort()

    def shift_at(series: list[tuple[float, int]], job: str, ts: float) -> float:
        i = bisect.bisect_right(series, (ts, float("inf"))) - 1
        return through(job, series[i][1]) if i >= 0 else 0.0

    first_collective: set[tuple] = set()
    out: list[Line] = []
    shifts: list[float] = []
    for line in rec.lines:
        e = line.event
        job = e.get("job")
        if is_telemetry(e) or job not in jobs or "ts" not in e:
            out.append(line)
            shifts.append(0.0)
            continue
        rank, kind = e.get("rank"), e.get("kind")
        if kind == "step" and isinstance(e.get("step"), int):
            dt = through(job, e["step"])
            key = (job, rank, e["step"])
            ev = dict(e, ts=round(e["ts"] + dt, 6))
            d = longer[job].get(e["step"])
            if d is not None and jobs[job][e["step"]].get(rank) is e:
                f, x = added.get(key, (None, 0.0))
                if f is not None:
                    ev[f] = round(max(0.0, _num(e, f) + x), 6)
                if "comm_time" in e:
                    ev["comm_time"] = round(max(0.0, _num(e, "comm_time") + d - x), 6)
                ev["step_time"] = round(max(1e-6, _num(e, "step_time") + d), 6)
            out.append(Line(line.arrival + dt, ev))
            shifts.append(dt)
            continue
        if rank is None:
            dt = shift_at(job_ends[job], job, e["ts"])
            out.append(_moved(line, dt))
            shifts.append(dt)
            continue
        if kind == "collective" and isinstance(e.get("step"), int) and e["step"] in longer[job]:
            s = e["step"]
            dt = through(job, s)
            ev = dict(e, ts=round(e["ts"] + dt, 6))
            key = (job, rank, s)
            if key not in first_collective and isinstance(e.get("duration"), (int, float)):
                first_collective.add(key)
                x = added.get(key, (None, 0.0))[1]
                wait = longer[job][s] - x
                ev["duration"] = round(max(0.0, e["duration"] + wait), 6)
                if isinstance(e.get("start_ts"), (int, float)):
                    ev["start_ts"] = round(e["start_ts"] + dt - wait, 6)
            elif isinstance(e.get("start_ts"), (int, float)):
                ev["start_ts"] = round(e["start_ts"] + dt, 6)
            out.append(Line(line.arrival + dt, ev))
            shifts.append(dt)
            continue
        dt = shift_at(ends.get((job, rank), []), job, e["ts"])
        ev = dict(e, ts=round(e["ts"] + dt, 6))
        if isinstance(e.get("start_ts"), (int, float)):
            ev["start_ts"] = round(e["start_ts"] + dt, 6)
        out.append(Line(line.arrival + dt, ev))
        shifts.append(dt)
    beats = _beats_through(rec, out, shifts)
    # A capture is delivered in arrival order; a recording without arrivals in its own order (a line moved later
    # keeps its place: its job's later lines moved with it).
    out = _sorted([*out, *beats]) if rec.arrival else _merged(out, beats)
    onset = rec.onset
    if onset is not None and job_ends:
        main = max(job_ends, key=lambda j: len(job_ends[j]))
        onset = onset + shift_at(job_ends[main], main, onset)
    return rec.derive(what, out, onset=onset)


def _beats_through(rec: Recording, out: list[Line], shifts: list[float]) -> list[Line]:
    """Heartbeats a timer sends through the time a step got longer: the one before, at its period, brought up to
    the rank's last completed step (its sequence numbers advanced at the rank's usual collectives per step)."""
    periods = _periods(rec)
    done: dict[tuple, list[tuple[float, int]]] = defaultdict(list)
    for line in out:
        e = line.event
        if e.get("kind") == "step" and isinstance(e.get("step"), int):
            done[(e.get("job"), e.get("rank"))].append((e["ts"], e["step"]))
    for series in done.values():
        series.sort()
    rates = _seq_rates(rec)
    last: dict[tuple, tuple[Line, float]] = {}
    added = []
    for line, dt in zip(out, shifts):
        if line.event.get("kind") != "heartbeat":
            continue
        key = _stream(line.event)
        prev = last.get(key)
        last[key] = (line, dt)
        p = periods.get(key)
        if prev is None or not p or dt - prev[1] < 0.5 * p:
            continue
        hb = prev[0]
        if line.event["ts"] - hb.event["ts"] - (dt - prev[1]) > 1.5 * p:
            continue  # a silence of the base's own (a frozen rank): not the timer's to fill
        series = done.get((hb.event.get("job"), hb.event.get("rank")), [])
        t = hb.event["ts"] + p
        while t < line.event["ts"] - 0.5 * p and len(added) < 1_000_000:
            copy = _moved(hb, t - hb.event["ts"])
            i = bisect.bisect_right(series, (t, float("inf"))) - 1
            if i >= 0 and isinstance(hb.event.get("step"), int) and series[i][1] > hb.event["step"]:
                step = min(series[i][1], line.event.get("step", series[i][1]))
                copy = Line(copy.arrival, _advanced(copy.event, step, rates.get(key, {}), line.event))
            added.append(copy)
            t += p
    return added


# -- 1. benign noise -----------------------------------------------------------------------------------------


def _median_step(rec: Recording, job: str) -> float:
    times = [e["step_time"] for e in rec.events("step") if e.get("job") == job and isinstance(e.get("step_time"), (int, float))]
    return statistics.median(times) if times else 1.0


def hiccups(rec: Recording, rate: float, field: str = "compute_time", seed: int = 0) -> Recording:
    """Single-step hiccups on random ranks: a ``rate`` of (rank, step)s take 2-5x the job's step (a GC pause:
    ``compute_time``; a data-loader stall: ``data_time``).

    Invariant: the same verdict; a rare one-step hiccup on any rank is no straggler and no new culprit."""
    rng = random.Random(seed)
    step_of = {job: _median_step(rec, job) for job in complete_steps(rec)}

    def extra(job, rank, step, e):
        return (field, step_of[job] * rng.uniform(1.0, 4.0)) if rng.random() < rate else None

    return stretch(rec, f"hiccups({rate:g},{field})", extra)


def _step_times(steps: dict[str, dict[int, dict[int, dict]]]) -> dict[tuple[str, int], float]:
    """When each step of each job ended, job-wide (the median rank's stamp)."""
    return {(job, s): statistics.median(e["ts"] for e in by_rank.values())
            for job, by_step in steps.items() for s, by_rank in by_step.items()}


def _window(rec: Recording, job: str) -> tuple[float, float]:
    """Where noise before the fault goes: the job's steps before the onset (all of them if none)."""
    ts = sorted(e["ts"] for e in rec.events("step") if e.get("job") == job)
    end = rec.onset if rec.onset is not None and rec.onset > ts[0] else ts[-1]
    return ts[0], end


def job_slowdown(rec: Recording, factor: float, seconds: float = 60.0) -> Recording:
    """Every rank of every job ``factor`` slower (e.g. 0.3: 30%) for ``seconds``, a third of the way to the fault
    (a shared file system, the cluster's network busy): job-wide, no rank slower than the others.

    Invariant: the same verdict; a job-wide slowdown names no culprit (it may be a ``throughput_drop``: excused)."""
    steps = complete_steps(rec)
    spans = {job: _window(rec, job) for job in steps}
    when = _step_times(steps)

    def extra(job, rank, step, e):
        start, end = spans[job]
        begin = start + (end - start) / 3
        # (the step's job-wide time, not the rank's: hosts' clocks differ, the slowdown is the same step's)
        return ("compute_time", _busy(e) * factor) if begin <= when[(job, step)] < begin + seconds else None

    return stretch(rec, f"job_slowdown({factor:.0%},{seconds:g}s)", extra)


def moe_imbalance(rec: Recording, spread: float, seed: int = 0) -> Recording:
    """Every rank's compute jitters up to ``spread`` (0.3: 0-30% more) independently each step (MoE routing,
    variable sequence lengths): the job is slower, no rank more than the others over time.

    Invariant: the same verdict (a straggler stays named; no new culprit, the jitter's slowest rank changes every
    step)."""
    rng = random.Random(seed)
    return stretch(rec, f"moe_imbalance({spread:.0%})",
                   lambda job, rank, step, e: ("compute_time", _num(e, "compute_time") * rng.uniform(0.0, spread))
                   if "compute_time" in e else None)


def unmarked_eval(rec: Recording, seconds: float = 30.0) -> Recording:
    """An evaluation of ``seconds`` no ``phase`` event marks, half-way to the fault: one step of every rank
    ``seconds`` longer (its data time: the loop was elsewhere), heartbeats going on at the step before.

    Invariant: the same verdict; a one-off long step of the whole job is no straggler (a job-wide stop under the
    hang's warning floor is no hang either)."""
    steps = complete_steps(rec)
    at: dict[str, int] = {}
    for job, by_step in steps.items():
        start, end = _window(rec, job)
        mid = start + (end - start) / 2
        later = [s for s, by_rank in by_step.items() if min(e["ts"] for e in by_rank.values()) >= mid]
        if later:
            at[job] = min(later)
    return stretch(rec, f"unmarked_eval({seconds:g}s)",
                   lambda job, rank, step, e: ("data_time", seconds) if at.get(job) == step else None)


# -- 2. relabelling ------------------------------------------------------------------------------------------


def relabel(rec: Recording, seed: int = 0) -> Recording:
    """Ranks permuted (whole nodes moved among the job's rank blocks, ranks shuffled within a node), nodes and jobs
    renamed, consistently in every event (process groups' rank lists, config keys, telemetry).

    Invariant: the verdict maps through the renaming (``Recording.ranks``/``nodes``)."""
    rng = random.Random(seed)
    by_node: dict[str, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
    ranks_of: dict[str, set[int]] = defaultdict(set)
    for e in rec.events():
        job, rank = e.get("job"), e.get("rank")
        if isinstance(job, str) and isinstance(rank, int):
            ranks_of[job].add(rank)
            if e.get("kind") == "step" and isinstance(e.get("node"), str):
                by_node[job][e["node"]].add(rank)
    perm: dict[str, dict[int, int]] = {}
    for job, ranks in ranks_of.items():
        blocks = [sorted(rs) for _, rs in sorted(by_node[job].items(), key=lambda kv: min(kv[1]))]
        placed = {r for b in blocks for r in b}
        blocks += [[r] for r in sorted(ranks - placed)]
        rng.shuffle(blocks)
        order = []
        for b in blocks:
            b = list(b)
            rng.shuffle(b)
            order += b
        perm[job] = dict(zip(order, sorted(ranks)))
    nodes = sorted({e["node"] for e in rec.events() if isinstance(e.get("node"), str)})
    names = [f"host-{i:03d}" for i in range(len(nodes))]
    rng.shuffle(names)
    node_map = dict(zip(nodes, names))
    job_map = {job: f"relabelled-{i}" for i, job in enumerate(sorted({e["job"] for e in rec.events()
                                                                     if isinstance(e.get("job"), str)}))}

    def pgs(job, value):
        return {name: (dict(v, ranks=[perm[job].get(x, x) for x in v["ranks"]])
                       if isinstance(v, dict) and isinstance(v.get("ranks"), list) else v)
                for name, v in value.items()}

    out = []
    for line in rec.lines:
        e = line.event
        ev = dict(e)
        job = e.get("job")
        if isinstance(job, str):
            ev["job"] = job_map[job]
            if isinstance(e.get("rank"), int):
                ev["rank"] = perm[job].get(e["rank"], e["rank"])
            if isinstance(e.get("pgs"), dict):
                ev["pgs"] = pgs(job, e["pgs"])
        if isinstance(e.get("node"), str):
            ev["node"] = node_map[e["node"]]
        if e.get("kind") == "config" and e.get("_key") in job_map:
            ev["_key"] = job_map[e["_key"]]
        out.append(Line(line.arrival, ev))
    ranks = {(job, r): n for job, p in perm.items() for r, n in p.items()}
    return rec.derive(f"relabel({seed})", out, ranks=ranks, nodes=node_map)


# -- 3. unrelated jobs beside the fault ----------------------------------------------------------------------


def bystanders(rec: Recording, healthy: Recording, count: int = 1) -> Recording:
    """``count`` unrelated healthy jobs (copies of the ``healthy`` recording, each renamed with nodes of its own,
    started a few seconds apart from the base's first event) interleaved with the base's events.

    Invariant: the base's verdict; the added jobs get no alert (``Recording.quiet_jobs``)."""
    start = rec.lines[0].arrival
    h0 = healthy.lines[0].arrival
    added: list[Line] = []
    quiet = []
    for i in range(count):
        dt = start - h0 + 7.0 * i
        names: dict[str, str] = {}
        for line in healthy.lines:
            e = line.event
            if e.get("kind") == "config":
                continue
            ev = dict(e)
            if isinstance(e.get("job"), str):
                ev["job"] = f"bystander-{i}-{e['job']}"
                quiet.append(ev["job"])
            if isinstance(e.get("node"), str):
                ev["node"] = names.setdefault(e["node"], f"by{i}-{e['node']}")
            if "ts" in ev:
                ev["ts"] = round(ev["ts"] + dt, 6)
            if isinstance(ev.get("start_ts"), (int, float)):
                ev["start_ts"] = round(ev["start_ts"] + dt, 6)
            added.append(Line(line.arrival + dt, ev))
    return rec.derive(f"bystanders({count})", _merged(rec.lines, added), quiet_jobs=frozenset(quiet))


# -- 4. a drifting culprit; a phase around the onset -----------------------------------------------------------


def drift(rec: Recording, culprits: dict[str, frozenset[int]], share: float) -> Recording:
    """The culprits' slowdown comes as a ramp (a GPU heating up) instead of a step change: their extra work over
    the step's median rank grows linearly from the onset to its full size ``share`` of the way from the onset to
    the last step (then as in the base). The variant's onset is where the ramp is complete.

    Invariant: the same verdict (the straggler found, on the same rank and node), within the base's delay after
    the ramp is complete."""
    if rec.onset is None or not culprits:
        return rec.derive(f"drift({share:.0%})", rec.lines)
    steps = complete_steps(rec)
    when = _step_times(steps)
    last = max(e["ts"] for e in rec.events("step"))
    ramp = max(1e-6, share * (last - rec.onset))

    def extra(job, rank, step, e):
        if rank not in culprits.get(job, ()) or when[(job, step)] < rec.onset:
            return None
        others = [_busy(x) for r, x in steps[job][step].items() if r not in culprits[job]]
        excess = _busy(e) - statistics.median(others) if others else 0.0
        done = min(1.0, (when[(job, step)] - rec.onset) / ramp)
        field = "compute_time" if "compute_time" in e else "data_time"
        return (field, -excess * (1.0 - done)) if excess > 0 and done < 1.0 else None

    out = stretch(rec, f"drift({share:.0%})", extra)
    # The onset: where the ramp ended, moved as the steps before it were (stretch moved rec.onset the same way).
    return replace(out, onset=out.onset + ramp)


def phase_around_onset(rec: Recording, phase: str, steps: int) -> Recording:
    """A marked ``phase`` (``checkpoint`` saved asynchronously, ``eval`` interleaved) from ``steps`` steps before the
    onset to ``steps`` after it: job-wide phase events only, training goes on, the fault begins inside it.

    Invariant: the same verdict; a fault that begins in a marked phase is still found once the phase ends."""
    if rec.onset is None:
        return rec.derive(f"{phase}_around_onset({steps})", rec.lines)
    dt = rec.step_time() * steps
    jobs = sorted({e["job"] for e in rec.events("step") if isinstance(e.get("job"), str)})
    marks = []
    for job in jobs:
        marks.append(Line(rec.onset - dt, {"v": 1, "kind": "phase", "job": job, "ts": round(rec.onset - dt, 6),
                                           "phase": phase}))
        marks.append(Line(rec.onset + dt, {"v": 1, "kind": "phase", "job": job, "ts": round(rec.onset + dt, 6),
                                           "phase": "train"}))
    return rec.derive(f"{phase}_around_onset({steps})", _merged(rec.lines, marks), onset=rec.onset + dt)


def pause_after_onset(rec: Recording, phase: str, seconds: float, steps: int) -> Recording:
    """A marked pause of ``seconds`` ``steps`` steps after the fault began (the straggler was slow already when the
    checkpoint came). The onset counts the pause out.

    Invariant: the same verdict; a pause does not reset what was seen of the fault before it."""
    if rec.onset is None:
        return rec.derive(f"{phase}_after_onset({seconds:g}s,{steps})", rec.lines)
    at = replace(rec, onset=rec.onset + rec.step_time() * steps)
    out = pause_before_fault(at, phase, seconds, timer_in_pause=False)
    return replace(out, onset=rec.onset + seconds, applied=rec.applied + (f"{phase}_after_onset({seconds:g}s,{steps})",))


# -- 5. the world changes before the fault ---------------------------------------------------------------------


def _prefix(rec: Recording, share: float) -> tuple[list[Line], float]:
    """The job events of the first ``share`` of the time before the onset (a run before the base's), and its end."""
    start = min(line.arrival for line in rec.lines if line.event.get("kind") == "step")
    goal = rec.onset if rec.onset is not None else max(line.arrival for line in rec.lines)
    cut = start + share * (goal - start)
    return [line for line in rec.lines if line.arrival < cut and not is_telemetry(line.event)
            and line.event.get("kind") not in ("config",) and not (line.event.get("kind") == "phase"
                                                                   and line.event.get("phase") == "end")], cut


def _run(lines: list[Line], incarnation: int) -> list[Line]:
    """A run's rank events with the process start a producer of today tells (``incarnation``, ms): a relaunch
    whose first run was short is known as one, not inferred from its steps going back (docs/hang.md)."""
    return [Line(line.arrival, dict(line.event, incarnation=incarnation))
            if line.event.get("kind") in ("step", "heartbeat") and "rank" in line.event else line for line in lines]


def _later(line: Line, dt: float) -> Line:
    e = line.event
    if "ts" not in e:
        return Line(line.arrival + dt, e)
    ev = dict(e, ts=round(e["ts"] + dt, 6))
    if isinstance(e.get("start_ts"), (int, float)):
        ev["start_ts"] = round(e["start_ts"] + dt, 6)
    return Line(line.arrival + dt, ev)


def restart_on_spares(rec: Recording, share: float = 0.5, gap: float = 20.0) -> Recording:
    """The job first ran on other (spare) nodes for ``share`` of its time before the fault, died (its events stop),
    and was relaunched ``gap`` seconds later as the base (steps from 0 again: from scratch or an early checkpoint).

    Invariant: the base's verdict, on the base's ranks and nodes (the spares of the first run are never blamed);
    the restart itself may be reported (``job_restart``: excused)."""
    first, cut = _prefix(rec, share)
    spare = {}
    run1 = []
    for line in first:
        e = line.event
        ev = dict(e, node=spare.setdefault(e["node"], f"spare-{len(spare):02d}")) if isinstance(e.get("node"), str) else e
        run1.append(Line(line.arrival, ev))
    dt = cut - rec.lines[0].arrival + gap
    run2 = [_later(line, dt) for line in rec.lines]
    onset = rec.onset + dt if rec.onset is not None else None
    t0 = int(rec.lines[0].arrival * 1000)
    return rec.derive(f"restart_on_spares({share:.0%},{gap:g}s)",
                      [*_run(run1, t0), *_run(run2, t0 + int(dt * 1000))], onset=onset)


def resize_before(rec: Recording, share: float = 0.5, gap: float = 20.0) -> Recording:
    """An elastic job that first ran at half its world (its first ranks, on their nodes) for ``share`` of its time
    before the fault, then was resized (relaunched, ``gap`` seconds) to the base's world.

    Invariant: the base's verdict on the base's ranks and nodes (the restart may be reported: ``job_restart``)."""
    first, cut = _prefix(rec, share)
    worlds: dict[str, int] = {}
    for e in rec.events("step"):
        worlds[e["job"]] = max(worlds.get(e["job"], 0), e["rank"] + 1)
    half = max(1, min(worlds.values(), default=2) // 2)
    small = world_size(rec.derive(None, first), half, {}, frozenset())
    dt = cut - rec.lines[0].arrival + gap
    run2 = [_later(line, dt) for line in rec.lines]
    onset = rec.onset + dt if rec.onset is not None else None
    t0 = int(rec.lines[0].arrival * 1000)
    return rec.derive(f"resize_before({share:.0%},{gap:g}s)",
                      [*_run(list(small.lines), t0), *_run(run2, t0 + int(dt * 1000))], onset=onset)
