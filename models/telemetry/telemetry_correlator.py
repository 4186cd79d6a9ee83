"""Suspected causes of a straggler or hang from node telemetry.

:class:`TelemetryCorrelator` ranks the spikes (models/telemetry/telemetry_tracker.py) near a straggler
or hang alert (same nodes, the rank's own GPU and the NICs nearest to it, within ``window``
seconds of the alert's start) as ``suspected_causes`` (models/telemetry/causes.py); it also remembers
which rank runs on which node and GPU, and each rank's data time (an input-pipeline cause).
"""

from __future__ import annotations

import math

import numpy as np

from ..alert_types import AlertType
from ..alerts import Alert
from ..evidence import StragglerEvidence
from .causes import SuspectedCause
from ..wire.events import StepEvent
from .telemetry_tracker import SpikeEpisode, TelemetryTracker


def _hint(category: str, component: str, label: str, gpu: int | None) -> str:
    if category in ("compute", "application"):
        where = f"GPU {gpu}" if gpu is not None else component
        if "/nvlink" in component:
            where += f" {component.split('/', 1)[1].replace('nvlink', 'NVLink ')}"
            label = label.split(" ", 2)[-1] if label.startswith("NVLink") else label
        return f"{category}: {where} {label}"
    return f"{category}: {component} {label}"


