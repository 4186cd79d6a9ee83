"""Persistent link baselines: what each node's ports and NVLinks normally look like, across jobs.

The job-wide peer comparison (models/telemetry/fabric.py) needs peers: a job on one or two nodes has none to
speak of, and a port that was already bad when the job started never *changes* during the job.
Seed 003's "slow-node baseline" rule answers both: keep, per node and port (and NVLink), the usual
level of its counter rates, and judge the port now against

* its **own** baseline (learned over earlier jobs: the port that used to be clean and now logs
  errors), and
* the **fleet** baseline: the same component on every other node the worker has seen (the port that
  has been bad for as long as anyone remembers stands out from the fleet's ports).

:class:`LinkBaselines` holds, per node and component (``mlx5_2/1``, ``gpu3``, ``gpu3/nvlink2``), a
robust exponentially weighted mean and mean absolute deviation of four per-second rates: link error
counter increases (``link_errors``), ``port_xmit_wait`` (``xmit_wait``), the link rate
(``link_rate``, Gb/s) and NVLink CRC/replay/recovery error increases (``nvlink_errors``; a GPU's
entry is the sum over its NVLinks, an upper bound for each of them). Samples are winsorized at
``clip`` spreads before they are learned, so a port that turns bad moves its own baseline only
slowly (time constant ``half_life``); the fleet comparison catches the one that stayed bad.

Clocks: an update's weight comes from the time since the same component's previous sample, read
on that node's own clock; two hosts' timestamps are never subtracted. State is a few numbers per
component (bounded by ``max_nodes`` and ``max_components``); :meth:`LinkBaselines.record` and
:meth:`LinkBaselines.load` turn one node's state into the JSON record of the compacted
``<prefix>link-baselines`` topic (keyed by node, streams/link_baselines.py) and back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import orjson

#: Baselined features: (smallest spread in absolute units, smallest spread as a share of the baseline).
BASELINE_FEATURES: dict[str, tuple[float, float]] = {
    "link_errors": (0.5, 0.5),  # errors per second
    "xmit_wait": (1000.0, 0.5),  # ticks per second
    "link_rate": (5.0, 0.05),  # Gb/s
    "nvlink_errors": (0.5, 0.5),  # errors per second
}
#: Which way is worse for each (the link rate is bad when it falls).
HIGHER_IS_WORSE = {"link_errors": True, "xmit_wait": True, "link_rate": False, "nvlink_errors": True}
#: Mean absolute deviation -> standard deviation of a normal distribution.
_MAD_TO_SIGMA = 1.2533141373155001
_LN2 = math.log(2.0)
RECORD_VERSION = 1


@dataclass(frozen=True, slots=True)
class BaselineValue:
    """One feature's baseline: mean, spread (same units) and how many samples it was learned from."""

    mean: float
    spread: float
    samples: int


@dataclass(frozen=True, slots=True)
class BaselineJudgement:
    """A value judged against a baseline: which one (``own`` or ``fleet``), its level, how far off."""

    feature: str
    value: float
    reference: str  # own | fleet
    baseline: float
    z: float


class _Entry:
    """One component's state: feature -> [mean, mean absolute deviation, samples]; the last sample time."""

    __slots__ = ("stats", "last")

    def __init__(self) -> None:
        self.stats: dict[str, list[float]] = {}
        self.last: float | None = None


