"""Status views of what the detection engine knows: pure functions over the engine and a recorder.

The worker's web server (streams/web.py) serves these as JSON (``/jobs``, ``/jobs/{job}``,
``/jobs/{job}/heatmap``) and the dashboard draws the heatmap view. Nothing here touches
Kafka or Faust, so every view is unit-testable by feeding events to an engine.

``StatusRecorder`` keeps what the engine does not need for detection but an operator
wants to see, all of it bounded:

* per rank: latest step, latest event time, node, group, phase (columns with a slot per rank: a batch
  envelope of one step is a few list writes, not an object update per event);
* per job: the last ``history`` steps' completion time and token count (step-rate line,
  tokens/s), and the last ``history`` judged steps' compute-time ratio to the peer median
  for every rank (the heatmap), taken from the straggler detectors' verdicts through
  ``DetectionEngine.verdict_listener``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .alerts import Alert
from .wire.events import Event, HeartbeatEvent, PhaseEvent, StepEvent
from .wire.step_columns import StepColumns
from .wire.telemetry_events import TELEMETRY_KINDS

#: Seconds of recent steps the step rate and tokens/s are computed over.
RATE_WINDOW_SECONDS = 30.0
#: Steps each point of the step-rate line is averaged over.
RATE_POINTS = 5


def _part(column: list, lo: int, hi: int, whole: bool) -> list:
    """``column[lo:hi]``; the column itself when that is all of it (no copy)."""
    return column if whole else column[lo:hi]


class _Rank:
    """One rank's latest values: a view of its slot in the job's ``_RankTable`` (reads and writes go there)."""

    __slots__ = ("_t", "_s")

    def __init__(self, table: "_RankTable", slot: int) -> None:
        self._t, self._s = table, slot

    step = property(lambda self: self._t.step[self._s], lambda self, v: self._t.step.__setitem__(self._s, v))
    ts = property(lambda self: self._t.ts[self._s], lambda self, v: self._t.ts.__setitem__(self._s, v))
    node = property(lambda self: self._t.node[self._s], lambda self, v: self._t.node.__setitem__(self._s, v))
    group = property(lambda self: self._t.group[self._s], lambda self, v: self._t.group.__setitem__(self._s, v))
    phase = property(lambda self: self._t.phase[self._s], lambda self, v: self._t.phase.__setitem__(self._s, v))


class _RankTable:
    """Per rank of one job: latest step, latest event time, node, group, phase, in columns (a slot per rank, in
    the order ranks were first seen), so that a batch of one step of many ranks is a few list writes instead
    of a record update per event. Reads like ``{rank: _Rank}``."""

    __slots__ = ("slot", "step", "ts", "node", "group", "phase", "_run")

    def __init__(self) -> None:
        self.slot: dict[int, int] = {}  # rank -> its slot
        self.step: list[int] = []
        self.ts: list[float] = []
        self.node: list[str | None] = []
        self.group: list[str | None] = []
        self.phase: list[str | None] = []
        # (layout, its ranks' slots, the first slot if they are consecutive, else None) of the latest batch
        # (models/steps/layout.py): the next step's batch has the same layout (a rank's slot never changes)
        self._run: tuple[object, list[int], int | None] | None = None

    def __len__(self) -> int:
        return len(self.slot)

    def __iter__(self):
        return iter(self.slot)

    def __contains__(self, rank) -> bool:
        return rank in self.slot

    def get(self, rank: int) -> _Rank | None:
        slot = self.slot.get(rank)
        return None if slot is None else _Rank(self, slot)

    def items(self):
        return [(rank, _Rank(self, slot)) for rank, slot in self.slot.items()]

    def add(self, rank: int) -> int:
        slot = self.slot[rank] = len(self.step)
        self.step.append(-1)
        self.ts.append(0.0)
        self.node.append(None)
        self.group.append(None)
        self.phase.append(None)
        return slot

    def slots(self, ranks: list[int]) -> list[int]:
        """The slots of ``ranks`` (new ranks get one, in order)."""
        slots = list(map(self.slot.get, ranks))
        if None in slots:
            for i, slot in enumerate(slots):
                if slot is None:
                    slots[i] = self.slot.get(ranks[i])
                    if slots[i] is None:
                        slots[i] = self.add(ranks[i])
        return slots

    def observe_steps(self, ranks, steps, ts, nodes, phases, groups, layout=None, ts_array=None) -> None:
        """Step events of this job in order (columns); ``layout``: who reported them (models/steps/layout.py), or
        None; ``ts_array``: ``ts`` as a float array, when the batch has one."""
        run = self._run
        if layout is None or run is None or run[0] is not layout:
            slots = self.slots(ranks)
            n, first = len(slots), slots[0]
            run = self._run = (layout, slots, first if n >= 16 and slots == list(range(first, first + n)) else None)
        slots, first = run[1], run[2]
        n = len(slots)
        if first is not None:
            # Consecutive slots, so each rank once (the usual envelope: one step of many ranks): whole-column
            # writes, the same values as event by event.
            span = slice(first, first + n)
            if ts_array is None:
                ts_array = np.array(ts, dtype=np.float64)
            # The usual next step is later, and further on, than all the ranks' last: then the new column is the
            # result as it is (no list -> array -> list round trip); else element by element, as arrays.
            old_ts, old_steps = self.ts[span], self.step[span]
            if float(ts_array.min()) > max(old_ts):
                self.ts[span] = ts
            else:
                self.ts[span] = np.maximum(np.array(old_ts), ts_array).tolist()
            if min(steps) > max(old_steps):
                self.step[span] = steps
            else:
                cur, new = np.array(old_steps, dtype=np.int64), np.array(steps, dtype=np.int64)
                self.step[span] = np.where((new > cur) | (new < cur - 1000), new, cur).tolist()
            self.phase[span] = phases
            for column, values in ((self.node, nodes), (self.group, groups)):
                if None not in values:
                    column[span] = values
                elif values.count(None) != n:
                    for slot, value in zip(slots, values):
                        if value is not None:
                            column[slot] = value
            return
        step_of, ts_of, node_of, group_of, phase_of = self.step, self.ts, self.node, self.group, self.phase
        for slot, step, t, node, phase, group in zip(slots, steps, ts, nodes, phases, groups):
            if t > ts_of[slot]:
                ts_of[slot] = t
            if node is not None:
                node_of[slot] = node
            old = step_of[slot]
            if step > old or step < old - 1000:  # a restart goes back far
                step_of[slot] = step
            phase_of[slot] = phase
            if group is not None:
                group_of[slot] = group


class _Job:
    __slots__ = ("ranks", "steps", "ratios")

    def __init__(self) -> None:
        self.ranks = _RankTable()
        self.steps: dict[int, list] = {}  # step -> [latest end time, tokens or None, samples or None]
        self.ratios: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}  # step -> [(ranks, ratio)] per group


class StatusRecorder:
    """Bounded per-job, per-rank status kept next to the engine; ``attach`` it, then ``observe`` every event."""

    def __init__(self, history: int = 60) -> None:
        self.history = max(2, int(history))
        self.jobs: dict[str, _Job] = {}

    def attach(self, engine) -> "StatusRecorder":
        """Receive the straggler detectors' verdicts of ``engine`` (set before it creates detectors)."""
        engine.verdict_listener = self.record_verdict
        return self

    def _job(self, job: str) -> _Job:
        state = self.jobs.get(job)
        if state is None:
            state = self.jobs[job] = _Job()
        return state

    def observe(self, event: Event) -> None:
        """One job event; node telemetry (no job, no rank) has no place in these views and is passed over."""
        if isinstance(event, StepEvent):  # one step path: a lone step event is a batch of one
            self.observe_steps(StepColumns.of([event]))
            return
        if event.kind in TELEMETRY_KINDS:  # keyed by node: the engine's telemetry hub keeps it
            return
        job = self._job(event.job)
        if isinstance(event, PhaseEvent):
            if event.rank is not None:
                self._rank(job, event.rank, event.ts).phase = event.phase
            return
        rank = self._rank(job, event.rank, event.ts)
        if event.node is not None:
            rank.node = event.node
        if isinstance(event, HeartbeatEvent):
            if event.step > rank.step:
                rank.step = event.step
            if event.phase is not None:
                rank.phase = event.phase

    def observe_steps(self, cols, layouts: dict | None = None) -> None:
        """``observe`` for step events, by columns (:class:`~stepwatch.models.wire.step_columns.StepColumns`);
        ``layouts``: its job runs' (``DetectionEngine.layouts``), or None."""
        for name, lo, hi in cols.job_runs():
            job = self._job(name)
            whole = lo == 0 and hi == len(cols)  # the batch's own lists then (nothing here changes them)
            run_steps, run_ts = _part(cols.step, lo, hi, whole), _part(cols.ts, lo, hi, whole)
            ts_array = cols.array("ts")[lo:hi] if hi - lo >= 16 else None
            job.ranks.observe_steps(_part(cols.rank, lo, hi, whole), run_steps, run_ts, _part(cols.node, lo, hi, whole),
                                    _part(cols.phase, lo, hi, whole), _part(cols.group, lo, hi, whole),
                                    None if layouts is None else layouts.get((lo, hi)), ts_array)
            # Per step: latest end time and token/sample sums, one run of equal steps at a time.
            steps, ts, tokens, samples = cols.step, cols.ts, cols.tokens, cols.samples
            if run_steps.count(steps[lo]) == hi - lo:  # one step throughout (the usual envelope)
                if hi - lo >= 16:  # summed as arrays: the batch's own
                    tokens, samples = cols.array("tokens"), cols.array("samples")
                self._step_run(job, steps[lo], run_ts, tokens[lo:hi], samples[lo:hi], ts_array)
                continue
            start = lo
            for i in range(lo + 1, hi + 1):
                if i < hi and steps[i] == steps[start]:
                    continue
                self._step_run(job, steps[start], ts[start:i], tokens[start:i], samples[start:i])
                start = i

    def _step_run(self, job: _Job, step: int, ts: list[float], tokens, samples, ts_array=None) -> None:
        """``_step`` for consecutive events of one step (NaN: not reported); sums add in the same order. ``tokens``
        and ``samples``: lists, or arrays when there are 16 or more; ``ts_array``: ``ts`` as an array, or None."""
        steps = job.steps
        entry = steps.get(step)
        if entry is None:
            if len(steps) >= self.history and step < min(steps):
                return  # older than everything kept
            entry = steps[step] = [ts[0], None, None]
            while len(steps) > self.history:
                del steps[min(steps)]
        latest = max(ts) if ts_array is None else float(ts_array.max())
        if latest > entry[0]:
            entry[0] = latest
        for k, values in ((1, tokens), (2, samples)):
            if len(values) < 16:
                total = entry[k]
                for v in values:
                    if v == v:
                        total = (total or 0.0) + v
                entry[k] = total
                continue
            a = np.asarray(values, dtype=np.float64)
            reported = a[a == a]
            if len(reported):
                # In order, one addition at a time, as the loop above (``total or 0.0``: a total is never -0.0):
                # an accumulate is a left-to-right sum in C (a pairwise np.sum would round differently)
                total = entry[k]
                entry[k] = float(np.add.accumulate(np.concatenate(([total if total else 0.0], reported)))[-1])

    @staticmethod
    def _rank(job: _Job, rank: int, ts: float) -> _Rank:
        table = job.ranks
        slot = table.slot.get(rank)
        if slot is None:
            slot = table.add(rank)
        if ts > table.ts[slot]:
            table.ts[slot] = ts
        return _Rank(table, slot)

    def record_verdict(self, detector, verdict) -> None:
        """``StragglerDetector.on_verdict`` hook: keep this step's ratio of every rank."""
        ratios = self._job(detector.job).ratios
        row = (np.asarray(verdict.ranks, dtype=np.int64).copy(), np.asarray(verdict.ratio, dtype=np.float32))
        if verdict.step in ratios:
            # Another group's verdict for the same step (pipeline stages), or a restarted job.
            ratios[verdict.step] = [r for r in ratios[verdict.step] if not np.isin(r[0], row[0]).any()] + [row]
        else:
            ratios[verdict.step] = [row]
            while len(ratios) > self.history:
                del ratios[min(ratios)]

    def forget(self, job: str) -> None:
        self.jobs.pop(job, None)

    def prune(self, live_jobs) -> None:
        """Forget the jobs the engine no longer holds (it evicts idle and ended jobs)."""
        for job in [j for j in self.jobs if j not in live_jobs]:
            del self.jobs[job]