class TelemetryCorrelator:
    """Ranks the spikes near an alert's start on its ranks' nodes, GPUs and nearest NICs."""

    def __init__(self, tracker: TelemetryTracker, *, window: float = 60.0, max_causes: int = 5,
                 data_time_ratio: float = 3.0, data_history: int = 20) -> None:
        self.tracker = tracker
        self.window = window
        self.max_causes = max_causes
        self.data_time_ratio = data_time_ratio
        self.data_history = data_history
        # job -> rank -> (node, gpu); job -> its ranks' recent data_time values
        self._placement: dict[str, dict[int, tuple[str | None, int | None]]] = {}
        # job -> [layout, its ranks' rows in the job's data-time rings when each rank has one and is there once, else
        # None] of its last whole run of step events (models/steps/layout.py): a run of the same layout changes no
        # placement, and its data times are one array write
        self._last_run: dict[str, list] = {}
        self._data_time: dict[str, _DataRings] = {}

    def observe_step(self, event: StepEvent) -> None:
        self.observe_steps(event.job, [event.rank], [event.node], [event.gpu],
                           [math.nan if event.data_time is None else event.data_time])

    def observe_steps(self, job: str, ranks: list[int], nodes: list, gpus: list, data_times, *,
                      layout=None) -> None:
        """Where step events of one job ran and their data times, in order (a list or an array; absent: NaN; None:
        absent in every event); ``layout``: the run's (models/steps/layout.py) when these are a whole run, else None."""
        placement = self._placement.get(job)
        if placement is None:
            placement = self._placement[job] = {}
        last = self._last_run.get(job)
        if layout is None or last is None or last[0] is not layout:
            # (a run of the job's previous layout, the usual next step, finds its ranks where that one put them)
            if None not in nodes:
                placement.update(zip(ranks, zip(nodes, gpus)))  # later events win, as one by one
            else:
                for rank, node, gpu in zip(ranks, nodes, gpus):
                    if node is not None or gpu is not None:
                        placement[rank] = (node, gpu)
            if layout is not None:
                last = self._last_run[job] = [layout, None]
            else:
                self._last_run.pop(job, None)
                last = None
        rings = self._data_time.get(job)
        if data_times is None:  # none reported: what the all-NaN test below finds, without the arrays
            if len(ranks) > 1:
                return
            data_times = [math.nan] * len(ranks)
        if len(ranks) > 1:
            values = np.asarray(data_times, dtype=np.float64)  # (the batch's own array: no copy)
            absent = np.isnan(values)
            if not absent.any() and last is not None and last[1] is not None:
                rings.put(last[1], values)  # every value reported, every rank's ring there: one write
                return
            if absent.all():
                return  # nothing reported
        for rank, value in zip(ranks, data_times):
            if value == value:  # not NaN: reported
                if rings is None:
                    rings = self._data_time[job] = _DataRings(self.data_history)
                rings.append(rank, value)
        if last is not None and rings is not None:
            last[1] = rings.rows_of(ranks)  # (a job's rings are only ever added, until it is forgotten)

    def placements(self) -> dict[str, dict[int, tuple[str | None, int | None]]]:
        """job -> rank -> (node, gpu), as the step events said (read only)."""
        return self._placement

    def job_nodes(self, job: str) -> list[str]:
        """The nodes the job's ranks run on (as their step events said)."""
        return sorted({node for node, _ in self._placement.get(job, {}).values() if node is not None})

    def forget_job(self, job: str) -> None:
        self._placement.pop(job, None)
        self._last_run.pop(job, None)
        self._data_time.pop(job, None)

    def placement(self, job: str, rank: int) -> tuple[str | None, int | None]:
        return self._placement.get(job, {}).get(rank, (None, None))

    def data_times(self, job: str) -> dict[int, list[float]]:
        """rank -> its recent data_time values, oldest first (read only)."""
        rings = self._data_time.get(job)
        return {rank: rings.recent(rank) for rank in rings.row} if rings is not None else {}

    def data_time_ratio_of(self, job: str, rank: int) -> float | None:
        rings = self._data_time.get(job)
        if rings is None or rank not in rings.row or len(rings.row) < 3:
            return None
        medians = {r: _median(rings.recent(r)) for r in rings.row}
        own = medians.get(rank)
        peers = _median([m for r, m in medians.items() if r != rank])
        if own is None or not peers or peers <= 0:
            return None
        return own / peers

    def suspects(self, alert: Alert, *, at: float | None = None, until: float | None = None,
                 max_ranks: int = 32) -> list[SuspectedCause]:
        """Ranked suspected causes of ``alert`` (a straggler or hang), best first: spikes within ``window`` of
        its start ``at``, or up to ``until`` when later (a firing straggler: causes that show while it lasts)."""
        t0 = alert.starts_at if at is None else at
        since, until = t0 - self.window, max(t0 + self.window, until if until is not None else -math.inf)
        ranks = alert.ranks[:max_ranks]
        targets: dict[str, list[int]] = {}  # node -> the ranks' GPUs there
        for node in alert.nodes:
            targets.setdefault(node, [])
        for rank in ranks:
            node, gpu = self.placement(alert.job, rank)
            if node is not None:
                targets.setdefault(node, [])
                if gpu is not None:
                    targets[node].append(gpu)
        causes: list[SuspectedCause] = []
        for node, gpus in targets.items():
            near_ports: set[tuple[str, int]] | None = set()
            for g in gpus:
                ports = self.tracker.nearest_ports(node, g)
                if ports is None:
                    near_ports = None
                    break
                near_ports.update(ports)
            if not gpus:
                near_ports = None
            by_component: dict[str, list[SpikeEpisode]] = {}
            for ep in self.tracker.spikes(node, since, until):
                by_component.setdefault(ep.component, []).append(ep)
            for component, episodes in by_component.items():
                causes.append(self._cause(node, component, episodes, gpus, near_ports, t0))
        if alert.type == AlertType.STRAGGLER:
            for rank in ranks:
                ratio = self.data_time_ratio_of(alert.job, rank)
                if ratio is not None and ratio >= self.data_time_ratio:
                    node, _ = self.placement(alert.job, rank)
                    causes.append(SuspectedCause(
                        category="input_pipeline", node=node, component=f"rank{rank}/data_loader",
                        score=4.0 + min(ratio, 11.0), began_at=None, near_rank=True,
                        hint=f"input pipeline: data_time {ratio:.0f}x peers",
                        evidence=({"signal": "data_time", "ratio_to_peers": round(ratio, 2), "rank": rank},)))
            own = _data_wait_cause(alert, self.placement)
            if own is not None and not any(c.category == "input_pipeline" for c in causes):
                causes.append(own)
        causes.sort(key=lambda c: (-c.score, c.began_at if c.began_at is not None else math.inf, c.component))
        return causes[: self.max_causes]

    def _cause(self, node: str, component: str, episodes: list[SpikeEpisode], gpus: list[int],
               near_ports: set[tuple[str, int]] | None, t0: float) -> SuspectedCause:
        first = episodes[0]
        if first.category == "network":
            near = None if near_ports is None else (first.device, first.port) in near_ports
        else:
            near = None if not gpus else first.gpu in gpus
        locality = 1.0 if near is None else (2.0 if near else (0.6 if first.category == "network" else 0.3))
        scored = []
        for ep in episodes:
            timing = 1.0 if ep.began <= t0 else 0.6  # a cause usually precedes its effect
            magnitude = 1.0 + 0.1 * min(math.log10(1 + max(ep.count, ep.samples)), 5.0)
            scored.append((ep.weight * timing * magnitude, ep))
        scored.sort(key=lambda x: (-x[0], x[1].began))
        best, top = scored[0]
        score = (best + 0.5 * sum(s for s, _ in scored[1:])) * locality
        # The hint names the strongest signal; the evidence lists every signal, strongest first.
        return SuspectedCause(
            category=top.category, node=node, component=component, score=score,
            began_at=min(ep.began for ep in episodes), near_rank=near, gpu=top.gpu, device=top.device,
            port=top.port, hint=_hint(top.category, component, top.label, top.gpu),
            evidence=tuple(ep.to_dict() for _, ep in scored[:8]))


