"""The invariants: what a variant's verdict must share with its base's (issue 39 item 8).

Each returns None when it holds, else one line saying how it broke. A transformation may excuse some
(``Variant.excused``, grid.py): without node telemetry, the alerts made from it and the cause read from it.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable

from .recording import Recording
from .transforms import held_intervals
from .verdict import TELEMETRY_TYPES, Verdict

#: The first alert may come this many times the base's delay (scaled with the step time) after the onset...
DELAY_FACTOR = 2.0
#: ... plus this many of the variant's steps (detection works in whole steps) ...
DELAY_STEPS = 10
#: ... plus, for a hang, this many seconds (a hang's earliest warning has a floor of ~30 s whatever the pace, and
#: the timer's ticks add a few: docs/hang.md).
HANG_FLOOR_S = 45.0


def types_kept(base: Verdict, var: Verdict, base_rec: Recording, var_rec: Recording, excused) -> str | None:
    """Every alert type the base raised is raised by the variant."""
    lost = base.types - var.types - excused
    return f"lost {sorted(lost)}" if lost else None


def no_new_types(base: Verdict, var: Verdict, base_rec: Recording, var_rec: Recording, excused) -> str | None:
    """The variant raises no alert type the base did not (a new one is a false alarm the situation made)."""
    new = var.types - base.types - excused
    return f"new {sorted(new)}" if new else None


def culprit(base: Verdict, var: Verdict, base_rec: Recording, var_rec: Recording, excused) -> str | None:
    """The same primary alert naming the same culprit ranks (renumbered as the variant says) on the same node."""
    if base.primary is None or base.primary in excused:
        return None
    if var.primary != base.primary:
        return f"primary {var.primary} (base {base.primary})"
    want = frozenset(var_rec.rank_of(base.job or "", r) for r in base.culprits)
    # Several culprits found at once are alerts in rank order: any of them may come first where all are named.
    every = frozenset(var_rec.rank_of(base.job or "", r) for r in base.all_culprits)
    reordered = bool(every) and var.all_culprits == every and var.culprits <= every
    if var.culprits != want and not reordered:
        return f"culprits {sorted(var.culprits)[:8]} (base {sorted(want)[:8]})"
    nodes = {var_rec.node_of(n) for n in base.all_nodes}
    if base.node is not None and var.node != var_rec.node_of(base.node) and not (reordered and var.node in nodes):
        return f"node {var.node} (base {var_rec.node_of(base.node)})"
    return None


def cause(base: Verdict, var: Verdict, base_rec: Recording, var_rec: Recording, excused) -> str | None:
    """The primary alert's first suspected cause is of the same category."""
    if "cause" in excused or base.primary is None or var.primary != base.primary:
        return None
    return None if var.cause == base.cause else f"cause {var.cause} (base {base.cause})"


#: A host's clock offset from the broker's is read from the quickest deliveries of its step events (this quantile of
#: arrival minus stamp: a delivery lag is never negative, the quickest are near 0).
QUICKEST = 0.01


def _host_offsets(rec: Recording) -> dict:
    """Each node's clock offset from the arrival clock (the broker's), read from its step events' quickest deliveries
    (``QUICKEST``); {} without arrival times."""
    lags: dict = defaultdict(list)
    if rec.arrival:
        for line in rec.lines:
            e = line.event
            if e.get("kind") == "step" and isinstance(e.get("ts"), (int, float)):
                lags[e.get("node")].append(line.arrival - e["ts"])
    return {node: -sorted(v)[int(QUICKEST * (len(v) - 1))] for node, v in lags.items()}


#: A step closes without a rank once half its job's ranks reported a step this many newer (the step assembly's lag,
#: models/steps/settings.py ``max_lag_steps``): a stalled producer's events that come after are lost to it.
CLOSE_LAG = 3