# -- views ---------------------------------------------------------------------------------------


def _age(now: float, ts: float) -> float | None:
    """Seconds since ``ts`` (0 for a timestamp ahead of ``now``: a sender's clock runs early)."""
    return round(max(0.0, now - ts), 3) if ts else None


def _finite(value: Any, digits: int = 4) -> float | None:
    if value is None:
        return None
    value = float(value)
    return round(value, digits) if math.isfinite(value) else None


def job_alerts(engine, job: str) -> list[Alert]:
    """Open alerts of one job (every rule's, models/registry.py), oldest first."""
    state = engine.jobs.get(job)
    if state is None:
        return []
    return sorted(state.open_alerts(), key=lambda a: (a.starts_at, a.id))


def _rates(recorder: StatusRecorder, job: str) -> tuple[float | None, float | None, float | None]:
    """(steps/s, tokens/s, samples/s) over the last ``RATE_WINDOW_SECONDS`` of steps."""
    state = recorder.jobs.get(job)
    if state is None or len(state.steps) < 2:
        return None, None, None
    steps = sorted(state.steps.items())
    newest_ts = steps[-1][1][0]
    recent = [s for s in steps if s[1][0] >= newest_ts - RATE_WINDOW_SECONDS]
    if len(recent) < 2:
        recent = steps[-2:]
    (s0, e0), (s1, e1) = recent[0], recent[-1]
    span = e1[0] - e0[0]
    if span <= 0:
        return None, None, None
    rate = (s1 - s0) / span
    tokens = [e[1] for _, e in recent[1:] if e[1] is not None]
    samples = [e[2] for _, e in recent[1:] if e[2] is not None]
    return rate, (sum(tokens) / span if tokens else None), (sum(samples) / span if samples else None)