def _data_wait_cause(alert: Alert, placement) -> SuspectedCause | None:
    """The straggler rule's own reading of a data-wait straggler (``evidence.cause: "input pipeline"``) as a cause,
    so that its cause line names the data wait when no telemetry names anything deeper (a wait 2x its peers' is
    below ``data_time_ratio`` yet the whole of the straggler)."""
    ev = StragglerEvidence.of(alert)
    if not ev.input_pipeline or not alert.ranks:
        return None
    rank = alert.ranks[0]
    own, peers = alert.evidence.get("rank_median"), alert.evidence.get("peer_median")
    node = alert.nodes[0] if alert.nodes else placement(alert.job, rank)[0]
    detail: dict = {"signal": "data_time", "rank": rank}
    if isinstance(own, (int, float)) and isinstance(peers, (int, float)):
        hint = f"input pipeline: rank {rank} waits {own:.3g} s for data per step vs {peers:.3g} s for its peers"
        detail.update(data_time=own, peer_data_time=peers)
    else:
        hint = f"input pipeline: rank {rank} waits for its data loader"
    return SuspectedCause(category="input_pipeline", node=node, component=f"rank{rank}/data_loader", score=4.0,
                          began_at=None, near_rank=True, hint=hint, evidence=(detail,))


class _DataRings:
    """One job's ranks' last ``history`` data times: a row per rank (a ring: its values in write order from
    ``count % history`` on), so that a run of step events of known ranks is one array write, not an append
    per event."""

    __slots__ = ("history", "row", "values", "count")

    def __init__(self, history: int) -> None:
        self.history = history
        self.row: dict[int, int] = {}  # rank -> its row, in the order ranks first reported
        self.values = np.zeros((0, history))
        self.count = np.zeros(0, dtype=np.int64)  # values written to each row so far

    def append(self, rank: int, value: float) -> None:
        row = self.row.get(rank)
        if row is None:
            row = self.row[rank] = len(self.row)
            if row >= len(self.count):
                grow = max(16, len(self.count))
                self.values = np.concatenate([self.values, np.zeros((grow, self.history))])
                self.count = np.concatenate([self.count, np.zeros(grow, dtype=np.int64)])
        self.values[row, self.count[row] % self.history] = value
        self.count[row] += 1

    def rows_of(self, ranks: list[int]) -> np.ndarray | None:
        """The rows of ``ranks``, when each has one and none is there twice (so ``put`` is exact), else None."""
        rows = list(map(self.row.get, ranks))
        if None in rows or len(set(rows)) != len(rows):
            return None
        return np.array(rows, dtype=np.int64)

    def put(self, rows: np.ndarray, values: np.ndarray) -> None:
        """``append`` of ``values[i]`` to row ``rows[i]`` for every i (distinct rows)."""
        self.values[rows, self.count[rows] % self.history] = values
        self.count[rows] += 1

    def recent(self, rank: int) -> list[float]:
        """The rank's last ``history`` values (at most), oldest first."""
        row, h = self.row[rank], self.history
        count = int(self.count[row])
        if count <= h:
            return self.values[row, :count].tolist()
        at = count % h
        return self.values[row, at:].tolist() + self.values[row, :at].tolist()


def _median(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2

