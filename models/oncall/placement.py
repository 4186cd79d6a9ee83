"""Which jobs run on which node: the view that attributes node alerts to jobs.

Node alerts (``gpu_fault``, ``link_errors``) come from node telemetry, keyed by node; the
jobs' ranks report their node and GPU in their step events, keyed by job. Each worker sees
its own jobs' step events; workers share what they see through a compacted topic (one record
per job, written by the job's owner: ``snapshot``; read by every worker: ``merge``), so the
worker that publishes a node's alerts can name the jobs on that node even when they live on
other workers.

Times are the jobs' own event times; a node alert is matched against them within
``window`` seconds (minutes), far wider than the clock differences of hosts in one cluster.
"""

from __future__ import annotations

import heapq
from itertools import repeat
from typing import Any

_UNSEEN = object()  # a rank without a last node (never equal to a node)


class PlacementView:
    """job -> node -> (GPUs, ranks, last seen).

    Hyperparameters (keyword-only):

    * ``window``: seconds around a node alert in which a job counts as being on the node;
    * ``max_jobs``: jobs remembered (the least recently seen is forgotten beyond).
    """

    def __init__(self, *, window: float = 300.0, max_jobs: int = 10_000) -> None:
        self.window = window
        self.max_jobs = max_jobs
        # job -> node -> [{rank: gpu or None}, last ts, first ts]
        self._jobs: dict[str, dict[str, list]] = {}
        self._remote: dict[str, dict[str, list]] = {}  # the same, from other workers
        self.changed: set[str] = set()  # jobs whose placement changed since the last snapshot
        self._pairs: dict[str, set] = {}  # job -> (rank, node) pairs seen (the batch path's shortcut)
        # job -> rank -> the node of its last batch, each pair in ``_pairs``: a batch that repeats them all (the
        # usual one) is known by one list comparison, no tuple made or hashed per event
        self._last_node: dict[str, dict[int, str | None]] = {}
        # job -> (layout, set of nodes) of its last batch (models/steps/layout.py): a batch of the same layout (the
        # usual next step) is known by identity, without a lookup per event
        self._last_run: dict[str, tuple[object, set]] = {}
        # Which job to forget at ``max_jobs`` without a scan (issue 44: 20k new jobs took 91 s): a heap of (last ts
        # when pushed, entry number, job), lazily corrected: an entry whose job has been seen since is pushed
        # again with the newer time when it comes to the top, so the top is the least recently seen job.
        self._order: list[tuple[float, int, str]] = []
        self._entry: dict[str, int] = {}  # job -> its valid entry number in ``_order``
        self._entries = 0

    def observe(self, job: str, rank: int, node: str | None, gpu: int | None, ts: float) -> bool:
        """One rank seen on ``node`` (GPU ``gpu``) at ``ts``; True when the rank is new there (or moved GPU)."""
        if not node:
            return False
        nodes = self._jobs.get(job)
        if nodes is None:
            if len(self._jobs) >= self.max_jobs:
                self._forget_oldest()
            nodes = self._jobs[job] = {}
            self._push(job, ts)
        entry = nodes.get(node)
        if entry is None:
            entry = nodes[node] = [{}, ts, ts]
        gpu = None if gpu is None or gpu != gpu else int(gpu)
        ranks = entry[0]
        new = rank not in ranks or ranks[rank] != gpu
        if new:
            ranks[rank] = gpu
            self.changed.add(job)
        if ts > entry[1]:
            if ts - entry[1] > self.window / 4:
                self.changed.add(job)  # refresh the shared copy now and then
            entry[1] = ts
        return new

    def _push(self, job: str, ts: float) -> None:
        self._entries += 1
        self._entry[job] = self._entries
        heapq.heappush(self._order, (ts, self._entries, job))
        if len(self._order) > 2 * len(self._entry) + 1024:  # superseded entries: drop them
            self._order = [e for e in self._order if self._entry.get(e[2]) == e[1]]
            heapq.heapify(self._order)

    def _forget_oldest(self) -> None:
        """Forget the job seen least recently (amortized O(log jobs): each entry is corrected at most once per
        time its job was seen again)."""
        order = self._order
        while order:
            ts, entry, job = heapq.heappop(order)
            nodes = self._jobs.get(job)
            if nodes is None or self._entry.get(job) != entry:
                continue  # forgotten, or superseded
            latest = max((e[1] for e in nodes.values()), default=ts)
            if latest > ts:
                self._push(job, latest)  # seen since: back with its newer time
                continue
            self.forget(job)
            return

    def observe_one(self, job: str, rank: int, node: str | None, gpu: int | None, ts: float) -> bool:
        """``observe`` with the batch path's shortcut: a known (rank, node) pair only refreshes the time."""
        if not node:
            return False
        known = self._pairs.get(job)
        if known is not None and (rank, node) in known:
            entry = self._jobs.get(job, {}).get(node)
            if entry is not None and ts > entry[1]:
                if ts - entry[1] > self.window / 4:
                    self.changed.add(job)
                entry[1] = ts
            return False
        if known is None:
            known = self._pairs[job] = set()
        known.add((rank, node))
        return self.observe(job, rank, node, gpu, ts)

    def observe_run(self, job: str, ranks: list[int], nodes: list, gpus: list, ts: float, layout=None) -> bool:
        """``observe`` for a run of one job's step events at once (the batch path); True when a rank is new
        on a node. Only (rank, node) pairs not seen before are looked at one by one. ``layout``: who reported
        them (models/steps/layout.py), or None."""
        known = self._pairs.get(job)
        if known is None:
            known = self._pairs[job] = set()
        run = self._last_run.get(job)
        if layout is not None and run is not None and run[0] is layout:
            fresh, on = (), run[1]  # the last batch again: every pair known, ``_last_node`` already says so
        else:
            last = self._last_node.get(job)
            if last is not None and list(map(last.get, ranks, repeat(_UNSEEN))) == nodes:
                fresh = ()  # every (rank, node) pair is the rank's last one, so known
            else:
                # Usually every pair is known: a lookup per pair, no set of them built.
                fresh = () if known.issuperset(zip(ranks, nodes)) else set(zip(ranks, nodes)) - known
                if last is None:
                    last = self._last_node[job] = {}
                last.update(zip(ranks, nodes))  # all known once the fresh ones are added below
            on = set(nodes)
            self._last_run[job] = (layout, on)
        new = False
        if fresh:
            for rank, node, gpu in zip(ranks, nodes, gpus):
                if (rank, node) in fresh:
                    new = self.observe(job, rank, node, gpu, ts) or new
            known |= fresh
        entries = self._jobs.get(job)
        if entries:
            for node in on:
                entry = entries.get(node)
                if entry is not None and ts > entry[1]:
                    if ts - entry[1] > self.window / 4:
                        self.changed.add(job)
                    entry[1] = ts
        return new

    def jobs_on(self, node: str, *, at: float, gpu: int | None = None) -> list[dict[str, Any]]:
        """``[{"job", "ranks"}]`` with ranks on ``node`` (on ``gpu`` where known) seen since ``at - window``."""
        out: dict[str, list[int]] = {}
        for source in (self._remote, self._jobs):  # local knowledge wins
            for job, nodes in source.items():
                entry = nodes.get(node)
                if entry is None or entry[1] < at - self.window:
                    continue
                ranks = entry[0]
                if gpu is not None and any(g is not None for g in ranks.values()):
                    chosen = sorted(r for r, g in ranks.items() if g == gpu)
                else:
                    chosen = sorted(ranks)
                if chosen:
                    out[job] = chosen
                else:
                    out.pop(job, None)
        return [{"job": job, "ranks": ranks} for job, ranks in sorted(out.items())]

    def nodes_of(self, job: str, *, before: float | None = None) -> list[str]:
        """The job's nodes; ``before``: only those this worker saw it on before that time (other workers' view has
        no first time: kept whole)."""
        local = self._jobs.get(job, {})
        if before is not None:
            local = {n: e for n, e in local.items() if e[2] < before}
        return sorted(set(local) | set(self._remote.get(job, {})))

    def snapshot(self, job: str) -> dict[str, Any] | None:
        """This worker's placement of ``job`` as a JSON-able record (None: unknown)."""
        nodes = self._jobs.get(job)
        if nodes is None:
            return None
        return {"job": job, "nodes": [{"node": n, "ranks": [[r, g] for r, g in sorted(e[0].items())], "last_ts": e[1]}
                                      for n, e in sorted(nodes.items())]}

    def merge(self, record: dict[str, Any]) -> list[tuple[str, str]]:
        """Another worker's snapshot of a job; returns the (job, node) pairs new to this view (or whose ranks changed)."""
        job = record.get("job")
        if not isinstance(job, str) or job in self._jobs:
            return []
        nodes: dict[str, list] = {}
        new = []
        known = self._remote.get(job, {})
        for item in record.get("nodes") or ():
            try:
                node = str(item["node"])
                nodes[node] = [{int(r): (None if g is None else int(g)) for r, g in item.get("ranks") or ()},
                               float(item.get("last_ts") or 0.0)]
            except (KeyError, TypeError, ValueError):
                continue
            if node not in known or known[node][0] != nodes[node][0]:  # new on the node, or other ranks/GPUs
                new.append((job, node))
        self._remote.pop(job, None)
        self._remote[job] = nodes  # newest last
        if len(self._remote) > self.max_jobs:
            self._remote.pop(next(iter(self._remote)))
        return new

    def forget(self, job: str) -> None:
        self._jobs.pop(job, None)
        self._entry.pop(job, None)
        self._pairs.pop(job, None)
        self._last_node.pop(job, None)
        self._last_run.pop(job, None)
