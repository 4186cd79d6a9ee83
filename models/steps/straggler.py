"""Sync-aware straggler detection by peer comparison.

In synchronous training every rank's wall-clock step time is nearly the same, because
all ranks wait for each other in the collectives. A slow rank shows up in what happens
*before* it enters the collective: its compute time, or equivalently its arrival at the
collective (it arrives last and waits least). So each step, each rank's signal is
compared with the median of its peers (same group, e.g. the same pipeline stage):

* ``ratio = x / median`` and a robust ``z = (x - median) / spread`` where ``spread`` is the
  normal-scaled median absolute deviation, floored at ``spread_floor * median``;
* a step is slow for a rank when ``ratio >= ratio_threshold`` and ``z >= z_threshold``;
* the rank becomes a straggler when ``min_flagged`` of its last ``window`` steps were slow,
  and stops being one after ``clear_after`` consecutive clean steps.

A slowdown of every rank moves the median with it and flags nobody; a single GC spike or
data-loader hiccup is one slow step out of ``window`` and flags nobody either.

Small groups (2 .. ``min_peers`` - 1 ranks): each rank's pace against its peers on the same step, against its
own usual pace, over a run of steps (models/steps/small_group.py; ``evidence.baseline: "self"``): ``ratio``
and ``z`` are the run's, and the step itself must be ``ratio_threshold`` slow too; the k-of-n and the rest
of the rule are the same.

No coincidences: in a big job some ranks see several independent spikes (GC, page faults,
ECC retries) within ``window`` steps by chance. The rule learns the job's background rate of
slow rank-steps (decayed, from isolated slow verdicts as they leave the window, floored at
``spike_rate_floor``) and fires only when the binomial chance of so
many slow steps from independent spikes is at most ``coincidence_p`` (over the window or the
longer evidence window). A real straggler is slow nearly every step and passes within a step
or two of the plain k-of-n rule. When the other ranks (not candidates, not firing) were slow over the
same recent steps more often than the learned rate can explain, their rate is used instead: a rotating
MoE hot expert slows every rank on a share of its steps, long before a small job has learned it.

Intermittent slowness (a flaky GPU: 3x slow one step in seven) never makes ``min_flagged`` of
``window`` steps slow, nor enough of ``evidence_window`` at the floor rate. Each rank's slow verdicts of
its last ``intermittent_window`` steps are counted (a ring, updated per step); a rank fires when its
count has at most ``coincidence_p`` chance at its *peers'* rate of slow steps over the same steps
(floored at ``spike_rate_floor``), and its slow steps were clearly slow (their ratio, decayed mean, at
least twice the threshold's excess), on fewer than half of its steps since the first (more is a steady
straggler: the rule above), and its average cost since the first (slow steps at their ratio, the rest at
par) reaches ``ratio_threshold`` (a few 1.3x steps in a hundred on a real trace's heavy tail cost ~4%): GC spikes, loader hiccups and a rotating MoE hot expert hit every rank alike
and fire nobody. A step judged on the step time while the job's other steps carry compute or arrival
times is not counted (in synchronous training every rank's step time is the same). The alert
(``evidence.pattern: "intermittent"``) says how often the rank is slow and how slow it is then.

Hysteresis on intermittency: an alert resolves after ``clear_after`` clean steps, or after as many clean
steps as make the rank's slow rate over its recent window (slow steps before the clean run) implausible
(chance at most ``RECOVERY_P``): a rank slow one step in seven needs 45 clean steps, not 10, so the pattern
holding is one incident, not a page per episode.

No flapping: a rank whose alert resolved does not fire again within ``holdoff_steps`` unless it
got clearly worse (its excess ratio is half as large again as the resolved episode's, or it
crosses ``critical_ratio``); each re-fire attempt inside the hold-off is a flap (``flaps``).
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass

import numpy as np

from .settings import StragglerSettings  # noqa: F401  (defined in a light module; re-exported here)
from ..alerts import Alert
from ..tunable import runtime, runtime_fields
from . import straggler_alerts as alerts
from .assembly import GroupStep
from .robust import step_median
from .small_group import PairedPace
from .straggler_background import SpikeRate, none_slow, not_coincidence
from .straggler_data_wait import DataWait
from .straggler_episodes import IntermittentEpisodes
from .straggler_evidence import Baseline
from .straggler_history import RankHistory
from .straggler_holdoff import HoldOff
from .straggler_slots import RankSlots
# The verdict maths' names, importable from here as before (models/steps/imbalance.py, long_straggler.py).
from .straggler_verdict import SIGNALS, StepVerdict, choose_signal, judge, normal_mad, off_pace  # noqa: F401




_D = StragglerSettings()

#: A firing alert is published again (same id) when its rank's ratio moved by more than this share of the one published.
REPUBLISH_MOVE = 0.10


class StragglerDetector:
    """Peer-comparison straggler rule for one (job, group); feed it closed steps in order.

    It composes one part per concept, each in its own module: the verdict on a step (straggler_verdict.py), the
    ranks' slots (straggler_slots.py) and rings (straggler_history.py), the background spike rate
    (straggler_background.py), intermittent episodes (straggler_episodes.py), the hold-off
    (straggler_holdoff.py), the data-wait channel (straggler_data_wait.py) and the alerts (straggler_alerts.py).

    Example: eight ranks of one group; from step 20 on rank 3 computes 30% slower.

    >>> import numpy as np
    >>> from stepwatch.models.steps.assembly import GroupStep
    >>> ranks = np.arange(8)
    >>> def step(n):
    ...     compute = np.where((ranks == 3) & (n >= 20), 1.3, 1.0)
    ...     return GroupStep(job="j", group="", step=n, ts=1000.0 + n, ranks=ranks,
    ...                      step_time=np.full(8, compute.max() + 0.1), compute_time=compute,
    ...                      comm_time=compute.max() - compute + 0.1, data_time=np.full(8, 0.01),
    ...                      tokens=np.full(8, 4096.0), nodes=("node-0",) * 4 + ("node-1",) * 4, phase="train")
    >>> detector = StragglerDetector(job="j")
    >>> alerts = [alert for n in range(40) for alert in detector.update(step(n))]
    >>> [(str(a.type), str(a.status), a.ranks, a.nodes) for a in alerts]
    [('straggler', 'firing', (3,), ('node-0',))]
    """

    # Defaults and documentation of every hyperparameter: ``StragglerSettings`` (one place).
    def __init__(self, *, job: str, group: str = "", ratio_threshold: float = _D.ratio_threshold,
                 z_threshold: float = _D.z_threshold, min_flagged: int = _D.min_flagged, window: int = _D.window,
                 clear_after: int = _D.clear_after, spread_floor: float = _D.spread_floor,
                 min_peers: int = _D.min_peers, warmup_steps: int = _D.warmup_steps,
                 critical_ratio: float = _D.critical_ratio, evidence_window: int = _D.evidence_window,
                 coincidence_p: float = _D.coincidence_p, spike_rate_floor: float = _D.spike_rate_floor,
                 holdoff_steps: int = _D.holdoff_steps, intermittent_window: int = _D.intermittent_window
                 ) -> None:
        if not 1 <= min_flagged <= window:
            raise ValueError("need 1 <= min_flagged <= window")
        self.job = job
        self.group = group
        self.ratio_threshold = ratio_threshold
        self.z_threshold = z_threshold
        self.min_flagged = min_flagged
        self.window = window
        self.clear_after = clear_after
        self.spread_floor = spread_floor
        self.min_peers = min_peers
        self.warmup_steps = warmup_steps
        self.critical_ratio = critical_ratio
        self.evidence_window = evidence_window
        self.coincidence_p = coincidence_p
        self.spike_rate_floor = spike_rate_floor
        self.holdoff_steps = holdoff_steps
        if intermittent_window < 0:
            raise ValueError("need intermittent_window >= 0")
        self.intermittent_window = intermittent_window
        #: Called as ``on_flap(detector, outcome)`` for each flap (metrics).
        self.on_flap = None
        #: Ranks compared within their own class (see models/steps/imbalance.py): rank -> class index.
        self.rank_class: dict[int, int] = {}
        #: Called as ``on_verdict(detector, verdict)`` after every judged step (status views).
        self.on_verdict = None
        self._reset_state()

    def _reset_state(self) -> None:
        self._slots = RankSlots()
        self._history = RankHistory(window=self.window, evidence_window=self.evidence_window)
        self._data = DataWait(window=self.window)  # the input-pipeline channel
        self._background = SpikeRate()
        self._holdoff = HoldOff()
        # Small groups: each rank's pace against its peers, against its own usual (models/steps/small_group.py),
        # and how the last step was judged.
        self._pace = PairedPace(spread_floor=self.spread_floor, max_ranks=4 * self.min_peers)
        self._basis = Baseline.PEERS
        self._episodes = IntermittentEpisodes(width=max(self.intermittent_window, 1))
        self._firing: dict[int, Alert] = {}
        self._published_at: dict[int, int] = {}  # firing rank -> steps evaluated when its version was first seen
        self._first_step: int | None = None
        self.last_verdict: StepVerdict | None = None

    @property
    def flaps(self) -> dict[str, int]:
        """Re-fire attempts within the hold-off: ``{"suppressed": n, "refired": n}``."""
        return self._holdoff.flaps

    #: The settings this rule takes (set after the class: its constructor's keywords among
    #: ``StragglerSettings``; the ``long_*`` rest configures the long-horizon rule).
    TUNABLE: tuple[str, ...] = ()
    _INTS = frozenset({"min_flagged", "window", "clear_after", "min_peers", "warmup_steps", "evidence_window",
                       "holdoff_steps", "intermittent_window"})

    @classmethod
    def from_settings(cls, settings: StragglerSettings, *, job: str, group: str = "") -> "StragglerDetector":
        """A detector for one (job, group) configured by ``settings``."""
        return cls(job=job, group=group, **{name: getattr(settings, name) for name in cls.TUNABLE})

    def settings(self) -> dict:
        """The rule's current settings (the names of ``StragglerSettings``)."""
        return {name: getattr(self, name) for name in self.TUNABLE}

    def reconfigure(self, **settings) -> None:
        """Change settings in place while running; per-rank history and open alerts are kept.

        A new ``window`` or ``evidence_window`` keeps the most recent verdicts that fit.
        Unknown names are ignored (settings of other rules may be passed along).
        """
        new = {k: v for k, v in settings.items() if k in self.TUNABLE}
        window = int(new.get("window", self.window))
        if not 1 <= int(new.get("min_flagged", self.min_flagged)) <= window:
            raise ValueError("need 1 <= min_flagged <= window")
        evidence_window = int(new.get("evidence_window", self.evidence_window))
        if evidence_window < 1:
            raise ValueError("need evidence_window >= 1")
        intermittent = int(new.get("intermittent_window", self.intermittent_window))
        if intermittent < 0:
            raise ValueError("need intermittent_window >= 0")
        self._data.resize(window, self._history.evaluated)
        self._history.resize(window=window, evidence_window=evidence_window)
        self._episodes.resize(max(intermittent, 1))
        for name, value in new.items():
            setattr(self, name, int(value) if name in self._INTS else float(value))

    @property
    def firing(self) -> dict[int, Alert]:
        """Open straggler alerts by rank."""
        return dict(self._firing)

    def speaking_for(self):
        """Ranks this rule speaks for: firing, or held off from re-firing (the long-horizon rule leaves them)."""
        suppressed = self._holdoff.suppressed
        return self._firing.keys() | suppressed if suppressed else self._firing

    def spike_rate(self) -> float:
        """The job's background rate of slow rank-steps (independent spikes), floored."""
        return self._background.rate(self.spike_rate_floor)

    def window_verdicts(self, rank: int) -> np.ndarray:
        """``rank``'s slow verdicts of its last ``window`` steps (ring order; status views and tests)."""
        return self._history.slow[self._slots.of(rank)].copy()

    # -- the rule -------------------------------------------------------------------------

    def update(self, step: GroupStep) -> list[Alert]:
        """Judge one closed step; return alerts that fired or resolved because of it."""
        if self._first_step is None:
            self._first_step = step.step
        if step.phase != "train" or step.step < self._first_step + self.warmup_steps:
            return []
        small = 2 <= len(step.ranks) < self.min_peers
        if len(step.ranks) < self.min_peers and not small:
            return []
        chosen = choose_signal(step)
        if chosen is None:
            return []
        signal, x = chosen
        peer = step_median(step, signal, x)
        if peer <= 0:
            return []
        verdict = judge(step, x, peer, small=small, pace=self._pace, rank_class=self.rank_class,
                        ratio_threshold=self.ratio_threshold, z_threshold=self.z_threshold,
                        spread_floor=self.spread_floor, min_peers=self.min_peers)
        if verdict is None:
            return []
        ratio, z, slow, peers = verdict.ratio, verdict.z, verdict.slow, verdict.peers
        self._basis = Baseline.SELF if small else Baseline.PEERS
        self.last_verdict = StepVerdict(step.step, signal, step.ranks, ratio, z, slow)
        if self.on_verdict is not None:
            self.on_verdict(self, self.last_verdict)

        slots = self._slots_for(step.ranks)
        first = self._slots.first_of_run(slots)
        # The rows of the step's ranks in the rings: a slice when consecutive (the usual step), a view instead of
        # a gather; the same values as ``slots`` (each slot once)
        at = slots if first is None else slice(first, first + len(slots))
        history = self._history
        col = history.evaluated % self.window
        if history.evaluated >= self.window:
            self._background.learn(history.slow, step.ranks, slots, at, col, list(self._firing))
        if self.intermittent_window:
            self._episodes.count_step(slots, at, slow if verdict.step_slow is None else verdict.step_slow,
                                      ratio if verdict.step_ratio is None else verdict.step_ratio, step.step,
                                      signal, peers if peers is not None else peer,
                                      history.evaluated)
        history.record(at, slow, ratio, z, x, peers if peers is not None else peer)
        self._slots.record_nodes(slots, first, step.nodes)
        data_slow = self._data.judge(step, at, col, peer, ratio_threshold=self.ratio_threshold,
                                     z_threshold=self.z_threshold, spread_floor=self.spread_floor, small=small) \
            if signal == "compute_time" else None
        # Ranks missing from this step carry their old verdicts; they neither fire nor clear.
        counts = history.slow[at].sum(axis=1)
        busy = slow if data_slow is None else slow | data_slow
        if not none_slow(busy):
            new_episode = slow & (counts == 1) & (history.episode_start[at] < 0)
            history.episode_start[slots[new_episode]] = step.step
            history.clean_run[at] = np.where(busy, 0, history.clean_run[at] + 1)
        else:  # no rank slow (the usual step): no episode starts, every clean run grows
            history.clean_run[at] += 1
        history.episode_start[slots[counts == 0]] = -1

        if small:  # a step joins the baselines only while no rank of the group is off its pace, flagged or firing
            self._pace.learn(off=off_pace(ratio, self.ratio_threshold),
                             flagged=bool(counts.any()) or any(int(r) in self._firing for r in step.ranks))

        out: list[Alert] = []
        # Held-off episodes that are over (by the hysteresis that resolves alerts).
        self._holdoff.release([r for r in self._holdoff.suppressed if self._clean(self._slots.of(r), quiet=True)])
        candidates = (counts >= self.min_flagged).nonzero()[0]  # (1-D: flatnonzero's ravel for nothing)
        rate = self._background_now(slots, candidates) if len(candidates) else 0.0
        for i in candidates:
            rank, slot = int(step.ranks[i]), int(slots[i])
            if rank not in self._firing and self._not_coincidence(slot, int(counts[i]), rate) \
                    and self._past_holdoff(rank, slot, step.step):
                out.append(self._open(rank, slot, self._fire(rank, slot, signal, step)))
        if self.intermittent_window:
            for i in self._episodes.candidates(
                    slots, history.clean_run, clear_after=self.clear_after, ratio_threshold=self.ratio_threshold,
                    spike_rate_floor=self.spike_rate_floor, coincidence_p=self.coincidence_p,
                    min_flagged=self.min_flagged):
                rank, slot = int(step.ranks[i]), int(slots[i])
                if rank not in self._firing and self._past_holdoff(rank, slot, step.step):
                    out.append(self._open(rank, slot, alerts.intermittent_alert(
                        self.job, self.group, rank, self._slots.nodes[slot], signal, step, history, slot,
                        self._episodes.pattern(slot), **self._alert_settings())))
        if data_slow is not None:
            for i in np.flatnonzero(self._data.run[slots] >= self.window):
                rank, slot = int(step.ranks[i]), int(slots[i])
                if rank not in self._firing:
                    rank_wait, peer_wait = self._data.waits(slot)
                    out.append(self._open(rank, slot, alerts.data_wait_alert(
                        self.job, self.group, rank, self._slots.nodes[slot], step, rank_wait=rank_wait,
                        peer_wait=peer_wait, compute=self._data.compute, window=self.window,
                        ratio_threshold=self.ratio_threshold, z_threshold=self.z_threshold,
                        critical_ratio=self.critical_ratio)))
        for rank in [r for r in self._firing if self._clean(self._slots.of(r))]:
            out.append(self._resolve(rank, step))
        out.extend(self._moved(step, slots, counts, signal))
        return out

    def _slots_for(self, ranks: np.ndarray) -> np.ndarray:
        slots, new = self._slots.lookup(ranks)
        if new:  # rows for the new ranks in every part's arrays
            self._history.grow(new)
            self._episodes.grow(new)
            self._data.grow(new)
        return slots

    def _clean(self, slot: int, *, quiet: bool = False) -> bool:
        """The rank's clean run ends its episode (``quiet``: and no slow verdict is left in its window)."""
        if quiet and self._history.slow[slot].sum() != 0:
            return False
        return self._history.clean_run[slot] >= self._clean_needed(slot)

    def _clean_needed(self, slot: int) -> int:
        if not self.intermittent_window:
            return self.clear_after
        return self._episodes.clean_needed(slot, int(self._history.clean_run[slot]), clear_after=self.clear_after)

    def _open(self, rank: int, slot: int, alert: Alert) -> Alert:
        self._firing[rank] = alert
        self._episodes.start_episode(slot)
        return alert

    def _alert_settings(self) -> dict:
        return dict(window=self.window, ratio_threshold=self.ratio_threshold, z_threshold=self.z_threshold,
                    critical_ratio=self.critical_ratio, basis=self._basis)

    def _background_now(self, slots: np.ndarray, candidates: np.ndarray) -> float:
        """The rate the k-of-n test judges ``candidates`` at: the learned background, or the rate of slow steps
        of the other ranks over the same recent steps when higher (``SpikeRate.now``): their slow verdicts of
        the intermittent ring (its last ``intermittent_window`` steps; the k-of-n window without it)."""
        rate = self.spike_rate()
        if self._basis is Baseline.SELF:  # a small group judges each rank against its own pace: too few others
            return rate
        mine = set(slots[candidates].tolist()) | {self._slots.of(r) for r in self._firing}
        mine_at = np.fromiter(mine, dtype=np.int64, count=len(mine))
        if self.intermittent_window and self._episodes.n:
            counts, steps = self._episodes.count, self._episodes.seen
        else:
            counts, steps = self._history.slow.sum(axis=1), min(self._history.evaluated, self.window)
        return SpikeRate.now(rate, counts, steps, mine_at)

    def _not_coincidence(self, slot: int, count: int, rate: float) -> bool:
        return not_coincidence(count, self.window, rate, coincidence_p=self.coincidence_p,
                               ratios=self._history.ratio[slot], zs=self._history.z[slot],
                               ratio_threshold=self.ratio_threshold, z_threshold=self.z_threshold)

    def _past_holdoff(self, rank: int, slot: int, step: int) -> bool:
        """A rank that resolved recently fires again only when clearly worse; else it is a flap."""
        def recent_ratio() -> float:
            ratios = self._history.ratio[slot, self._history.recent(self.window)]
            return float(np.median(ratios[~np.isnan(ratios)]))

        may, outcome = self._holdoff.check(rank, step, holdoff_steps=self.holdoff_steps,
                                           critical_ratio=self.critical_ratio, recent_ratio=recent_ratio)
        if outcome is not None and self.on_flap is not None:
            self.on_flap(self, outcome)
        return may

    def _fire(self, rank: int, slot: int, signal: str, step: GroupStep, *, first_step: int | None = None) -> Alert:
        if first_step is None:  # (given: a new version of an alert, its episode's first step)
            start = self._history.episode_start[slot]
            first_step = int(start) if start >= 0 else step.step
            if self._basis is Baseline.SELF:  # a run of steps was judged: its slowdown began before the first slow verdict
                onset = self._pace.onset(rank, self.ratio_threshold)
                first_step = min(first_step, onset) if onset is not None else first_step
        return alerts.peer_alert(self.job, self.group, rank, self._slots.nodes[slot], signal, step, self._history,
                                 slot, first_step, **self._alert_settings())

    def _moved(self, step: GroupStep, slots: np.ndarray, counts: np.ndarray, signal: str) -> list[Alert]:
        """New versions (same id, start and first step) of firing alerts whose rank's ratio moved by more than
        ``REPUBLISH_MOVE`` from the one published while the rank is still slow by the rule: the estimate follows
        the truth (a window that still held pre-onset steps, a slowdown that keeps growing)."""
        out: list[Alert] = []
        if not self._firing:
            return out
        history = self._history
        for i in np.flatnonzero(counts >= self.min_flagged):
            rank = int(step.ranks[i])
            alert = self._firing.get(rank)
            if alert is None or alert.evidence.get("pattern") or alert.evidence.get("signal") != signal:
                continue  # an intermittent or data-wait alert's ratio is another measure
            since = self._published_at.setdefault(rank, history.evaluated)
            old = alert.evidence.get("ratio")
            slot = int(slots[i])
            # Moved for good, not by noise: the window's ratio and the median of every step judged since the
            # last version (a window of them at least, the evidence ring's at most) both moved.
            n = min(history.evaluated - since, self.evidence_window)
            if n < self.window or not isinstance(old, (int, float)) or old <= 0:
                continue
            ring = history.ratio[slot, history.recent(n)]
            ring = ring[~np.isnan(ring)]
            now = alerts.peer_evidence(history, slot, signal, group=self.group, window=self.window,
                                       ratio_threshold=self.ratio_threshold, z_threshold=self.z_threshold,
                                       basis=self._basis).get("ratio")
            if not len(ring) or not isinstance(now, (int, float)) or abs(now / old - 1.0) <= REPUBLISH_MOVE \
                    or abs(float(np.median(ring)) / old - 1.0) <= REPUBLISH_MOVE:
                continue
            first = alert.evidence.get("first_step")
            new = self._fire(rank, slot, signal, step, first_step=first if isinstance(first, int) else None)
            new = dataclasses.replace(new, id=alert.id, starts_at=alert.starts_at)
            self._firing[rank] = new
            self._published_at[rank] = history.evaluated
            out.append(new)
        return out

    def _resolve(self, rank: int, step: GroupStep) -> Alert:
        alert = self._firing.pop(rank)
        self._published_at.pop(rank, None)
        slot = self._slots.of(rank)
        self._episodes.forget(slot)
        ratio = alert.evidence.get("ratio")
        self._holdoff.resolved(rank, step.step, float(ratio) if isinstance(ratio, (int, float)) else self.ratio_threshold)
        clean = int(self._history.clean_run[slot])
        still = alerts.still_slow_by(alert, self._history, slot, clean, ratio_threshold=self.ratio_threshold,
                                     z_threshold=self.z_threshold)
        return alerts.recovered(alert, rank, step, clean, still)

    def close_all(self, *, at: float, reason: str) -> list[Alert]:
        """Resolve every open alert (the job ended)."""
        out = []
        self._published_at.clear()
        for rank in list(self._firing):
            out.append(alerts.ended(self._firing.pop(rank), at=at, reason=reason))
        return out


StragglerDetector.TUNABLE = tuple(name for name in runtime_fields(StragglerSettings)
                                  if name in inspect.signature(StragglerDetector.__init__).parameters)