def whole_steps(rec: Recording, job: str | None) -> list[tuple[int, float]] | None:
    """Each step after the onset that the worker could judge whole, with its seconds from the onset, in step order:
    every rank's event of it arrived before half the job's ranks had reported a step ``CLOSE_LAG`` newer (the step's
    time the median of its ranks' stamps, on the onset's clock: ``_host_offsets``). None without arrival times.

    A late producer's stall holds its events past that and the steps close without them; stalls chained across
    producers (one rank's queue arriving while another's is held) leave no whole step for longer than any one stall
    (gen2:straggler-2-ranks / late 1% by 30s: the first 6 whole steps in a row 33 s after the onset, four stalls of its
    2 ranks, three whole steps twice between)."""
    if not rec.arrival or rec.onset is None:
        return None
    offsets = _host_offsets(rec)
    arrived: dict[int, list[float]] = defaultdict(list)
    stamps: dict[int, list[float]] = defaultdict(list)
    ranks = set()
    for line in rec.lines:
        e = line.event
        if e.get("kind") == "step" and e.get("job") == job and isinstance(e.get("step"), int) \
                and isinstance(e.get("ts"), (int, float)):
            arrived[e["step"]].append(line.arrival)
            stamps[e["step"]].append(e["ts"] - offsets.get(e.get("node"), 0.0))
            ranks.add(e.get("rank"))
    half = (len(ranks) + 1) // 2
    out = []
    for step in sorted(arrived):
        when = statistics.median(stamps[step])
        if when < rec.onset or len(arrived[step]) < len(ranks):
            continue
        newer = sorted(arrived.get(step + CLOSE_LAG, ()))
        if len(newer) < half or max(arrived[step]) <= newer[half - 1]:
            out.append((step, when - rec.onset))
    return out


#: A message is held (a producer's stall) where it arrived this many seconds after its stamp (the onset's clock).
HELD_S = 2.0


def stalled_until(rec: Recording, job: str | None, within: float = 0.0) -> float:
    """Seconds from the onset to the end of the stalls chained from it: the union of the job's held step events'
    spans (stamp to arrival, ``HELD_S``) reached from the onset's first ``within`` seconds (the evidence the base
    judged), one stall's queue arriving while another producer's is held (0: none held there)."""
    if not rec.arrival or rec.onset is None:
        return 0.0
    offsets = _host_offsets(rec)
    spans = sorted((e["ts"] - offsets.get(e.get("node"), 0.0), line.arrival) for line in rec.lines
                   if (e := line.event).get("kind") == "step" and e.get("job") == job
                   and isinstance(e.get("ts"), (int, float))
                   and line.arrival - (e["ts"] - offsets.get(e.get("node"), 0.0)) > HELD_S)
    end = rec.onset
    for a, b in spans:
        if a > max(end, rec.onset + within):
            break
        end = max(end, b)
    return end - rec.onset


def evidence_at(steps: list[tuple[int, float]], need: int) -> float | None:
    """Seconds from the onset to the end of the first run of ``need`` consecutive whole steps (``whole_steps``: the
    evidence a rule judging a window of steps had in the base), else to the last whole step; None: none."""
    run = 0
    for i, (step, when) in enumerate(steps):
        run = run + 1 if i and step == steps[i - 1][0] + 1 else 1
        if run >= need:
            return when
    return steps[-1][1] if steps else None


def stamp_offset(rec: Recording, at: float) -> float:
    """How far the clock that stamped an alert at ``at`` runs ahead of the recording's arrival clock (the broker's,
    the onset's), seconds: an alert named at a step is stamped with a rank's end of it (the upper median of its ranks'),
    on that rank's host's clock (``_host_offsets``). 0 without arrival times, or where no step event carries that
    stamp (a hang's tick, an alert time put on the broker's clock: models/alert_clock.py)."""
    if not rec.arrival:
        return 0.0
    node = next((line.event.get("node") for line in rec.lines if line.event.get("kind") == "step"
                 and isinstance(line.event.get("ts"), (int, float)) and abs(line.event["ts"] - at) < 1e-6), None)
    return 0.0 if node is None else _host_offsets(rec).get(node, 0.0)


