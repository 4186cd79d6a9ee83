"""The transformations: each a small pure function of a recording (``Recording`` -> ``Recording``) that
changes the situation the fault happens in and not the fault. Each docstring says the invariant it must
preserve; invariants.py checks them and ``EXCUSED`` (grid.py) lists what a transformation may change.

They act on wire events with arrival times, so they apply to any generator's output; random choices
come from ``random.Random(seed)`` (deterministic). A transformation never changes an event in place.
"""

from __future__ import annotations

import bisect
import heapq
import random
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import replace

from .recording import Line, Recording, is_telemetry

#: Event fields that are durations (seconds): scaled with time.
DURATION_FIELDS = ("step_time", "compute_time", "comm_time", "data_time", "optimizer_time", "duration",
                   "wait_time", "forward_time", "backward_time", "io_time")
#: Periodic streams: one kind of event a source sends on a timer, re-cadenced when time is scaled.
PERIODIC = ("heartbeat", "gpu", "host", "link")
#: When time slows down, a periodic stream's period stretches with it only up to this (an agent or heartbeat
#: thread keeps its wall-clock timer: its period does not follow the step time), seconds.
MAX_PERIOD = {"heartbeat": 10.0, "gpu": 30.0, "host": 30.0, "link": 30.0}
#: A slowed recording keeps at most this many seconds after its last step event (a hang's tail, scaled, would be
#: hours of heartbeats: every verdict is given within the hang timeout, docs/hang.md).
MAX_TAIL_S = 1800.0


def _source(event: dict) -> tuple:
    """Who sends an event (its producer: delivery order is kept per producer, as Kafka keeps a key's order)."""
    if is_telemetry(event):
        return ("node", event.get("node"))
    return ("rank", event.get("job"), event.get("rank"))


def _stream(event: dict) -> tuple:
    """One periodic series: a rank's heartbeats, a GPU's samples, a node's host samples, a port's link samples."""
    kind = event.get("kind")
    if kind == "heartbeat":
        return (kind, event.get("job"), event.get("rank"))
    return (kind, event.get("node"), event.get("gpu"), event.get("device"), event.get("port"))


def _sorted(lines: Iterable[Line]) -> list[Line]:
    return sorted(lines, key=lambda line: line.arrival)  # stable: ties keep their order


def _merged(lines: Iterable[Line], added: Iterable[Line]) -> list[Line]:
    """``added`` (sorted here) merged by arrival among ``lines``, whose own order is kept (a recording without
    arrival times is replayed in its order)."""
    return list(heapq.merge(lines, _sorted(added), key=lambda line: line.arrival))


def _moved(line: Line, dt: float, *, ts: bool = True) -> Line:
    event = dict(line.event, ts=line.event["ts"] + dt) if ts and "ts" in line.event else line.event
    return Line(line.arrival + dt, event)


def node_offsets(rec: Recording) -> dict:
    """Each node's clock offset from the earliest (seconds), from the step ends it shares with the others: in
    synchronous training every rank ends a step at once, what differs is the clocks. Keyed by node (over every
    job: for events that name no job, a node sample) and by (job, node): a recording may carry two jobs on the same
    nodes with clocks of their own (gen3 draws each job's; NTP may step a clock between two jobs), and an offset
    wrong by a second is scaled with the steps by time_scale (gen3:node_suspect_two_jobs at 120 s steps: jobB's
    ranks' step 0 spread 440 s across its nodes, a new hang)."""
    ends: dict[tuple, dict[str, float]] = defaultdict(dict)
    for e in rec.events("step"):
        node = e.get("node")
        if isinstance(node, str):
            key = (e.get("job"), e.get("step"))
            ends[key][node] = min(ends[key].get(node, e["ts"]), e["ts"])
    diffs: dict = defaultdict(list)
    for (job, _), by_node in ends.items():
        if len(by_node) > 1:
            low = min(by_node.values())
            for node, ts in by_node.items():
                diffs[node].append(ts - low)
                diffs[(job, node)].append(ts - low)
    return {key: statistics.median(d) for key, d in diffs.items()}


def _offset(offsets: dict, node, job=None) -> float:
    """``node``'s clock offset (``node_offsets``) as ``job``'s events read it, else over every job's."""
    return offsets.get((job, node), offsets.get(node, 0.0))


# -- time scale ---------------------------------------------------------------------------------------------