class LinkBaselines:
    """Per node and component, a robust EWMA of link counter rates that outlives jobs and restarts.

    Hyperparameters:

    * ``half_life``: seconds (of the node's own clock) after which a sample's weight is halved;
      long (6 h), so a baseline remembers earlier jobs;
    * ``min_samples``: samples before a component's own baseline is used;
    * ``clip``: samples beyond this many spreads from the baseline are learned as if they were there
      (a bad spell moves the baseline slowly);
    * ``fleet_min``: components with a settled baseline the fleet comparison needs;
    * ``max_nodes``, ``max_components``: memory bounds (the node seen first is dropped first; a
      node's components beyond the bound are not learned).
    """

    def __init__(self, *, half_life: float = 21_600.0, min_samples: int = 120, clip: float = 3.0,
                 fleet_min: int = 5, max_nodes: int = 100_000, max_components: int = 256) -> None:
        self.half_life = half_life
        self.min_samples = min_samples
        self.clip = clip
        self.fleet_min = fleet_min
        self.max_nodes = max_nodes
        self.max_components = max_components
        self._nodes: dict[str, dict[str, _Entry]] = {}
        self._dirty: set[str] = set()
        self._updates = 0  # samples learned (the fleet cache is refreshed after ``fleet_refresh`` more)
        self.fleet_refresh = 10_000
        self._fleet_cache: dict[tuple[str, str], tuple[int, dict[str, float]]] = {}
        self.loaded = 0
        self.rejected = 0

    # -- learning --------------------------------------------------------------------------------

    def observe(self, node: str, component: str, ts: float, values: dict[str, float]) -> None:
        """Learn one sample of ``component`` on ``node``: ``values`` are per-second rates (errors, waits)
        or levels (link rate); features not in it are left as they are."""
        comps = self._nodes.get(node)
        if comps is None:
            if len(self._nodes) >= self.max_nodes:
                self._nodes.pop(next(iter(self._nodes)))  # the node seen first goes first
            comps = self._nodes[node] = {}
        entry = comps.get(component)
        if entry is None:
            if len(comps) >= self.max_components:
                return
            entry = comps[component] = _Entry()
        last = entry.last
        if last is not None and ts <= last:
            return  # a repeated or reordered sample: its time was learned already
        entry.last = ts
        self._updates += 1
        self._dirty.add(node)
        stats = entry.stats
        for name, x in values.items():
            if name in BASELINE_FEATURES:  # (a feature's stats exist only for these)
                self._learn(stats, name, x, ts, last)

    def observe_port(self, node: str, component: str, ts: float, link_errors: float | None, xmit_wait: float,
                     link_rate: float) -> None:
        """``observe`` of a port's usual sample, without its dict: ``link_errors`` None, ``xmit_wait`` and
        ``link_rate`` NaN where the sample has none (the fabric's quiet road: the same state, bit for bit)."""
        comps = self._nodes.get(node)
        entry = comps.get(component) if comps is not None else None
        if entry is None or entry.last is None or ts <= entry.last:  # first, capped or reordered: the general road
            values = {"link_errors": link_errors} if link_errors is not None else {}
            if xmit_wait == xmit_wait:
                values["xmit_wait"] = xmit_wait
            if link_rate == link_rate:
                values["link_rate"] = link_rate
            self.observe(node, component, ts, values)
            return
        # ``observe``'s bookkeeping, then each feature in its order: a settled one at its level is only counted
        last = entry.last
        entry.last = ts
        self._updates += 1
        self._dirty.add(node)
        stats = entry.stats
        if link_errors is not None:
            st = stats.get("link_errors")
            if st is not None and link_errors == st[0] and st[1] == 0.0:
                st[2] += 1
            else:
                self._learn(stats, "link_errors", link_errors, ts, last)
        if xmit_wait == xmit_wait:
            st = stats.get("xmit_wait")
            if st is not None and xmit_wait == st[0] and st[1] == 0.0:
                st[2] += 1
            else:
                self._learn(stats, "xmit_wait", xmit_wait, ts, last)
        if link_rate == link_rate:
            st = stats.get("link_rate")
            if st is not None and link_rate == st[0] and st[1] == 0.0:
                st[2] += 1
            else:
                self._learn(stats, "link_rate", link_rate, ts, last)

    def _learn(self, stats: dict[str, list[float]], name: str, x: float, ts: float, last: float | None) -> None:
        """One feature of a sample, the component's time already moved on from ``last`` (None: its first sample):
        a new feature's first finite value, the usual sample (at a settled level) only counted, else ``_move``."""
        st = stats.get(name)
        if st is None:
            if math.isfinite(x):
                stats[name] = [x, 0.0, 1]
            return
        if x == st[0] and st[1] == 0.0:  # the usual healthy sample (no errors, the same rate): counted only
            st[2] += 1
            return
        if math.isfinite(x):
            self._move(st, name, x, ts, last)

    def _move(self, st: list[float], name: str, x: float, ts: float, last: float | None) -> None:
        """A settled feature's baseline ``st`` (mean, deviation, count) moved by a finite ``x`` off its level; the
        component's time moved on from ``last`` (None: its first sample) to ``ts``."""
        mean, dev, n = st
        # Clipped at the sample spread (the relative floor is for judging only: clipping at a share
        # of the mean would let a sustained bad level grow the baseline geometrically).
        spread = _MAD_TO_SIGMA * dev
        floor = BASELINE_FEATURES[name][0]
        if spread < floor:
            spread = floor
        lim = self.clip * spread
        if x > mean + lim:
            x = mean + lim
        elif x < mean - lim:
            x = mean - lim
        # A running mean while young, then exponential forgetting by time.
        if last is None:
            decay = 0.0
        else:
            decay = _LN2 * (ts - last) / self.half_life
            if decay > 1e-3:
                decay = 1.0 - math.exp(-decay)
        alpha = 1.0 / (n + 1)
        if alpha < decay:
            alpha = decay
        st[0] = mean + alpha * (x - mean)
        st[1] = dev + alpha * (abs(x - mean) - dev)
        st[2] = n + 1

    # -- judging ---------------------------------------------------------------------------------

    def value(self, node: str, component: str, feature: str) -> BaselineValue | None:
        """The component's own baseline of ``feature``, when settled (``min_samples``)."""
        entry = self._nodes.get(node, {}).get(component)
        st = entry.stats.get(feature) if entry is not None else None
        if st is None or st[2] < self.min_samples:
            return None
        floor, rel = BASELINE_FEATURES[feature]
        return BaselineValue(st[0], max(_MAD_TO_SIGMA * st[1], floor, rel * abs(st[0])), int(st[2]))

    def fleet(self, component: str, feature: str, *, exclude: str | None = None) -> BaselineValue | None:
        """The fleet's baseline of ``feature`` for components named ``component`` on other nodes: the
        median of their settled means, spread their normal-scaled median absolute deviation (floored)."""
        cached = self._fleet_cache.get((component, feature))
        if cached is None or self._updates - cached[0] >= self.fleet_refresh:
            per_node = {}
            for node, comps in self._nodes.items():  # every node: cached, refreshed now and then
                entry = comps.get(component)
                st = entry.stats.get(feature) if entry is not None else None
                if st is not None and st[2] >= self.min_samples:
                    per_node[node] = st[0]
            if len(self._fleet_cache) >= 4096:
                self._fleet_cache.clear()
            cached = self._fleet_cache[(component, feature)] = (self._updates, per_node)
        means = [m for node, m in cached[1].items() if node != exclude]
        if len(means) < self.fleet_min:
            return None
        means.sort()
        med = _median(means)
        mad = _median(sorted(abs(m - med) for m in means)) * 1.482602218505602
        floor, rel = BASELINE_FEATURES[feature]
        return BaselineValue(med, max(mad, floor, rel * abs(med)), len(means))

    def judge(self, node: str, component: str, feature: str, value: float, *,
              fallback: str | None = None) -> BaselineJudgement | None:
        """``value`` (the feature's level now) against the component's own baseline and the fleet's;
        the reference it stands out from most (None when there is no baseline to judge against).

        ``fallback``: a component whose baselines stand in for a missing own one (an NVLink's GPU: its
        NVLinks' summed error rate bounds each link's)."""
        if feature not in BASELINE_FEATURES:
            return None
        refs = []
        own = self.value(node, component, feature)
        if own is None and fallback is not None:
            own = self.value(node, fallback, feature)
        if own is not None:
            refs.append(("own", own))
        fleet = self.fleet(component, feature, exclude=node)
        if fleet is None and fallback is not None:
            fleet = self.fleet(fallback, feature, exclude=node)
        if fleet is not None:
            refs.append(("fleet", fleet))
        best = None
        for name, ref in refs:
            diff = value - ref.mean if HIGHER_IS_WORSE[feature] else ref.mean - value
            z = diff / ref.spread
            if best is None or z > best.z:
                best = BaselineJudgement(feature, value, name, ref.mean, z)
        return best

    # -- persistence -----------------------------------------------------------------------------

    def nodes(self) -> tuple[str, ...]:
        return tuple(self._nodes)

    def take_dirty(self) -> list[str]:
        """Nodes learned since the last call (to be written to the baselines topic)."""
        out = sorted(self._dirty)
        self._dirty.clear()
        return out

    def record(self, node: str) -> bytes | None:
        """The JSON value of ``node``'s record in the baselines topic (None: nothing known)."""
        comps = self._nodes.get(node)
        if not comps:
            return None
        return orjson.dumps({"v": RECORD_VERSION, "node": node, "components": {
            name: {"last": e.last, "stats": {f: [st[0], st[1], int(st[2])] for f, st in e.stats.items()}}
            for name, e in comps.items()}})

    def load(self, raw: bytes | str | dict | None, *, key: bytes | str | None = None) -> bool:
        """Take one record of the baselines topic (a later record of a node replaces the earlier one;
        ``None`` with a ``key`` is a tombstone). What this worker learned since it started is kept
        where the record knows less (fewer samples): it read the same telemetry after the record was
        written. Returns whether anything was taken; a bad record is counted in ``rejected``."""
        if isinstance(key, bytes):
            key = key.decode("utf-8", "replace")
        if raw is None:
            if key is not None and self._nodes.pop(key, None) is not None:
                return True
            return False
        try:
            value: Any = orjson.loads(raw) if isinstance(raw, (bytes, bytearray, memoryview, str)) else raw
            if type(value) is not dict or value.get("v") != RECORD_VERSION:
                raise ValueError("not a version-1 record")
            node = str(value["node"])
            parsed: dict[str, _Entry] = {}
            for name, comp in dict(value["components"]).items():
                entry = _Entry()
                entry.last = None if comp.get("last") is None else float(comp["last"])
                for f, st in dict(comp["stats"]).items():
                    if f not in BASELINE_FEATURES:
                        continue
                    mean, dev, n = float(st[0]), float(st[1]), int(st[2])
                    if not (math.isfinite(mean) and math.isfinite(dev) and dev >= 0 and n > 0):
                        raise ValueError(f"bad statistics for {name}/{f}")
                    entry.stats[f] = [mean, dev, n]
                parsed[str(name)] = entry
                if len(parsed) >= self.max_components:
                    break
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, IndexError):
            self.rejected += 1
            return False
        comps = self._nodes.get(node)
        if comps is None:
            if len(self._nodes) >= self.max_nodes:
                self._nodes.pop(next(iter(self._nodes)))
            self._nodes[node] = parsed
            self._fleet_cache.clear()
        else:
            for name, entry in parsed.items():
                mine = comps.get(name)
                if mine is None or _samples(mine) < _samples(entry):
                    comps[name] = entry
        self.loaded += 1
        return True


def _samples(entry: _Entry) -> int:
    return max((int(st[2]) for st in entry.stats.values()), default=0)


def _median(ordered: list[float]) -> float:
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