def rate_series(recorder: StatusRecorder, job: str) -> list[dict[str, float]]:
    """The step-rate line: per recent step, steps/s over the ``RATE_POINTS`` steps before it."""
    state = recorder.jobs.get(job)
    if state is None:
        return []
    steps = sorted((s, e[0]) for s, e in state.steps.items())
    out = []
    for i in range(1, len(steps)):
        s0, t0 = steps[max(0, i - RATE_POINTS)]
        s1, t1 = steps[i]
        if t1 > t0:
            out.append({"step": s1, "ts": round(t1, 3), "rate": round((s1 - s0) / (t1 - t0), 4)})
    return out


def jobs_view(engine, recorder: StatusRecorder, now: float) -> list[dict[str, Any]]:
    """``/jobs``: one summary per job this worker holds."""
    return [job_summary(engine, recorder, name, now) for name in sorted(engine.jobs)]


def job_summary(engine, recorder: StatusRecorder, name: str, now: float) -> dict[str, Any]:
    """One job's line in ``/jobs``."""
    state = engine.jobs[name]
    rate, tokens, samples = _rates(recorder, name)
    alerts = job_alerts(engine, name)
    rec = recorder.jobs.get(name)
    return {
        "job": name,
        "ranks": len(rec.ranks) if rec else len(state.ranks),
        "latest_step": state.latest_step,
        "phase": state.phase,
        "ended": state.ended,
        "last_event_age": _age(now, state.last_ts),
        "step_rate": _finite(rate),
        "tokens_per_second": _finite(tokens, 1),
        "samples_per_second": _finite(samples, 2),
        "open_alerts": len(alerts),
        "alerts": [{"id": a.id, "type": a.type, "severity": a.severity, "ranks": list(a.ranks[:16]),
                    "summary": a.summary} for a in alerts],
    }