def delay(base: Verdict, var: Verdict, base_rec: Recording, var_rec: Recording, excused) -> str | None:
    """The first alert of the primary type comes after the onset within ``DELAY_FACTOR`` x the base's delay
    scaled with the step time (+ ``DELAY_STEPS`` steps, + ``HANG_FLOOR_S`` for a hang).

    When time speeds up, the part of the base's delay that was delivery lag (``Recording.delivery_lag``, at most
    the delay) keeps its wall-clock length: the step that names the fault is judged once its ranks' events reach
    the worker, and producers' flushes and the broker take as long at 20 ms steps as at 1 s steps (time_scale keeps
    the lag); only detection's steps shrink. So does a marked checkpoint or a stop in the delay (the storage's or
    the fault's time).
    Slowing down scales the whole delay (the lag and the checkpoint are then the smaller part).
    Both delays are read on the onset's clock (the broker's): an alert stamped on a host's clock that runs ahead or
    behind has that host's offset taken out (``stamp_offset``), which time_scale keeps at its wall-clock length and
    which is no part of the delay to scale."""
    if (base.primary is None or var.primary != base.primary or base_rec.onset is None or var_rec.onset is None
            or base.first_at is None or var.first_at is None):
        return None
    s = var_rec.scale / base_rec.scale
    was = max(0.0, base.first_at - stamp_offset(base_rec, base.first_at) - base_rec.onset)
    took = var.first_at - stamp_offset(var_rec, var.first_at) - var_rec.onset
    lag = min(was, base_rec.delivery_lag()) if s < 1 else 0.0
    # (a marked checkpoint or a stop between the onset and the alert kept its wall-clock length too: time_scale)
    kept = min(was - lag, sum(max(0.0, min(b, base.first_at) - max(a, base_rec.onset))
                              for a, b in held_intervals(base_rec))) if s < 1 else 0.0
    allowed = (DELAY_FACTOR * (s * (was - lag - kept) + lag + kept) + DELAY_STEPS * var_rec.step_time()
               + (HANG_FLOOR_S if base.primary == "hang" else 0))
    # (no broker clock: the hosts' times are all there is; a late producer's events reach the worker that late: by
    # as far as the first step judged whole after the onset moved, else by one stall)
    late = var_rec.lateness
    if late:
        # (as many whole steps after the onset as the base had judged by its alert: when the variant had them)
        had, got = whole_steps(base_rec, base.job), whole_steps(var_rec, var.job)
        need = max(1, sum(1 for _, x in had or () if x <= was))
        before, after = evidence_at(had or [], need), evidence_at(got or [], need)
        if before is not None and after is not None:
            # (never less than one stall, never more than the stalls chained from the onset held the job's events)
            late = max(late, min(after - before, stalled_until(var_rec, var.job, was)))
    allowed += var_rec.clock_error + late
    return None if took <= allowed else f"first {base.primary} {took:.1f} s after the onset > {allowed:.1f} s " \
                                        f"(base {was:.1f} s, x{s:g} time)"


def warning_first(base: Verdict, var: Verdict, base_rec: Recording, var_rec: Recording, excused) -> str | None:
    """Every hang warns before it is critical: no more hang incidents open critical (no warning before) than in the
    base (a base that already does is its own failure: test_metamorphic.py checks the bases)."""
    more = len(var.critical_first) - len(base.critical_first)
    return f"{len(var.critical_first)} hang(s) critical first (base {len(base.critical_first)})" if more > 0 else None


def quiet_jobs(base: Verdict, var: Verdict, base_rec: Recording, var_rec: Recording, excused) -> str | None:
    """Healthy jobs the variant added beside the base's (noise.bystanders) get no alert."""
    loud = var.jobs & var_rec.quiet_jobs
    return f"alerts for added jobs {sorted(loud)[:4]}" if loud else None


INVARIANTS: dict[str, Callable[..., str | None]] = {
    "types_kept": types_kept, "no_new_types": no_new_types, "culprit": culprit, "cause": cause, "delay": delay,
    "warning_first": warning_first, "quiet_jobs": quiet_jobs,
}

#: What dropping node telemetry may change: the alerts made from it and the cause read from it.
WITHOUT_TELEMETRY = TELEMETRY_TYPES | {"cause"}


def check(base: Verdict, var: Verdict, base_rec: Recording, var_rec: Recording,
          excused: frozenset[str] = frozenset()) -> dict[str, str]:
    """The invariants that broke: name -> how."""
    out = {}
    for name, fn in INVARIANTS.items():
        why = fn(base, var, base_rec, var_rec, excused)
        if why is not None:
            out[name] = why
    return out
