"""Suspected causes of a straggler or hang from node telemetry.

:class:`TelemetryCorrelator` ranks the spikes (models/telemetry/telemetry_tracker.py) near a straggler
or hang alert (same nodes, the rank's own GPU and the NICs nearest to it, within ``window``
seconds of the alert's start) as ``suspected_causes`` (models/telemetry/causes.py); it also remembers
which rank runs on which node and GPU, and each rank's data time (an input-pipeline cause).
"""

from __future__ import annotations

import math
from collections import deque

from ..alert_types import AlertType
from ..alerts import Alert
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
        # job -> rank -> (node, gpu); job -> rank -> recent data_time values
        self._placement: dict[str, dict[int, tuple[str | None, int | None]]] = {}
        # job -> [layout, whether each of its ranks has a data-time ring] of its last whole run of step events
        # (models/steps/layout.py): a run of the same layout changes no placement
        self._last_run: dict[str, list] = {}
        self._data_time: dict[str, dict[int, deque[float]]] = {}

    def observe_step(self, event: StepEvent) -> None:
        self.observe_steps(event.job, [event.rank], [event.node], [event.gpu],
                           [math.nan if event.data_time is None else event.data_time])

    def observe_steps(self, job: str, ranks: list[int], nodes: list, gpus: list, data_times: list[float], *,
                      layout=None) -> None:
        """Where step events of one job ran and their data times, in order (absent data_time: NaN); ``layout``:
        the run's (models/steps/layout.py) when these are a whole run, else None."""
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
                last = self._last_run[job] = [layout, False]
            else:
                self._last_run.pop(job, None)
                last = None
        times = self._data_time.get(job)
        # (a job's rings are only ever added, until the job is forgotten with its last run)
        if times is not None and _all_reported(data_times) and (
                (last is not None and last[1]) or times.keys() >= set(ranks)):
            # every value reported and every rank's ring exists: append in order, all in C
            deque(map(deque.append, map(times.__getitem__, ranks), data_times), maxlen=0)
            if last is not None:
                last[1] = True  # every rank of the run has its ring: no need to check again
            return
        times = None
        for rank, value in zip(ranks, data_times):
            if value == value:  # not NaN: reported
                if times is None:
                    times = self._data_time.setdefault(job, {})
                ring = times.get(rank)
                if ring is None:
                    ring = times[rank] = deque(maxlen=self.data_history)
                ring.append(value)

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

    def data_time_ratio_of(self, job: str, rank: int) -> float | None:
        times = self._data_time.get(job)
        if not times or rank not in times or len(times) < 3:
            return None
        medians = {r: _median(list(ring)) for r, ring in times.items() if ring}
        own = medians.get(rank)
        peers = _median([m for r, m in medians.items() if r != rank])
        if own is None or not peers or peers <= 0:
            return None
        return own / peers

    def suspects(self, alert: Alert, *, at: float | None = None, max_ranks: int = 32) -> list[SuspectedCause]:
        """Ranked suspected causes of ``alert`` (a straggler or hang), best first."""
        t0 = alert.starts_at if at is None else at
        since, until = t0 - self.window, t0 + self.window
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


def _median(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def _all_reported(values) -> bool:
    """No NaN (absent) among ``values`` (floats)."""
    return not any(map(math.isnan, values))