def time_scale(rec: Recording, step_seconds: float) -> Recording:
    """Every step takes ``step_seconds`` (the recording's median step time is scaled to it), and so does every
    duration and gap of the job from its first step to its last; delivery lags, clock offsets, what comes before
    a job's first step (start-up, a job that starts later's too) and, when time speeds up, what follows the last step (a hang's tail) keep their
    wall-clock length, and so do a marked checkpoint, a stop between two steps and a restarted job's downtime
    (``held_intervals``: writing a checkpoint takes the storage's time, a stall or a hang the job recovered from the
    fault's, a relaunch the launcher's, not the step's).

    The first and last step are found on the clock of what is moved (hosts' stamps, or the broker's arrivals: a
    host clock ahead of the broker does not stretch start-up); a job's end marker within ``END_KEPT_S`` of its
    last step keeps its distance, and so does, when time slows down, every node sample after the last step (the
    tail stretches the job's timers, not the node agent's or the fault's seconds).

    Heartbeats and node telemetry keep a wall-clock cadence, as a monitor's timer and the node agent do whatever
    the step time (their base period, up to ``MAX_PERIOD`` when time slows down). A rank heartbeating through a
    longer step sends its timer's heartbeats with the step it reached (``_timer_beats``); a rank silent in the
    base stays silent; a hung rank heartbeats with no progress, as in the base. A node's sample that followed a
    rank going silent (its death: an OOM kill) follows it by its own wall-clock distance, as the agent would
    notice it at its next sample (``_silences``).

    Invariant: the same verdict (types, culprit, node, cause); the first alert's delay after the onset scales
    with the step time; a hang still warns before it is critical."""
    s = step_seconds / rec.step_time()
    offsets = node_offsets(rec)
    # Time is scaled from the first step on: what comes before it (start-up, compilation) keeps its length. The
    # first and last step are taken on the clock a time is read on: the hosts' (their stamps, each node's offset
    # from the earliest taken out) or the broker's (an arrival, the onset). Hosts a second or two ahead of the
    # broker put every stamp that far past an arrival-clock first step: gen3:fast_15ms's, 1.6 s, scaled 3,800x at
    # 60 s steps, made a first step of 100 minutes, critical at the first-step timeout.
    stamps = [e["ts"] - _offset(offsets, e.get("node"), e.get("job")) for e in rec.events("step")
              if isinstance(e.get("ts"), (int, float))]
    arrivals = [line.arrival for line in rec.lines if line.event.get("kind") == "step"]
    t0_broker = min(arrivals, default=rec.lines[0].arrival)
    t0_host = min(stamps, default=t0_broker)
    # A job that starts later has its own start-up, kept as long before its own first step (gen3:start_and_end's
    # jobB heartbeats 30 s before its first step, a minute into jobA's run: scaled with jobA's steps at 60 s steps,
    # 53 minutes of start-up, critical at the 1200 s first-step timeout).
    first_host: dict = {}
    first_broker: dict = {}
    for line in rec.lines:
        e = line.event
        if e.get("kind") == "step" and isinstance(e.get("ts"), (int, float)):
            job = e.get("job")
            first_host[job] = min(first_host.get(job, e["ts"]), e["ts"] - _offset(offsets, e.get("node"), job))
            first_broker[job] = min(first_broker.get(job, line.arrival), line.arrival)

    # After the last step nothing is step-paced (a hang's tail, the capture's end): it keeps its wall-clock length
    # when time speeds up (a hang lasts as long at 20 ms steps) and stretches with it when time slows down.
    last_broker = max(arrivals, default=float("inf"))
    last_host = max(stamps, default=last_broker)
    tail = max(1.0, s)
    # A marked checkpoint or a stop keeps its wall-clock length: the storage's or the fault's time, not the step's.
    held = held_intervals(rec, offsets)
    # (held_intervals is on the hosts' clock; on the broker's, moved by how far the first step's stamp and arrival lie)
    held_broker = [(a - t0_host + t0_broker, b - t0_host + t0_broker) for a, b in held]

    def warp(ts: float, node, *, broker: bool = False, job=None) -> float:
        """A time stamped on ``node``'s clock (``broker``: the broker's, an arrival), moved (on the same clock: its
        offset is kept, as is every delivery lag, by the caller): unchanged before the first step, scaled from
        there to the last but for checkpoints, the tail after; an event of ``job`` before that job's own first
        step keeps its distance before it (its start-up)."""
        off = 0.0 if broker else _offset(offsets, node, job)
        t0, last, kept_at = (t0_broker, last_broker, held_broker) if broker else (t0_host, last_host, held)
        x = ts - off
        start = (first_broker if broker else first_host).get(job) if job is not None else None
        if start is not None and t0 < start and x < start:
            # (the job's first step moved, from x = start itself: start + off - off may round below start, and a
            # warp of that recursed until the stack ran out, library:multi-job-3 at every pace)
            return moved(start, t0, last, kept_at) + off - (start - x)
        if x < t0:
            return ts
        return moved(x, t0, last, kept_at) + off

    def moved(x: float, t0: float, last: float, kept_at) -> float:
        """``warp`` of a time ``x`` at or after the first step ``t0``, on the clock it was read on (offset taken out)."""
        y = min(x, last)
        kept = sum(max(0.0, min(b, y) - max(a, t0)) for a, b in kept_at if a < y)
        return t0 + s * (y - t0) - (s - 1.0) * kept + tail * max(0.0, x - last)

    periods = _periods(rec)
    silences = _silences(rec, periods) if s > 1 else {}
    aligned = telemetry_clocks(rec)
    prev_sample: dict[tuple, float] = {}
    clock_of = _clock_nodes(rec)
    lines = []
    beats: list[tuple[int, float]] = []  # (index in lines, base ts) of each heartbeat
    for line in rec.lines:
        e = line.event
        if "ts" not in e:
            lines.append(Line(warp(line.arrival, None, broker=True, job=e.get("job")), e))
            continue
        node = e.get("node") if "node" in e else clock_of.get((e.get("job"), e.get("rank", 0)))
        shift = aligned.get((node, e.get("kind")), 0.0)
        own = e["ts"] - shift  # (a node sample on its node's ranks' clock)
        ts = warp(own, node, job=e.get("job")) + shift
        over = own - _offset(offsets, node, e.get("job")) - last_host
        if over > 0.0 and ((s > 1 and is_telemetry(e)) or (
                e.get("kind") == "phase" and e.get("phase") == "end" and over <= END_KEPT_S)):
            # After the last step, a node's samples keep their wall-clock distance from it (the agent's timer and
            # the fault's own time: a port down 1.3 s into gen3:link_down_hang's hang was 100 s in at 60 s steps,
            # past the hang's window, its node's port read as up meanwhile); and so does a job's end marker right
            # after its last step (the teardown's seconds).
            ts = warp(own - over, node, job=e.get("job")) + over + shift
        if s > 1 and is_telemetry(e) and e.get("kind") in PERIODIC:
            key = _stream(e)
            near = silences.get(e.get("node"), ())
            i = bisect.bisect_right(near, e["ts"]) - 1
            # (the first sample after the silence began, within one period of it: the agent's next look)
            if (i >= 0 and e["ts"] - near[i] <= periods.get(key, 5.0) and near[i] >= t0_host
                    and prev_sample.get(key, float("-inf")) < near[i]):
                ts = min(ts, warp(near[i], e.get("node")) + (e["ts"] - near[i]))
            prev_sample[key] = e["ts"]
        event = dict(e, ts=round(ts, 6))
        for f in DURATION_FIELDS:
            if isinstance(e.get(f), (int, float)) and not isinstance(e.get(f), bool):
                event[f] = round(e[f] * s, 6)
        if isinstance(e.get("start_ts"), (int, float)):
            event["start_ts"] = round(warp(e["start_ts"], node, job=e.get("job")), 6)
        if e.get("kind") == "heartbeat":
            beats.append((len(lines), e["ts"]))
        lines.append(Line(ts + (line.arrival - e["ts"]), event))
    # Delivered in the order the broker now has them (each line keeps its wall-clock delivery lag: two lines the
    # base delivered together, one stamped a step earlier, now arrive a step apart, in the order of their arrival).
    order = sorted(range(len(lines)), key=lambda i: lines[i].arrival)
    position = {i: k for k, i in enumerate(order)}
    beats = [(position[i], base_ts) for i, base_ts in beats]
    lines = [lines[i] for i in order]
    if s > 1:
        lines = _merged(lines, _timer_beats(rec, lines, beats, periods, s))
    last_step = max((line.arrival for line in lines if line.event.get("kind") == "step"), default=None)
    if last_step is not None:  # a capture ends MAX_TAIL_S into a hang, whatever the pace (the drain goes on)
        lines = [line for line in lines if line.arrival <= last_step + MAX_TAIL_S]
    onset = warp(rec.onset, None, broker=True) if rec.onset is not None else None
    scaled = rec.derive(f"time_scale({step_seconds:g}s)", lines, onset=onset, scale=rec.scale * s)
    # (heartbeats of a slowed recording are at their timer's cadence already: _timer_beats)
    return recadence(scaled, {k: max(p, min(p * s, MAX_PERIOD[k[0]])) for k, p in periods.items()
                              if s <= 1 or k[0] != "heartbeat"}, name=None)


#: A node's samples whose stamps lie this much further from their arrival than its ranks' step events' do are on
#: another clock (less: delivery lags, which differ by stream): time_scale reads them on the ranks' clock.
CLOCK_ALIGN_MIN_S = 1.0


def telemetry_clocks(rec: Recording) -> dict[tuple, float]:
    """(node, telemetry kind) -> how far its stamps run ahead of its node's ranks' (seconds), where that is over
    ``CLOCK_ALIGN_MIN_S``: the medians of stamp minus arrival, compared (a recording with arrival times only).

    Scaling time moves a stamp by its distance from the job's steps times the factor, so a sample on a clock
    seconds off its node's ranks' moves by minutes at a slow pace: gen3 stamps each stream on its own clock and an
    Xid on true time, 2.5 s behind its node's ranks; gen3:xid79_dead_rank's Xid, 0.2 s after its rank's death,
    landed 200 s before the hang at 60 s steps, out of the hang's cause window."""
    if not rec.arrival:
        return {}
    ranks: dict[str, list[float]] = defaultdict(list)
    samples: dict[tuple, list[float]] = defaultdict(list)
    for line in rec.lines:
        e = line.event
        node, ts = e.get("node"), e.get("ts")
        if not isinstance(node, str) or not isinstance(ts, (int, float)):
            continue
        if e.get("kind") == "step":
            ranks[node].append(ts - line.arrival)
        elif is_telemetry(e):
            samples[(node, e.get("kind"))].append(ts - line.arrival)
    out = {}
    for (node, kind), ahead in samples.items():
        if node in ranks:
            shift = statistics.median(ahead) - statistics.median(ranks[node])
            if abs(shift) > CLOCK_ALIGN_MIN_S:
                out[(node, kind)] = shift
    return out


def _clock_nodes(rec: Recording) -> dict[tuple, str]:
    """Each (job, rank)'s node, for the events that name no node (a job-wide phase marker: sent by rank 0, stamped
    on its host's clock): time_scale keeps their clock's offset as it keeps the others' (scaling it would move the
    end marker seconds before rank 0's last step at a fast pace, and the job's last steps after its end)."""
    out: dict[tuple, str] = {}
    for e in rec.events():
        if "rank" in e and isinstance(e.get("node"), str):
            out.setdefault((e.get("job"), e["rank"]), e["node"])
    return out


#: A job's end marker this close after its last step (no hang in between: under the warning floor) follows it by
#: its own seconds whatever the pace (a teardown's time): gen3:fast_15ms's end, 0.5 s (33 steps) after its last
#: step, was a tail stretched 3,800x at 60 s steps, past the capture's end: the job hung at its end.
END_KEPT_S = 30.0

#: A job-wide gap between two steps' ends this many times the job's median one is a stop (an unmarked checkpoint, a
#: stall or hang the job recovered from): time_scale keeps it at its wall-clock length.
STOP_FACTOR = 10.0


#: A rank's step event at least this many steps below its own latest, stamped over ``RELAUNCH_S`` after it, begins a new
#: run of its job (a relaunch from a checkpoint: the step numbers start again; models/relaunch.py's reading).
RELAUNCH_STEPS_BACK = 2
RELAUNCH_S = 1.0