def _verdicts(state) -> dict[int, tuple[float, float, bool, int, str]]:
    """rank -> (ratio, robust z, slow, step, signal) from each group detector's last verdict."""
    out = {}
    for detector in state.stragglers.values():
        v = detector.last_verdict
        if v is None:
            continue
        for rank, ratio, z, slow in zip(v.ranks.tolist(), v.ratio.tolist(), v.z.tolist(), v.slow.tolist()):
            out[rank] = (ratio, z, slow, v.step, v.signal)
    return out


def job_view(engine, recorder: StatusRecorder, job: str, now: float,
             settings: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """``/jobs/{job}``: per-rank detail and the open alerts with their evidence; None when unknown."""
    state = engine.jobs.get(job)
    if state is None:
        return None
    summary = job_summary(engine, recorder, job, now)
    alerts = job_alerts(engine, job)
    flagged: dict[int, str] = {}
    for alert in alerts:
        for rank in alert.ranks:
            flagged.setdefault(rank, alert.type)
    verdicts = _verdicts(state)
    rec = recorder.jobs.get(job) or _Job()
    ranks = []
    for rank in sorted(set(rec.ranks) | state.ranks):
        r = rec.ranks.get(rank)
        ratio, z, slow, vstep, _ = verdicts.get(rank, (None, None, None, None, None))
        ranks.append({
            "rank": rank,
            "node": r.node if r else None,
            "group": (r.group if r else None) or None,
            "step": r.step if r and r.step >= 0 else None,
            "last_event_age": _age(now, r.ts) if r else None,
            "phase": (r.phase if r and r.phase else None) or state.phase,
            "ratio": _finite(ratio),
            "robust_z": _finite(z, 3),
            "slow": slow,
            "judged_step": vstep,
            "alert": flagged.get(rank),
        })
    detectors = []
    for group, d in sorted(state.stragglers.items()):
        v = d.last_verdict
        detectors.append({"group": group or None, "signal": v.signal if v else None,
                          "judged_step": v.step if v else None, "firing_ranks": sorted(d.firing),
                          "settings": d.settings()})
    out = dict(summary)
    out.update(rank_count=summary["ranks"], ranks=ranks, alerts=[a.to_dict() for a in alerts], detectors=detectors)
    if hasattr(engine, "job_sli"):
        out["sli"] = engine.job_sli(job)  # effective-compute SLIs (models/jobhealth/sli.py)
    if settings is not None:
        out["settings"] = settings
    return out


def heatmap_view(engine, recorder: StatusRecorder, job: str, now: float, *, max_rows: int = 256,
                 settings: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The dashboard's data: ranks (or nodes) x recent judged steps of the ratio to the peer median.

    Beyond ``max_rows`` ranks, rows are nodes (the max over the node's ranks, so one slow GPU
    still shows); beyond ``max_rows`` nodes, ranges of consecutive nodes. A row is marked
    when one of its ranks is named by an open alert.
    """
    state = engine.jobs.get(job)
    if state is None:
        return None
    rec = recorder.jobs.get(job) or _Job()
    steps = sorted(rec.ratios)
    ranks = np.asarray(sorted(set(rec.ranks) | state.ranks | {int(r) for s in steps for g in rec.ratios[s]
                                                               for r in g[0]}), dtype=np.int64)
    matrix = np.full((len(ranks), len(steps)), np.nan, dtype=np.float32)
    for col, step in enumerate(steps):
        for group_ranks, ratio in rec.ratios[step]:
            matrix[np.searchsorted(ranks, group_ranks), col] = ratio
    alerts = job_alerts(engine, job)
    marks: dict[int, str] = {}
    for alert in alerts:
        for rank in alert.ranks:
            marks.setdefault(rank, alert.type)

    def node_of(rank: int) -> str:
        r = rec.ranks.get(rank)
        return r.node if r and r.node else f"ranks {rank // 8 * 8}-{rank // 8 * 8 + 7}"

    rows: list[dict[str, Any]] = [{"label": f"rank {r}", "ranks": [int(r)]} for r in ranks.tolist()]
    members: list[np.ndarray] = [np.array([i]) for i in range(len(ranks))]
    level = "rank"
    if len(rows) > max_rows:
        level = "node"
        by_node: dict[str, list[int]] = {}
        for i, rank in enumerate(ranks.tolist()):
            by_node.setdefault(node_of(rank), []).append(i)
        names = list(by_node)  # ranks are sorted, so nodes come in rank order
        members = [np.asarray(by_node[n]) for n in names]
        rows = [{"label": n, "ranks": [int(ranks[m[0]]), int(ranks[m[-1]])]} for n, m in zip(names, members)]
        if len(rows) > max_rows:
            level = "node-range"
            per = math.ceil(len(rows) / max_rows)
            merged_rows, merged_members = [], []
            for start in range(0, len(rows), per):
                chunk = rows[start:start + per]
                merged_members.append(np.concatenate(members[start:start + per]))
                merged_rows.append({"label": f"{chunk[0]['label']}..{chunk[-1]['label']}" if len(chunk) > 1
                                    else chunk[0]["label"], "ranks": [chunk[0]["ranks"][0], chunk[-1]["ranks"][-1]]})
            rows, members = merged_rows, merged_members
    values = []
    for row, idx in zip(rows, members):
        block = matrix[idx]
        with np.errstate(all="ignore"):
            agg = np.nanmax(block, axis=0) if block.shape[0] > 1 else block[0]
        values.append([None if not math.isfinite(v) else round(float(v), 3) for v in agg.tolist()])
        marked = sorted({int(ranks[i]) for i in idx.tolist() if int(ranks[i]) in marks})
        row["marked"] = bool(marked)
        row["marked_ranks"] = marked[:16]
        row["mark"] = marks[marked[0]] if marked else None
    summary = job_summary(engine, recorder, job, now)
    s = engine.straggler_settings(job) if hasattr(engine, "straggler_settings") else engine.settings.straggler
    return {
        "job": job,
        "summary": summary,
        "level": level,
        "rank_count": int(len(ranks)),
        "steps": steps,
        "rows": rows,
        "values": values,
        "thresholds": {"ratio": s.ratio_threshold, "critical": s.critical_ratio},
        "series": rate_series(recorder, job),
        "alerts": [a.to_dict() for a in alerts],
        "settings": settings,
        "now": now,
    }
