"""Per-host clock offsets of one job, estimated from its own step events.

Clocks of different hosts disagree (broken NTP: seconds). In synchronous training every rank
leaves a step's last collective at the same instant, so the ranks' step-end timestamps of one
step differ by each host's clock offset (plus milliseconds). :class:`ClockOffsets` keeps, per
step, each node's earliest step-end time; once a step is old (``max_open`` newer steps seen) and
``min_nodes`` nodes reported it, each node's deviation from the median node is one sample of its
offset, and the node's offset is the median of its last ``history`` samples (a straggler or a
late event cannot move it). Offsets below ``min_offset`` are taken as 0.

Rules that compare timestamps written by different hosts (the hang rule: silence, stuck ranks,
the job's progress) subtract the writer's offset first, which puts every host on the job's
median clock. A job that sends no step events (heartbeats only) gets no estimate.

:func:`source_offsets` is the same estimate over whole recordings (one per rank or node): ``stepwatch replay``
and ``publish`` take each file's offset off its event times before merging the files by time
(stepwatch/recording.py ``merge_lines``), so a host whose clock is ahead is not merged steps late.
"""

from __future__ import annotations

import numpy as np

from .robust import median


class ClockOffsets:
    def __init__(self, *, min_nodes: int = 3, history: int = 16, max_open: int = 4, min_offset: float = 0.25) -> None:
        self.min_nodes = min_nodes
        self.history = history
        self.max_open = max_open
        self.min_offset = min_offset
        self._ends: dict[int, dict[str, float]] = {}  # step -> node -> earliest step end
        self._closed = -1
        # Each node's last ``history`` deviations, a row per node (ring order: the median does not care), so
        # a closed step's medians over the nodes whose history is full are one sort of rows.
        self._row: dict[str, int] = {}  # node -> its row
        self._ring = np.zeros((0, history))
        self._count = np.zeros(0, dtype=np.int64)  # deviations written to each row so far
        #: node -> seconds its clock is ahead of the job's median node (only those beyond ``min_offset``)
        self.offsets: dict[str, float] = {}
        # (layout, where each run of one node starts, the runs' nodes) of the latest big run of one step
        # (models/steps/layout.py): the next step's ranks are on the same nodes
        self._node_runs: tuple[object, np.ndarray, list] | None = None
        # (nodes, their rows as an array) of the latest closed step: the next one usually has the same nodes
        self._rows_of: tuple[list[str], np.ndarray] | None = None

    def observe(self, node: str | None, step: int, ts: float) -> None:
        if node is None:
            return
        if step <= self._closed:
            if step + 4 * self.max_open >= self._closed:
                return  # a late event of a step already judged
            self._ends.clear()  # the job restarted from an earlier step
            self._closed = -1
        ends = self._ends.get(step)
        if ends is None:
            ends = self._ends[step] = {}
            while len(self._ends) > self.max_open:
                self._close(min(self._ends))
        prev = ends.get(node)
        if prev is None or ts < prev:
            ends[node] = ts

    def observe_many(self, nodes, steps, ts, layout=None, ts_array=None, one_step: bool | None = None) -> None:
        """``observe`` for events in order; ``layout``: the run's (models/steps/layout.py) when ``nodes`` are its, else
        None; ``ts_array``: ``ts`` as a float64 array, or None; ``one_step``: whether all ``steps`` are one, or None."""
        n = len(steps)
        if one_step is None:
            one_step = n > 1 and steps[0] == steps[-1] and (n == 2 or min(steps) == max(steps))
        if n > 1 and one_step:
            # One step's ranks (the usual column run): one bookkeeping call, then a plain min per node;
            # the same result as observing them one by one, at a fraction of the cost.
            first = 0
            while first < n and nodes[first] is None:
                first += 1
            if first == n:
                return
            step = steps[0]
            self.observe(nodes[first], step, ts[first])
            ends = self._ends.get(step)
            if ends is None:  # a late event of a step already judged: so are the others
                return
            get = ends.get
            pairs = zip(nodes, ts)
            if n >= 64:  # ranks of a node come together: each run of one node's events by its minimum
                runs = self._node_runs
                if layout is None or runs is None or runs[0] is not layout:
                    names = np.array(nodes, dtype=object)
                    starts = np.flatnonzero(np.concatenate(([True], names[1:] != names[:-1])))
                    runs = self._node_runs = (layout, starts, names[starts].tolist())
                _, starts, names = runs
                if len(starts) * 4 <= n:
                    values = np.asarray(ts, dtype=np.float64) if ts_array is None else ts_array
                    pairs = zip(names, np.minimum.reduceat(values, starts).tolist())
            for node, t in pairs:
                if node is not None:
                    prev = get(node)
                    if prev is None or t < prev:
                        ends[node] = t
            return
        if n < 8:
            for node, step, t in zip(nodes, steps, ts):
                self.observe(node, step, t)
            return
        # Several steps (a replay's merged lines: arrival order, a step's ranks mostly together): each run of one
        # step as above, the same result as event by event.
        lo = 0
        while lo < n:
            step, hi = steps[lo], lo + 1
            while hi < n and steps[hi] == step:
                hi += 1
            if hi - lo > 1:
                self.observe_many(nodes[lo:hi], steps[lo:hi], ts[lo:hi], None,
                                  None if ts_array is None else ts_array[lo:hi], True)
            else:
                self.observe(nodes[lo], step, ts[lo])
            lo = hi

    def _close(self, step: int) -> None:
        ends = self._ends.pop(step)
        self._closed = max(self._closed, step)
        if len(ends) < self.min_nodes:
            return
        values = np.fromiter(ends.values(), dtype=np.float64, count=len(ends))
        mid = median(values)  # (the same float as the middle of the sorted values)
        nodes = list(ends)
        memo = self._rows_of
        if memo is not None and memo[0] == nodes:  # the nodes of the step before, in its order (the usual step)
            idx = memo[1]
        else:
            rows = [self._row.get(node) for node in nodes]
            if None in rows:
                for i, node in enumerate(nodes):
                    if rows[i] is None:
                        rows[i] = self._row[node] = self._new_row()
            idx = np.array(rows, dtype=np.int64)
            self._rows_of = (nodes, idx)
        h = self.history
        self._ring[idx, self._count[idx] % h] = values - mid
        self._count[idx] += 1
        counts = self._count[idx]
        full = counts >= h
        if full.all():  # the usual step: every row full, their medians at once without the masks (the same floats)
            ordered = np.sort(self._ring[idx], axis=1)
            offsets = ordered[:, h // 2] if h % 2 else (ordered[:, h // 2 - 1] + ordered[:, h // 2]) / 2
        else:
            offsets = np.empty(len(idx))
            if full.any():  # the median of each full row at once
                ordered = np.sort(self._ring[idx[full]], axis=1)
                offsets[full] = ordered[:, h // 2] if h % 2 else (ordered[:, h // 2 - 1] + ordered[:, h // 2]) / 2
            for i in np.flatnonzero(~full).tolist():  # a node's first few steps
                offsets[i] = _median(sorted(self._ring[idx[i], :counts[i]].tolist()))
        beyond = np.abs(offsets) >= self.min_offset
        if not self.offsets and not beyond.any():
            return  # (the usual case: no clock off, none was: nothing to set or drop)
        for node, offset, big in zip(ends, offsets.tolist(), beyond.tolist()):
            if big:
                self.offsets[node] = offset
            else:
                self.offsets.pop(node, None)

    def _new_row(self) -> int:
        row = len(self._row)
        if row >= len(self._count):
            grow = max(8, len(self._count))
            self._ring = np.concatenate([self._ring, np.zeros((grow, self.history))])
            self._count = np.concatenate([self._count, np.zeros(grow, dtype=np.int64)])
        return row

    def offset(self, node: str | None) -> float:
        return self.offsets.get(node, 0.0) if node is not None else 0.0


def _median(ordered: list[float]) -> float:
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def source_offsets(step_ends: list[dict[tuple[str, int], float]], *, step_time: float) -> list[float]:
    """Each source's clock offset (seconds ahead of the sources' median), from its step-end times.

    ``step_ends[i]`` maps ``(job, step)`` to source ``i``'s earliest step-end time of that step (a source: one
    rank's or node's recording). The estimate is :class:`ClockOffsets`'s: per step reported by at least two
    sources, each source's deviation from their median; per source, the median of its deviations. An offset
    under half the job's ``step_time`` is taken as 0: ranks of a pipeline's stages end a step up to a bubble
    apart, and less than a step does not put a step's events out of place. A source that shares no step with
    another (telemetry only) gets 0.
    """
    deviations: list[list[float]] = [[] for _ in step_ends]
    keys: dict[tuple[str, int], None] = {}
    for ends in step_ends:
        keys.update(dict.fromkeys(ends))
    for key in keys:
        present = [(i, ends[key]) for i, ends in enumerate(step_ends) if key in ends]
        if len(present) < 2:
            continue
        mid = _median(sorted(t for _, t in present))
        for i, t in present:
            deviations[i].append(t - mid)
    floor = step_time / 2 if step_time == step_time else 0.0
    out = []
    for devs in deviations:
        offset = _median(sorted(devs)) if devs else 0.0
        out.append(offset if abs(offset) >= floor else 0.0)
    return out