def held_intervals(rec: Recording, offsets: dict | None = None) -> list[tuple[float, float]]:
    """What time_scale keeps at its wall-clock length (base time, merged, sorted): the marked checkpoints, the
    stops (``STOP_FACTOR``: from one normal step after a step's end to the next step's end, each step's end the
    median of its ranks' on the job's clock) and a relaunch's downtime (from one normal step after the old run's
    last step's end to the new run's first step's end: a relaunch takes the launcher's and the checkpoint's time).
    A restarted job's runs are read one by one (``_runs``): the steps it computes twice never mix."""
    offsets = node_offsets(rec) if offsets is None else offsets
    ends: dict[tuple, list[float]] = defaultdict(list)
    for e, run in _runs(rec, offsets):
        ends[(e.get("job"), run, e["step"])].append(e["ts"] - _offset(offsets, e.get("node"), e.get("job")))
    by_run: dict = defaultdict(list)
    for (job, run, step), ts in ends.items():
        by_run[(job, run)].append((step, statistics.median(ts)))
    out = list(checkpoints(rec))
    usual_of: dict = {}
    for key, series in sorted(by_run.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        series.sort()
        gaps = [(a[1], b[1]) for a, b in zip(series, series[1:]) if b[0] == a[0] + 1 and b[1] > a[1]]
        usual = statistics.median(b - a for a, b in gaps) if gaps else usual_of.get(key[0])
        if usual is not None:
            usual_of.setdefault(key[0], usual)
        before = by_run.get((key[0], key[1] - 1))
        if before and usual is not None:  # the relaunch: the old run's last step's end to the new run's first's
            a, b = max(ts for _, ts in before) + usual_of[key[0]], min(ts for _, ts in series)
            if b > a:
                out.append((a, b))
        if len(gaps) < 3:
            continue
        out.extend((a + usual, b) for a, b in gaps if b - a > STOP_FACTOR * usual)
    merged: list[tuple[float, float]] = []
    for a, b in sorted(out):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
        else:
            merged.append((a, b))
    return merged


def _runs(rec: Recording, offsets: dict) -> list[tuple[dict, int]]:
    """Each step event with its job's run (0, then 1 after the job's first relaunch, ...): a rank's events in stamp
    order, a new run where its step goes back ``RELAUNCH_STEPS_BACK`` or more over ``RELAUNCH_S`` after its latest.
    A rank's run is the job's: its first relaunch moves it to the job's newest run (its peers' late batches)."""
    steps = [e for e in rec.events("step") if isinstance(e.get("step"), int) and isinstance(e.get("ts"), (int, float))]
    steps.sort(key=lambda e: e["ts"] - _offset(offsets, e.get("node"), e.get("job")))
    last: dict[tuple, tuple[int, float]] = {}
    run_of: dict[tuple, int] = {}
    newest: dict = defaultdict(int)
    out = []
    for e in steps:
        rank, ts = (e.get("job"), e.get("rank")), e["ts"]
        own = last.get(rank)
        run = run_of.get(rank, 0)
        if own is not None and e["step"] <= own[0] - RELAUNCH_STEPS_BACK and ts - own[1] > RELAUNCH_S:
            run = run + 1 if run >= newest[e.get("job")] else newest[e.get("job")]
            newest[e.get("job")] = run
            run_of[rank] = run
        if own is None or ts > own[1]:
            last[rank] = (e["step"], ts)
        out.append((e, run))
    return out


def checkpoints(rec: Recording) -> list[tuple[float, float]]:
    """The marked checkpoints (a job-wide ``checkpoint`` phase event to the job's next job-wide phase), base time."""
    out = []
    began: dict = {}
    for e in rec.events("phase"):
        if e.get("rank") is not None or not isinstance(e.get("ts"), (int, float)):
            continue
        job = e.get("job")
        if job in began:
            out.append((began.pop(job), e["ts"]))
        if e.get("phase") == "checkpoint":
            began[job] = e["ts"]
    return sorted(out)


#: A rank's events this many of its heartbeat periods apart are a silence (it died, froze, or went away), not
#: a timer's gap: time_scale leaves it silent.
SILENCE_PERIODS = 2.5


def _silences(rec: Recording, periods: dict[tuple, float]) -> dict[str, list[float]]:
    """Per node, the times (sorted, the base's) at which one of its ranks went silent: its last event before a
    silence, or its last event at all where the recording's ranks went on after it."""
    heard: dict[tuple, list[float]] = defaultdict(list)
    node_of: dict[tuple, str] = {}
    for e in rec.events():
        if "rank" in e and not is_telemetry(e) and isinstance(e.get("ts"), (int, float)):
            key = (e.get("job"), e.get("rank"))
            heard[key].append(e["ts"])
            if isinstance(e.get("node"), str):
                node_of[key] = e["node"]
    end = max((ts for series in heard.values() for ts in series), default=0.0)
    out: dict[str, list[float]] = defaultdict(list)
    for key, series in heard.items():
        if key not in node_of:
            continue
        series.sort()
        gap = SILENCE_PERIODS * periods.get(("heartbeat",) + key, 5.0)
        for a, b in zip(series, series[1:] + [end + gap + 1.0]):
            if b - a > gap:
                out[node_of[key]].append(a)
    return {node: sorted(v) for node, v in out.items()}


def _timer_beats(rec: Recording, lines: list[Line], beats: list[tuple[int, float]], periods: dict[tuple, float],
                 s: float) -> list[Line]:
    """The heartbeats a monitor's timer sends between two of a slowed rank's heartbeats (``beats``: their index in
    ``lines`` and base time), every ``min(p*s, MAX_PERIOD)`` seconds: the one before, brought up to the step the
    rank reached by then (its sequence numbers advanced at the rank's usual rate, never past the next heartbeat's:
    noise's ``_advanced``); none across a silence of the base's own (``SILENCE_PERIODS``)."""
    done: dict[tuple, list[tuple[float, int]]] = defaultdict(list)
    for line in lines:
        e = line.event
        if e.get("kind") == "step" and isinstance(e.get("step"), int):
            done[(e.get("job"), e.get("rank"))].append((e["ts"], e["step"]))
    for series in done.values():
        series.sort()
    ahead = _beat_ahead(rec)
    rates = _seq_rates(rec)
    by_stream: dict[tuple, list[tuple[int, float]]] = defaultdict(list)
    for i, base_ts in beats:
        by_stream[_stream(lines[i].event)].append((i, base_ts))
    added: list[Line] = []
    for key, series in by_stream.items():
        p = periods.get(key)
        if not p:
            continue
        every = max(p, min(p * s, MAX_PERIOD["heartbeat"]))
        steps = done.get(key[1:], [])
        for (i, a), (j, b) in zip(series, series[1:]):
            if b - a > SILENCE_PERIODS * p:
                continue  # a silence of the base's own (a frozen or dead rank): not the timer's to fill
            hb, nxt = lines[i], lines[j]
            t = hb.event["ts"] + every
            while t < nxt.event["ts"] - 0.5 * every and len(added) < 1_000_000:
                copy = _moved(hb, t - hb.event["ts"])
                k = bisect.bisect_right(steps, (t, float("inf"))) - 1
                if k >= 0 and isinstance(hb.event.get("step"), int) and isinstance(nxt.event.get("step"), int):
                    step = min(max(steps[k][1] + ahead.get(key, 0), hb.event["step"]), nxt.event["step"])
                    if step >= nxt.event["step"] > hb.event["step"]:
                        # At the next heartbeat's step: its state (where a hang stopped the rank's collectives;
                        # an estimate at the rates would put every rank at the same point of the step).
                        copy = _moved(nxt, t - nxt.event["ts"])
                    elif step > hb.event["step"]:
                        copy = Line(copy.arrival, _advanced(copy.event, step, rates.get(key, {}), nxt.event))
                added.append(copy)
                t += every
    return added


def _beat_ahead(rec: Recording) -> dict[tuple, int]:
    """Per heartbeat stream, how far its ``step`` is from the rank's last completed step event (the monitor's
    convention: the step done, or the one under way), the least over its heartbeats (a timer's heartbeat never
    claims a step the rank may not have reached)."""
    done: dict[tuple, list[tuple[float, int]]] = defaultdict(list)
    for e in rec.events("step"):
        if isinstance(e.get("step"), int) and "ts" in e:
            done[(e.get("job"), e.get("rank"))].append((e["ts"], e["step"]))
    for series in done.values():
        series.sort()
    diffs: dict[tuple, list[int]] = defaultdict(list)
    for e in rec.events("heartbeat"):
        series = done.get((e.get("job"), e.get("rank")))
        if series and isinstance(e.get("step"), int):
            k = bisect.bisect_right(series, (e["ts"], float("inf"))) - 1
            if k >= 0:
                diffs[_stream(e)].append(e["step"] - series[k][1])
    return {key: max(0, min(d)) for key, d in diffs.items()}


def _periods(rec: Recording) -> dict[tuple, float]:
    """Each periodic stream's usual period (its median gap), seconds."""
    times: dict[tuple, list[float]] = defaultdict(list)
    for e in rec.events():
        if e.get("kind") in PERIODIC and "ts" in e:
            times[_stream(e)].append(e["ts"])
    out = {}
    for key, ts in times.items():
        gaps = [b - a for a, b in zip(ts, ts[1:]) if b > a]
        if gaps:
            out[key] = statistics.median(gaps)
    return out


def recadence(rec: Recording, period: dict[tuple, float] | Callable[[tuple], float | None], *,
              name: str | None = "recadence") -> Recording:
    """Each periodic stream at its new ``period``: samples closer than it are dropped; a gap longer than it in
    which the source made no progress (no step event of that rank since; for telemetry, any gap) is filled with
    copies of the sample before it, as a timer would have sent them.

    Invariant: a heartbeat or sample says what the one before it said until something changes, so the verdict
    is the same as at the original cadence."""
    get = period.get if isinstance(period, dict) else period
    last_kept: dict[tuple, Line] = {}
    progressed: dict[tuple, bool] = {}
    out: list[Line] = []
    filled: list[Line] = []  # (merged by arrival at the end: a copy arrives when its timer would have sent it)
    for line in rec.lines:
        e = line.event
        if e.get("kind") == "step":
            for key in (("heartbeat", e.get("job"), e.get("rank")),):
                progressed[key] = True
        if e.get("kind") not in PERIODIC or "ts" not in e:
            out.append(line)
            continue
        key = _stream(e)
        p = get(key)
        prev = last_kept.get(key)
        if p is None or prev is None:
            last_kept[key] = line
            progressed[key] = False
            out.append(line)
            continue
        if e["ts"] - prev.event["ts"] < p * 0.999:
            continue  # (thinned)
        if e["kind"] != "heartbeat" or not progressed.get(key):
            n = int((e["ts"] - prev.event["ts"]) / p - 1e-9)
            filled.extend(_moved(prev, i * p) for i in range(1, min(n + 1, 100_000)))
        last_kept[key] = line
        progressed[key] = False
        out.append(line)
    return rec.derive(name, _merged(out, filled))


def _seq_rates(rec: Recording) -> dict[tuple, dict[str, float]]:
    """Per heartbeat stream, its sequence numbers' usual advance per step (``seq_completed``, ``pgs/NAME``)."""
    seen: dict[tuple, list[dict]] = defaultdict(list)
    for e in rec.events("heartbeat"):
        if isinstance(e.get("step"), int):
            seen[_stream(e)].append(e)
    out = {}
    for key, beats in seen.items():
        per: dict[str, list[float]] = defaultdict(list)
        for a, b in zip(beats, beats[1:]):
            steps = b["step"] - a["step"]
            if steps <= 0:
                continue
            for name, x, y in _seqs(a, b):
                per[name].append((y - x) / steps)
        out[key] = {name: statistics.median(v) for name, v in per.items()}
    return out


def _seqs(a: dict, b: dict):
    for f in ("seq_started", "seq_completed"):
        if isinstance(a.get(f), int) and isinstance(b.get(f), int):
            yield f, a[f], b[f]
    pa, pb = a.get("pgs"), b.get("pgs")
    if isinstance(pa, dict) and isinstance(pb, dict):
        for name, va in pa.items():
            vb = pb.get(name)
            if isinstance(va, dict) and isinstance(vb, dict):
                for f in ("started", "completed"):
                    if isinstance(va.get(f), int) and isinstance(vb.get(f), int):
                        yield f"pgs/{name}/{f}", va[f], vb[f]


def _advanced(e: dict, step: int, rates: dict[str, float], after: dict) -> dict:
    """A heartbeat brought forward to ``step``: its sequence numbers as many steps further at their rates, never past
    the heartbeat ``after`` it (an estimate ahead of the rank would make every other rank read as behind it)."""
    k = step - e["step"]
    ev = dict(e, step=step)
    for f in ("seq_started", "seq_completed"):
        if isinstance(e.get(f), int) and f in rates:
            cap = after[f] if isinstance(after.get(f), int) else float("inf")
            ev[f] = max(e[f], min(e[f] + round(rates[f] * k), cap))
    if isinstance(e.get("pgs"), dict):
        later = after.get("pgs") if isinstance(after.get("pgs"), dict) else {}
        pgs = {}
        for name, v in e["pgs"].items():
            if isinstance(v, dict):
                nxt = later.get(name) if isinstance(later.get(name), dict) else {}
                v = dict(v, **{f: max(v[f], min(v[f] + round(rates[f"pgs/{name}/{f}"] * k),
                                                 nxt[f] if isinstance(nxt.get(f), int) else float("inf")))
                               for f in ("started", "completed")
                               if isinstance(v.get(f), int) and f"pgs/{name}/{f}" in rates})
            pgs[name] = v
        ev["pgs"] = pgs
    return ev


def heartbeat_cadence(rec: Recording, seconds: float) -> Recording:
    """Every rank heartbeats every ``seconds`` (a monitor configured otherwise).

    Invariant: the verdict is the same (heartbeats say a rank is alive and where it is; their cadence is a
    setting, not a symptom)."""
    return recadence(rec, lambda key: seconds if key[0] == "heartbeat" else None, name=f"heartbeat_every({seconds:g}s)")


# -- delivery -----------------------------------------------------------------------------------------------


def _delivered(rec: Recording, what: str, delay: Callable[[int, Line], float], *, copies: Callable[[int, Line], int]
               = lambda i, line: 0) -> Recording:
    """Lines delivered ``delay(i, line)`` seconds later than recorded (each producer's order kept: a later line
    of a source never arrives before an earlier one) and ``copies`` times again (a retried send), each copy
    shortly after. The recording then carries arrival times (a broker capture)."""
    latest: dict[tuple, float] = {}
    out = []
    for i, line in enumerate(rec.lines):
        src = _source(line.event)
        at = max(line.arrival + delay(i, line), latest.get(src, float("-inf")))
        latest[src] = at
        out.append(Line(at, line.event))
        for c in range(copies(i, line)):
            out.append(Line(at + 0.05 * (c + 1), line.event))
    return rec.derive(what, _sorted(out), arrival=True)


def heartbeat_lag(rec: Recording, lag: float, jitter: float, seed: int = 0) -> Recording:
    """Heartbeats reach the worker ``lag`` (+ up to ``jitter``) seconds after they were stamped (a heartbeat
    thread that read the step counter early, a message that waited in the producer's queue): each says a step
    a few behind the step events that arrived before it.

    Invariant: the same verdict; a late heartbeat is not a restart (issue 39 item 4)."""
    rng = random.Random(seed)
    latest: dict[tuple, float] = {}
    out = []
    for line in rec.lines:
        if line.event.get("kind") != "heartbeat":
            out.append(line)
            continue
        key = _stream(line.event)  # one rank's heartbeats keep their order
        at = latest[key] = max(line.arrival + lag + rng.random() * jitter, latest.get(key, float("-inf")))
        out.append(Line(at, line.event))
    return rec.derive(f"heartbeat_lag({lag:g}s+{jitter:g}s)", _sorted(out), arrival=True)


def heartbeat_stale_step(rec: Recording, lag: float) -> Recording:
    """Each heartbeat, sent on time, reports the step its rank had completed ``lag`` seconds earlier (a heartbeat
    thread that read the step counter before the step's event went out): a few steps behind the step events
    that already arrived. Only lowers a heartbeat's ``step``, never raises it.

    Invariant: the same verdict; a heartbeat behind the step events is a late heartbeat, not a restart (issue 39
    item 4)."""
    done: dict[tuple, list[tuple[float, int]]] = defaultdict(list)
    for e in rec.events("step"):
        if isinstance(e.get("step"), int) and "ts" in e:
            done[(e.get("job"), e.get("rank"))].append((e["ts"], e["step"]))
    for series in done.values():
        series.sort()
    out = []
    for line in rec.lines:
        e = line.event
        series = done.get((e.get("job"), e.get("rank"))) if e.get("kind") == "heartbeat" else None
        if not series or not isinstance(e.get("step"), int):
            out.append(line)
            continue
        i = bisect.bisect_right(series, (e["ts"] - lag, float("inf"))) - 1
        step = series[i][1] if i >= 0 else e["step"]
        out.append(Line(line.arrival, dict(e, step=step)) if step < e["step"] else line)
    return rec.derive(f"heartbeat_stale_step({lag:g}s)", out)


def duplicated(rec: Recording, share: float, seed: int = 0) -> Recording:
    """A ``share`` of the messages delivered twice (a producer's retry after a lost acknowledgement).

    Invariant: the same verdict, the same alert ids (at-least-once delivery is the contract)."""
    rng = random.Random(seed)
    return _delivered(rec, f"duplicated({share:.0%})", lambda i, line: 0.0,
                      copies=lambda i, line: 1 if rng.random() < share else 0)


def reordered(rec: Recording, window: float, seed: int = 0) -> Recording:
    """Each producer's messages delayed by up to ``window`` seconds, independently: messages of different ranks
    and nodes arrive out of their time order (each producer's own order kept, as a Kafka key's is).

    Invariant: the same verdict (events of one step from many producers arrive in any order)."""
    rng = random.Random(seed)
    return _delivered(rec, f"reordered({window:g}s)", lambda i, line: rng.random() * window)


def late(rec: Recording, share: float, delay: float, seed: int = 0) -> Recording:
    """A ``share`` of the messages held ``delay`` seconds before they are sent (a producer stalls, its later
    messages queue behind them).

    Invariant: the same verdict; a late message is not a symptom."""
    rng = random.Random(seed)
    out = _delivered(rec, f"late({share:.0%},{delay:g}s)", lambda i, line: delay if rng.random() < share else 0.0)
    return replace(out, lateness=max(rec.lateness, delay))


# -- clocks -------------------------------------------------------------------------------------------------


def clock_offsets(rec: Recording, spread: float, seed: int = 0) -> Recording:
    """Each node's clock off by up to +-``spread`` seconds (broken NTP): every event stamped on it is that far
    off (a job-wide phase marker, which names no node, on rank 0's host, which sends it); arrival times (the broker's clock) do not move. A recording without arrival times is re-sorted by the
    stamped times, as an imported trace is.

    Invariant: the same verdict; which host's clock is wrong is not a fault of the job."""
    rng = random.Random(seed)
    nodes = sorted({e["node"] for e in rec.events() if isinstance(e.get("node"), str)})
    offset = {n: round((rng.random() * 2 - 1) * spread, 3) for n in nodes}
    clock_of = _clock_nodes(rec)  # a job-wide marker (no node) is stamped on its sender's (rank 0's) host
    out = []
    for line in rec.lines:
        e = line.event
        node = e.get("node") if "node" in e else clock_of.get((e.get("job"), e.get("rank", 0)))
        off = offset.get(node, 0.0)
        if not off or "ts" not in e:
            out.append(line)
            continue
        event = dict(e, ts=round(e["ts"] + off, 6))
        if isinstance(e.get("start_ts"), (int, float)):
            event["start_ts"] = round(e["start_ts"] + off, 6)
        out.append(Line(line.arrival if rec.arrival else event["ts"], event))
    if rec.arrival:  # the broker's clock did not move: alert times are judged on it
        return rec.derive(f"clock_offsets(+-{spread:g}s)", out)
    return rec.derive(f"clock_offsets(+-{spread:g}s)", _sorted(out),
                      clock_error=max(rec.clock_error, max(map(abs, offset.values()), default=0.0)))


# -- a pause around the fault ------------------------------------------------------------------------------


def pause_before_fault(rec: Recording, phase: str, seconds: float, *, timer_in_pause: bool = True) -> Recording:
    """A marked pause (``phase``: ``checkpoint``, ``eval`` or ``warmup``; job-wide phase events) of ``seconds``
    at the step boundary where the fault begins (a healthy recording: half-way through), once every rank ended
    the step before it, every rank heartbeating through it where the recording has heartbeats (through a
    checkpoint or eval, saying so, that step and the job's collectives done: ``timer_in_pause``, ``_pause_positions``;
    after it, the base's heartbeats as they were); every event
    stamped after it happens ``seconds`` later (events stamped before it and still in flight arrive as they did).

    Invariant: the same verdict, the first alert's delay counted from the fault's onset; a pause is not a
    hang and does not hide the fault that follows it."""
    start, end = rec.span()
    goal = rec.onset if rec.onset is not None else start + (end - start) / 2
    # Times on the job's clock (each host's offset taken out): with hosts seconds apart, a split by each host's
    # own stamps would leave one node's ranks steps ahead of the others' through the pause (a partial hang).
    offsets, clock_of = node_offsets(rec), _clock_nodes(rec)

    def job_time(e: dict, when: float) -> float:
        node = e.get("node") if "node" in e else clock_of.get((e.get("job"), e.get("rank", 0)))
        return when - offsets.get(node, 0.0)

    ends: dict[tuple, list[float]] = defaultdict(list)
    to_frame = []
    for line in rec.lines:
        e = line.event
        if e.get("kind") == "step":
            ends[(e.get("job"), e.get("step"))].append(job_time(e, e["ts"]))
            to_frame.append(job_time(e, e["ts"]) - e["ts"])
    # (the onset, true time or a host's stamp, on the job's clock by the median host: the hosts' clocks spread
    # around the true time)
    shift = statistics.median(to_frame) if to_frame else 0.0
    goal += shift
    # The boundary: the end of the step whose first rank ended it closest before the goal, once all ranks did.
    before_goal = [(min(ts), max(ts)) for ts in ends.values() if min(ts) <= goal + 1e-3]  # (a stamp: the estimate's ms)
    at = max(before_goal)[1] + 1e-3 if before_goal else goal
    at, sent = _after_open_pause(rec, at, job_time)
    jobs = sorted({e["job"] for e in rec.events("step") if isinstance(e.get("job"), str)})

    def later(line: Line) -> bool:
        return job_time(line.event, line.event.get("ts", line.arrival)) > at

    before = [line for line in rec.lines if not later(line)]
    after = [_moved(line, seconds) for line in rec.lines if later(line)]
    inserted = []
    for job in jobs:
        mark = at + offsets.get(clock_of.get((job, 0)), 0.0)  # (sent by rank 0, stamped on its host's clock)
        arrival = max(at - shift, sent + 1e-3)
        inserted.append(Line(arrival, {"v": 1, "kind": "phase", "job": job, "ts": round(mark, 6), "phase": phase}))
        inserted.append(Line(arrival + seconds, {"v": 1, "kind": "phase", "job": job,
                                                    "ts": round(mark + seconds, 6), "phase": "train"}))
    last_hb: dict[tuple, Line] = {}
    for line in before:
        if line.event.get("kind") == "heartbeat":
            last_hb[_stream(line.event)] = line
    periods = _periods(rec)
    paused = timer_in_pause and phase in ("checkpoint", "eval")
    said = _pause_positions(rec, at, job_time) if paused else {}
    for key, line in last_hb.items():
        p = max(periods.get(key, 5.0), 0.5)
        # Through a checkpoint or eval a rank's timer says its phase (every rank marks its own, producers/monitor.py):
        # a copy saying ``train`` reads as a rank that left the pause, and one whose last step event was lost as
        # behind the others (a partial hang at the pause's end: gen3:slow_node_2gpu / eval); and where every rank
        # is, the step the pause follows with its collectives done (``_pause_positions``).
        # (``timer_in_pause`` False: copies as they were, for a pause inside a fault whose ranks may be stuck)
        if paused:
            line = Line(line.arrival, _at_pause(line.event, said.get(key), phase))
        n = 1
        while job_time(line.event, line.event["ts"]) + n * p < at + seconds:
            moved = _moved(line, n * p)
            if job_time(moved.event, moved.event["ts"]) > at:
                inserted.append(moved)
            n += 1
    onset = rec.onset + seconds if rec.onset is not None else None
    lines = _sorted(before + inserted + after) if rec.arrival else before + _sorted(inserted) + after
    return rec.derive(f"{phase}_pause({seconds:g}s)", lines, onset=onset)


def _after_open_pause(rec: Recording, at: float, job_time: Callable[[dict, float], float]) -> tuple[float, float]:
    """``at`` (the job's clock), or, where a job's own marked pause (checkpoint, eval) is open there, just after
    the job-wide marker that ends it: the next step begins after the base's pause, so the variant's pause follows
    it. (Inserted inside it, the variant's own end marker, ``train``, cut the base's pause short, and the rest of
    it read as training without steps: library:steady-5pct-noise4-64 / warmup 20s, a hang 30 s after the base's
    checkpoint at step 100 began.) With the arrival of that end marker (-inf where none): the variant's marker is
    sent after it, so it arrives after it too."""
    marks: dict = defaultdict(list)
    for line in rec.lines:
        e = line.event
        if e.get("kind") == "phase" and isinstance(e.get("ts"), (int, float)) and isinstance(e.get("phase"), str):
            marks[e.get("job")].append((job_time(e, e["ts"]), e["phase"], line.arrival))
    moved, sent = at, float("-inf")
    for series in marks.values():
        series.sort(key=lambda m: m[0])
        before = [phase for ts, phase, _ in series if ts <= at]
        if before and before[-1] in ("checkpoint", "eval"):
            ends = [(ts, arrival) for ts, phase, arrival in series if ts > at and phase not in ("checkpoint", "eval")]
            if ends:
                moved = max(moved, ends[0][0] + 1e-3)
                sent = max(sent, ends[0][1] if ends[0][1] is not None else float("-inf"))
    return moved, sent


def _counters(e: dict) -> dict[str, int]:
    """A heartbeat's collective counts, completed: ``seq`` (the top-level) and ``pgs/NAME`` per process group."""
    out = {"seq": e["seq_completed"]} if isinstance(e.get("seq_completed"), int) else {}
    if isinstance(e.get("pgs"), dict):
        out.update((f"pgs/{name}", v["completed"]) for name, v in e["pgs"].items()
                   if isinstance(v, dict) and isinstance(v.get("completed"), int))
    return out


#: A rank's count at its job's pause is read from its last this many heartbeats before it ...
PAUSE_BEATS = 8
#: ... and its rate per step, read over its run, is a whole number where it is this close to one.
RATE_SNAP = 0.2


def _pause_positions(rec: Recording, at: float, job_time: Callable[[dict, float], float]) -> dict[tuple, dict]:
    """What each rank's heartbeat says through a pause that begins at ``at`` (the job's clock), per heartbeat stream:
    ``step``, the last step every rank of its job ended before it (with the stream's usual lead, ``_beat_ahead``),
    and per counter (``_counters``) one count for the whole job, every collective of that step done.

    A real pause is entered by every rank at one step boundary: no collective is in flight and a synchronous job's
    ranks have done the same collectives. Copies of each rank's last heartbeat before it (steps 39, 42 and 44 of
    gen3:three_ranks at 0.34 s steps) read as two ranks past the collective the third waits at: a false partial
    pause hang. The count is each rank's count at a step's end (its last ``PAUSE_BEATS`` heartbeats' counts less
    the steps each had ended, read from its step events, not the heartbeat's ``step``, which may lag:
    ``heartbeat_stale_step``, times its rate per step) carried on to the boundary, the least over the job's ranks
    (a heartbeat taken within a step over-counts by the step's collectives under way), never below
    a count some rank had done before the pause nor above one some rank says after it (the base's heartbeats resume
    unchanged: a count going back reads as a new process, and a hang right after the pause keeps its culprit behind
    the collective the others wait in)."""
    done: dict[tuple, list[tuple[float, int]]] = defaultdict(list)
    boundary: dict = {}
    ends: dict[tuple, float] = {}
    for e in rec.events("step"):
        if isinstance(e.get("step"), int) and isinstance(e.get("ts"), (int, float)):
            done[(e.get("job"), e.get("rank"))].append((e["ts"], e["step"]))
            key = (e.get("job"), e["step"])
            ends[key] = max(ends.get(key, float("-inf")), job_time(e, e["ts"]))
    for (job, step), end in ends.items():
        if end < at:
            boundary[job] = max(boundary.get(job, step), step)
    for series in done.values():
        series.sort()
    beats: dict[tuple, list[dict]] = defaultdict(list)
    for e in rec.events("heartbeat"):
        if isinstance(e.get("ts"), (int, float)):
            beats[_stream(e)].append(e)
    ahead = _beat_ahead(rec)
    lows: dict[tuple, int] = {}
    highs: dict[tuple, int] = {}
    guesses: dict[tuple, list[int]] = defaultdict(list)
    for key, series in beats.items():
        job = key[1]
        if job not in boundary:
            continue
        series.sort(key=lambda e: job_time(e, e["ts"]))
        steps = done.get(key[1:], [])

        def reached(e: dict) -> int | None:  # the rank's last step ended by the heartbeat (its host's clock)
            k = bisect.bisect_right(steps, (e["ts"], float("inf"))) - 1
            return steps[k][1] if k >= 0 else None

        prior = [e for e in series if job_time(e, e["ts"]) <= at]
        nxt = next((e for e in series if job_time(e, e["ts"]) > at), None)
        for name, v in _counters(nxt).items() if nxt else ():
            highs[(job, name)] = min(highs.get((job, name), v), v)
        if not prior:
            continue
        last = prior[-1]
        known = [(k, _counters(e)) for e in prior if (k := reached(e)) is not None]
        for name, v in _counters(last).items():
            lows[(job, name)] = max(lows.get((job, name), v), v)
            # Its rate per step over the run's heartbeats (from the last count that went back, a new process's); a
            # step issues a whole number of collectives (a heartbeat within a step counts some of the next).
            run = [(k, c[name]) for k, c in known if name in c]
            for i in range(len(run) - 1, 0, -1):
                if run[i][1] < run[i - 1][1]:
                    run = run[i:]
                    break
            if len(run) < 2 or run[-1][0] <= run[0][0]:
                continue
            rate = (run[-1][1] - run[0][1]) / (run[-1][0] - run[0][0])
            rate = round(rate) if abs(rate - round(rate)) < RATE_SNAP else rate
            # The count at a step's end: the least of a heartbeat's count less the steps it had ended at that rate
            # (one taken within a step over-counts by the collectives of the step under way).
            at_end = min(c - rate * k for k, c in run[-PAUSE_BEATS:])
            guesses[(job, name)].append(round(at_end + rate * boundary[job]))
    counts = {}
    for pool, low in lows.items():
        guess = min(guesses[pool], default=low)
        counts[pool] = max(low, min(guess, highs.get(pool, guess)))
    return {key: {"step": boundary[key[1]] + ahead.get(key, 0),
                  "counts": {name: v for (job, name), v in counts.items() if job == key[1]}}
            for key in beats if key[1] in boundary}


def _at_pause(e: dict, said: dict | None, phase: str) -> dict:
    """A heartbeat copied into a pause: its ``phase``, and the step and counts ``said`` (``_pause_positions``), each
    collective started as done."""
    out = dict(e, phase=phase)
    if not said:
        return out
    if isinstance(e.get("step"), int):
        out["step"] = said["step"]
    counts = said["counts"]
    if "seq" in counts and isinstance(e.get("seq_completed"), int):
        out["seq_started"] = out["seq_completed"] = counts["seq"]
    if isinstance(e.get("pgs"), dict):
        out["pgs"] = {name: dict(v, started=counts[f"pgs/{name}"], completed=counts[f"pgs/{name}"])
                      if isinstance(v, dict) and f"pgs/{name}" in counts and isinstance(v.get("completed"), int)
                      else v for name, v in e["pgs"].items()}
    return out


# -- the watchdog's teardown ---------------------------------------------------------------------------------


def teardown(rec: Recording, culprits: dict[str, frozenset[int]], after: float) -> Recording:
    """``after`` seconds into a hang the NCCL watchdog kills the ranks that waited: every event of a job's rank
    that is not one of its ``culprits`` stops then. A culprit stuck where no signal handler runs goes on sending
    what it sent while stuck (a hung training thread's heartbeats, until the launcher's SIGKILL), but it never
    gets past the hang: its peers are gone, so no collective of its can complete. From its first event after the
    teardown that reports progress past what it reported before it (a later step, a heartbeat's step or
    collective counters gone up: a frozen rank resumed, a hung one went on) it is gone too (its collective fails
    on the dead communicator, or the launcher's SIGKILL, which reaches a stopped process, came first). A killed
    job sends no job-wide marker either (no ``phase: end``).

    Invariant: the same hang, the same culprit rank and node (torn-down ranks are never promoted to culprits,
    issue 39 item 3); a warning before the critical."""
    if rec.onset is None:
        return rec.derive(f"teardown({after:g}s)", rec.lines)
    cut = rec.onset + after
    reached: dict[tuple[str, int, str], int] = {}  # a culprit's highest step and collective counters before the cut
    gone: set[tuple[str, int]] = set()
    out = []
    for line in rec.lines:
        e = line.event
        job = e.get("job")
        if job not in culprits:
            out.append(line)
            continue
        if "rank" not in e:
            if not (line.arrival >= cut and e.get("kind") == "phase"):
                out.append(line)
            continue
        rank = e["rank"]
        if rank not in culprits[job]:
            if line.arrival < cut:
                out.append(line)
            continue
        counters = [(k, e[k]) for k in _PROGRESS if isinstance(e.get(k), int)]
        if line.arrival < cut:
            for k, v in counters:
                reached[job, rank, k] = max(v, reached.get((job, rank, k), v))
            out.append(line)
            continue
        if (job, rank) not in gone and any(v > reached.get((job, rank, k), v - 1) for k, v in counters):
            gone.add((job, rank))
        if (job, rank) not in gone:
            out.append(line)
    return rec.derive(f"teardown({after:g}s)", out)


#: A rank's fields that only go up as it goes on (its last completed step, its collectives issued and completed).
_PROGRESS = ("step", "seq_started", "seq_completed")


# -- node telemetry ------------------------------------------------------------------------------------------


def without_telemetry(rec: Recording) -> Recording:
    """No node agent: every node telemetry event (gpu, host, link, xid, topology) left out.

    Invariant: the same job verdict (types made from steps and heartbeats, culprit, node); alerts made from
    telemetry and causes read from it may go (``EXCUSED``)."""
    return rec.derive("without_telemetry", [line for line in rec.lines if not is_telemetry(line.event)])


def quiet_telemetry(rec: Recording, every: float = 5.0) -> Recording:
    """Healthy node telemetry added for every node of the job that has none: each GPU of a rank's node and the
    node's host sampled every ``every`` seconds, normal values (busy GPU, cool, at clock; idle-ish host).

    Invariant: the same verdict; healthy telemetry adds no alert and no cause."""
    have = {e.get("node") for e in rec.events() if is_telemetry(e)}
    gpus: dict[str, set[int]] = defaultdict(set)
    for e in rec.events("step"):
        node = e.get("node")
        if isinstance(node, str) and node not in have:
            gpus[node].add(e["gpu"] if isinstance(e.get("gpu"), int) else len(gpus[node]) % 8)
    start, end = rec.span()
    out: list[Line] = []
    t = start
    while t <= end:
        for node, indexes in gpus.items():
            for g in sorted(indexes)[:8]:
                out.append(Line(t, {"v": 1, "kind": "gpu", "node": node, "ts": round(t, 6), "gpu": g, "util": 98.0,
                                    "temp": 62.0, "power": 550.0, "power_limit": 700.0, "sm_clock": 1980.0,
                                    "sm_clock_max": 1980.0, "throttle": 0, "mem_used": 60 << 30,
                                    "mem_total": 80 << 30}))
            out.append(Line(t, {"v": 1, "kind": "host", "node": node, "ts": round(t, 6), "load1": 12.0,
                                "mem_total": 2 << 40, "mem_available": 1 << 40,
                                "psi": {"cpu": {"some_avg10": 1.0}, "io": {"some_avg10": 0.5, "full_avg10": 0.1},
                                        "memory": {"some_avg10": 0.0, "full_avg10": 0.0}}}))
        t += every
    return rec.derive("quiet_telemetry", _merged(rec.lines, out))


# -- world size ---------------------------------------------------------------------------------------------

#: Event fields naming a process group: a cloned rank's groups are its copy's own.
GROUP_FIELDS = ("pg", "group")


def world_size(rec: Recording, size: int, hot: dict[str, frozenset[int]], hot_nodes: frozenset[str]) -> Recording:
    """Every job of ``W`` ranks run on ``size`` ranks instead: larger, by copies of the job's healthy ranks and
    nodes beside it (rank ``r + i*W`` on node ``<node>~i``, copied from ``r`` unless ``r`` is one of the fault's
    ``hot`` ranks or on a ``hot_nodes`` node, then from a healthy rank); smaller, by keeping the fault's ranks
    and the first healthy ones, numbered ``0..size-1`` in their order (where step events name a peer group, a
    pipeline stage, each keeps its share and the fault's a healthy peer: a straggler is judged among its stage's
    ranks; a node's fault naming no rank, a link behind it, keeps a rank of that node). Node telemetry follows
    the nodes kept or copied.

    Invariant: the same verdict, the culprit being the same rank (renumbered as ``Recording.ranks`` says) on
    the same node; the fault's share of the job does not change what it is."""
    worlds: dict[str, int] = {}
    for e in rec.events("step"):
        worlds[e["job"]] = max(worlds.get(e["job"], 0), int(e["rank"]) + 1)  # (loose envelopes: 3.0)
    if not worlds:
        return rec.derive(f"world_size({size})", rec.lines)
    node_of: dict[tuple[str, int], str] = {}
    for e in rec.events("step"):
        if isinstance(e.get("node"), str):
            node_of.setdefault((e["job"], e["rank"]), e["node"])
    if all(size >= w for w in worlds.values()):
        return _grown(rec, size, worlds, node_of, hot, hot_nodes)
    return _shrunk(rec, size, worlds, node_of, hot, hot_nodes)


def _grown(rec, size, worlds, node_of, hot, hot_nodes) -> Recording:
    template: dict[tuple[str, int], int] = {}
    for job, w in worlds.items():
        cool = ([r for r in range(w) if r not in hot.get(job, ()) and node_of.get((job, r)) not in hot_nodes]
                # (every rank on the fault's node, a job of one node: its healthy ranks are the templates)
                or [r for r in range(w) if r not in hot.get(job, ())])
        for r in range(w):
            healthy = r not in hot.get(job, ()) and node_of.get((job, r)) not in hot_nodes
            template[(job, r)] = r if healthy or not cool else cool[r % len(cool)]
    copies = {job: max(1, size // w) for job, w in worlds.items()}
    cool_nodes = sorted({n for n in node_of.values() if n not in hot_nodes})
    k_nodes = max(copies.values())
    by_template: dict[tuple[str, int], list[int]] = defaultdict(list)  # template rank -> the ranks it plays
    for (job, r), t in template.items():
        by_template[(job, t)].append(r)
    out: list[Line] = []
    for line in rec.lines:
        e = line.event
        if is_telemetry(e):
            out.append(line)
            node = e.get("node")
            for i in range(1, k_nodes):
                if node not in hot_nodes:
                    out.append(Line(line.arrival, dict(e, node=f"{node}~{i}")))
                if cool_nodes and node == cool_nodes[0]:  # the hot nodes' copies: a healthy node's samples
                    out.extend(Line(line.arrival, dict(e, node=f"{n}~{i}")) for n in sorted(hot_nodes))
            continue
        job, r = e.get("job"), e.get("rank")
        if job not in worlds or r is None:  # another job's or a job-wide event: as it is
            out.append(line)
            continue
        w = worlds[job]
        out.append(Line(line.arrival, dict(e, world_size=w * copies[job])) if "world_size" in e else line)
        for target in by_template.get((job, r), ()):
            for i in range(1, copies[job]):
                node = node_of.get((job, target))
                clone = dict(e, rank=target + i * w)
                if "world_size" in e:
                    clone["world_size"] = w * copies[job]
                if isinstance(node, str):
                    clone["node"] = f"{node}~{i}"
                for f in GROUP_FIELDS:
                    if isinstance(e.get(f), str) and e[f] != "default":
                        clone[f] = f"{e[f]}~{i}"
                if isinstance(e.get("pgs"), dict):
                    clone["pgs"] = {(name if name == "default" else f"{name}~{i}"):
                                    (dict(v, ranks=[x + i * w for x in v["ranks"]])
                                     if isinstance(v, dict) and isinstance(v.get("ranks"), list) else v)
                                    for name, v in e["pgs"].items()}
                out.append(Line(line.arrival, clone))
    return rec.derive(f"world_size({size})", out)


def _shrunk(rec, size, worlds, node_of, hot, hot_nodes) -> Recording:
    role_of: dict[tuple[str, int], str] = {}  # a rank's peer group (a pipeline stage: step events' ``group``)
    for e in rec.events("step"):
        if isinstance(e.get("group"), (str, int)) and not isinstance(e["group"], bool) and e["group"] != "":
            role_of.setdefault((e["job"], e["rank"]), str(e["group"]))
    keep: dict[str, dict[int, int]] = {}
    for job, w in worlds.items():
        first = sorted(hot.get(job, ()))
        if not first:  # a node's fault with no rank named (a link behind it): a rank of that node stays in the job
            first = sorted({n: r for r in reversed(range(w)) if (n := node_of.get((job, r))) in hot_nodes}.values())
        rest = [r for r in range(w) if r not in first and node_of.get((job, r)) not in hot_nodes]
        rest += [r for r in range(w) if r not in first and r not in rest]
        roles = {role_of.get((job, r)) for r in range(w)}
        if len(roles) > 1:  # every role keeps its share, a fault's role a healthy peer at least
            chosen = list(first)
            for role in sorted(roles, key=str):
                members = [r for r in range(w) if role_of.get((job, r)) == role]
                share = max(1, round(size * len(members) / w))
                own = [r for r in first if r in members]
                share = max(share, len(own) + 1) if own else share
                chosen += [r for r in rest if r in members][:share - len(own)]
            chosen.sort()
        else:
            chosen = sorted((first + rest)[:max(size, len(first) + 1)])
        keep[job] = {r: i for i, r in enumerate(chosen)}
    nodes = {node_of[(job, r)] for job, kept in keep.items() for r in kept if (job, r) in node_of}
    out = []
    for line in rec.lines:
        e = line.event
        if is_telemetry(e):
            if e.get("node") in nodes or e.get("node") is None:
                out.append(line)
            continue
        job, r = e.get("job"), e.get("rank")
        if job not in keep or r is None:
            out.append(line)
            continue
        if r not in keep[job]:
            continue
        event = dict(e, rank=keep[job][r])
        if "world_size" in e:
            event["world_size"] = len(keep[job])
        if isinstance(e.get("pgs"), dict):
            event["pgs"] = {name: (dict(v, ranks=[keep[job][x] for x in v["ranks"] if x in keep[job]])
                                   if isinstance(v, dict) and isinstance(v.get("ranks"), list) else v)
                            for name, v in e["pgs"].items()}
        out.append(Line(line.arrival, event))
    ranks = {(job, r): i for job, kept in keep.items() for r, i in kept.items()}
    return rec.derive(f"world_size({size})", out, ranks=ranks)


# -- the node agent (issue 39's method for node telemetry) ---------------------------------------------------

#: A telemetry event's cumulative integer fields (a reset or a slower agent must not read as a new rate): the
#: ``counters`` of a ``link`` sample, a ``gpu`` sample's ECC counts.
GPU_COUNTERS = ("ecc_sbe", "ecc_dbe")
#: A ``gpu`` sample's gauges a slow drift ramps (numbers; the throttle bitmask is set once half-way).
GPU_GAUGES = ("temp", "sm_clock", "power", "util", "sm_active")


def _telemetry_stream(e: dict) -> tuple | None:
    return _stream(e) if is_telemetry(e) and e.get("kind") in ("gpu", "host", "link") and "ts" in e else None


def _counts(e: dict) -> dict[str, int]:
    """A sample's cumulative integer fields by name (``counters/NAME`` for a link's, the field's for a GPU's)."""
    out = {}
    if isinstance(e.get("counters"), dict):
        out.update({f"counters/{k}": v for k, v in e["counters"].items() if isinstance(v, int) and not isinstance(v, bool)})
    for f in GPU_COUNTERS:
        if isinstance(e.get(f), int) and not isinstance(e.get(f), bool):
            out[f] = e[f]
    return out


def _with_counts(e: dict, counts: dict[str, int]) -> dict:
    ev = dict(e)
    if any(k.startswith("counters/") for k in counts):
        ev["counters"] = dict(e["counters"], **{k[9:]: v for k, v in counts.items() if k.startswith("counters/")})
    ev.update({k: v for k, v in counts.items() if not k.startswith("counters/")})
    return ev


def agent_period(rec: Recording, seconds: float) -> Recording:
    """The node agent samples every ``seconds`` (its ``--interval``): a longer period keeps the samples at least
    that far apart (cumulative counters lose no increment: the next sample has them); a shorter one adds samples
    between two, gauges as the one before says, counters interpolated linearly (as a counter read in between would
    have read at a steady rate). Steps, heartbeats, xid and topology events are as they were.

    Invariant: the same verdict (types, culprit, node, cause): a counter's rate per second and a gauge's level
    read the same at any sampling period; the first alert may come one period later."""
    by_stream: dict[tuple, list[int]] = defaultdict(list)
    for i, line in enumerate(rec.lines):
        key = _telemetry_stream(line.event)
        if key is not None:
            by_stream[key].append(i)
    drop: set[int] = set()
    added: list[Line] = []
    for idx in by_stream.values():
        kept = rec.lines[idx[0]]
        for i, j in zip(idx, idx[1:]):
            a, b = rec.lines[i], rec.lines[j]
            gap = b.event["ts"] - a.event["ts"]
            if gap < seconds * 0.999 and b.event["ts"] - kept.event["ts"] < seconds * 0.999:
                drop.add(j)
                continue
            kept = b
            n = int(gap / seconds - 1e-9)
            if n < 1 or gap <= 0:
                continue
            ca, cb = _counts(a.event), _counts(b.event)
            for k in range(1, min(n + 1, 10_000)):
                f = k * seconds / gap
                counts = {name: int(v + (cb[name] - v) * f) if cb.get(name, -1) >= v else v for name, v in ca.items()}
                moved = _moved(a, k * seconds)
                added.append(Line(moved.arrival, _with_counts(dict(moved.event, ts=round(moved.event["ts"], 6)),
                                                                counts)))
    lines = [line for i, line in enumerate(rec.lines) if i not in drop]
    return rec.derive(f"agent_period({seconds:g}s)", _merged(lines, added))


def agent_restart(rec: Recording, at: float | None = None, down: float = 20.0) -> Recording:
    """Every node's agent restarts at ``at`` (default: 60 s after the fault's onset, so the fault spans it; a
    healthy recording half-way): no telemetry for ``down`` seconds, then its counters read from zero (a driver
    reload, ``perfquery -R``: every cumulative counter restarts at the restart's value less what it had).

    Invariant: the same verdict; a reset is no fault (no new alert, no new cause) and a fault across it is kept
    (its culprit, node and cause; its first alert, given before the restart, at the same time)."""
    start, end = rec.span()
    if at is None:
        at = rec.onset + 60.0 if rec.onset is not None else start + (end - start) / 2
    before: dict[tuple, dict[str, int]] = {}
    out = []
    for line in rec.lines:
        e = line.event
        key = _telemetry_stream(e)
        if key is None:
            out.append(line)
            continue
        ts = e["ts"]
        if ts < at:
            before[key] = _counts(e)
            out.append(line)
        elif ts >= at + down:
            zero = before.get(key, {})
            counts = {name: max(0, v - zero.get(name, 0)) for name, v in _counts(e).items()}
            out.append(Line(line.arrival, _with_counts(e, counts)))
    return rec.derive(f"agent_restart({down:g}s down)", out)


def telemetry_delivery(rec: Recording, how: str, seed: int = 0) -> Recording:
    """Node telemetry alone delivered ``how``: ``late`` (a tenth of a node agent's messages held 30 s, its later
    ones queued behind), ``duplicated`` (half sent twice) or ``reordered`` (each node's up to 5 s late, so
    nodes' samples interleave out of time order); step and heartbeat events as they were.

    Invariant: the same verdict (telemetry is keyed by node, its lateness is the agent's link, not a symptom);
    a late sample may delay a telemetry-made alert by its lateness."""
    rng = random.Random(seed)
    tel = lambda line: is_telemetry(line.event)  # noqa: E731
    if how == "late":
        out = _delivered(rec, "telemetry_late(10%,30s)", lambda i, line: 30.0 if tel(line) and rng.random() < 0.1 else 0.0)
        return replace(out, lateness=max(rec.lateness, 30.0))
    if how == "duplicated":
        return _delivered(rec, "telemetry_duplicated(50%)", lambda i, line: 0.0,
                          copies=lambda i, line: 1 if tel(line) and rng.random() < 0.5 else 0)
    if how == "reordered":
        return _delivered(rec, "telemetry_reordered(5s)", lambda i, line: rng.random() * 5.0 if tel(line) else 0.0)
    raise ValueError(f"telemetry_delivery: unknown how {how!r}")


def telemetry_clock(rec: Recording, spread: float, seed: int = 0) -> Recording:
    """Each node's agent stamps its telemetry on a clock off by up to +-``spread`` seconds (the agent's container
    clock, not the training processes'): telemetry times move, step and heartbeat times do not; arrival times (the
    broker's) stay; a recording without them is re-sorted by the stamped times.

    Invariant: the same verdict; telemetry joined to steps by node within its time tolerance still is."""
    rng = random.Random(seed)
    nodes = sorted({e["node"] for e in rec.events() if is_telemetry(e) and isinstance(e.get("node"), str)})
    offset = {n: round((rng.random() * 2 - 1) * spread, 3) for n in nodes}
    out = []
    for line in rec.lines:
        e = line.event
        off = offset.get(e.get("node"), 0.0) if is_telemetry(e) else 0.0
        if not off or "ts" not in e:
            out.append(line)
            continue
        event = dict(e, ts=round(e["ts"] + off, 6))
        out.append(Line(line.arrival if rec.arrival else event["ts"], event))
    what = f"telemetry_clock(+-{spread:g}s)"
    return rec.derive(what, out) if rec.arrival else rec.derive(
        what, _sorted(out), clock_error=max(rec.clock_error, max(map(abs, offset.values()), default=0.0)))


def telemetry_drift(rec: Recording, seconds: float) -> Recording:
    """The telemetry fault comes on over ``seconds`` instead of at once (a GPU heating up as its fan fails, a
    cable's errors growing): from the onset, each telemetry stream that changed there moves linearly from its
    last value before the onset to what the base says over ``seconds`` (gauges: the base's value weighed with
    the last healthy one; the throttle bitmask once half-way; counters: the increase beyond the healthy rate,
    weighed the same, so they stay cumulative). The onset (for the delay) is the drift's end.

    Invariant: the same verdict (types, culprit, node, cause): a fault reached slowly is the same fault."""
    if rec.onset is None:
        return rec.derive(f"telemetry_drift({seconds:g}s)", rec.lines)
    t0 = rec.onset
    last: dict[tuple, dict] = {}
    rate: dict[tuple, dict[str, float]] = {}
    prev_before: dict[tuple, dict] = {}
    for e in rec.events():
        key = _telemetry_stream(e)
        if key is not None and e["ts"] < t0:
            if key in last and e["ts"] > last[key]["ts"]:
                prev_before[key] = last[key]
            last[key] = e
    for key, e in last.items():
        p = prev_before.get(key)
        if p is not None:
            ca, cb = _counts(p), _counts(e)
            dt = e["ts"] - p["ts"]
            rate[key] = {n: max(0.0, (cb[n] - v) / dt) for n, v in ca.items() if n in cb}
    out = []
    for line in rec.lines:
        e = line.event
        key = _telemetry_stream(e)
        if key is None or e["ts"] < t0 or e["ts"] >= t0 + seconds or key not in last:
            out.append(line)
            continue
        w = (e["ts"] - t0) / seconds
        h = last[key]
        ev = dict(e)
        if e.get("kind") == "gpu":
            for f in GPU_GAUGES:
                if isinstance(e.get(f), (int, float)) and isinstance(h.get(f), (int, float)) \
                        and not isinstance(e.get(f), bool):
                    ev[f] = round(h[f] + (e[f] - h[f]) * w, 3)
            if "throttle" in e and w < 0.5:
                ev["throttle"] = h.get("throttle", 0)
        hc, ec, r = _counts(h), _counts(e), rate.get(key, {})
        counts = {}
        for n, v in ec.items():
            if n in hc and v >= hc[n]:
                healthy = hc[n] + r.get(n, 0.0) * (e["ts"] - h["ts"])
                counts[n] = int(min(v, healthy + max(0.0, v - healthy) * w))
        out.append(Line(line.arrival, _with_counts(ev, counts) if counts else ev))
    return rec.derive(f"telemetry_drift({seconds:g}s)", out, onset=t0 + seconds)
