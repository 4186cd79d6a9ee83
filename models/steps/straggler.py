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
import math
from dataclasses import dataclass

import numpy as np

from .settings import StragglerSettings  # noqa: F401  (defined in a light module; re-exported here)
from ..alerts import Alert, alert_id
from .cost import straggler_cost
from .robust import median, step_median
from .small_group import PairedPace
from .straggler_evidence import Baseline, DataWaitEvidence, PeerEvidence
from ..evidence import StragglerSignal
from .assembly import GroupStep
from ..resolution import Resolution, with_resolution
from ..tunable import runtime_fields




_D = StragglerSettings()

SIGNALS = ("compute_time", "arrival", "step_time")
#: An alert resolves once its clean run has at most this chance at the rank's recent slow rate.
RECOVERY_P = 0.001
#: The window's other ranks set the k-of-n test's rate when the learned rate explains their slow steps with at
#: most this chance (``StragglerDetector._background_now``).
WINDOW_RATE_P = 0.01
#: A firing alert is published again (same id) when its rank's ratio moved by more than this share of the one published.
REPUBLISH_MOVE = 0.10
#: Fewest slow steps in ``intermittent_window`` that may fire as intermittent.
INTERMITTENT_MIN = 4

#: scipy's ``median_abs_deviation(scale="normal")`` divides by this (the normal distribution's
#: quartile, ``ndtri(0.75)``); the same constant keeps the same results, without scipy's per-call cost.
_NORMAL_MAD_SCALE = 0.6744897501960817


def normal_mad(values: np.ndarray, center: float) -> float:
    """Median absolute deviation from ``center``, scaled to a normal distribution's standard deviation."""
    return median(np.abs(values - center)) / _NORMAL_MAD_SCALE


@dataclass(frozen=True, slots=True)
class StepVerdict:
    """What the detector concluded about one step (for status views and tests)."""

    step: int
    signal: str
    ranks: np.ndarray
    ratio: np.ndarray
    z: np.ndarray
    slow: np.ndarray


def choose_signal(step: GroupStep) -> tuple[str, np.ndarray] | None:
    """The best signal every rank of this step reported, with its values."""
    if not np.isnan(step.compute_time).any():
        return "compute_time", step.compute_time
    if not (np.isnan(step.comm_time).any() or np.isnan(step.step_time).any()):
        # Time before the rank entered its collectives: the last to arrive waits least.
        return "arrival", np.maximum(step.step_time - step.comm_time, 0.0)
    if not np.isnan(step.step_time).any():
        return "step_time", step.step_time
    return None


class StragglerDetector:
    """Peer-comparison straggler rule for one (job, group); feed it closed steps in order.

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
        #: Re-fire attempts within the hold-off: ``{"suppressed": n, "refired": n}``.
        self.flaps = {"suppressed": 0, "refired": 0}
        #: Called as ``on_flap(detector, outcome)`` for each flap (metrics).
        self.on_flap = None
        #: Ranks compared within their own class (see models/steps/imbalance.py): rank -> class index.
        self.rank_class: dict[int, int] = {}
        #: Called as ``on_verdict(detector, verdict)`` after every judged step (status views).
        self.on_verdict = None
        self._reset_state()

    def _reset_state(self) -> None:
        # Per-rank state lives in arrays indexed by a dense slot per rank (grown on demand).
        self._slot: dict[int, int] = {}
        self._last_lookup: tuple[np.ndarray, np.ndarray] = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        self._ranks = np.zeros(0, dtype=np.int64)
        self._slow_ring = np.zeros((0, self.window), dtype=bool)  # last `window` verdicts
        self._ratio_ring = np.full((0, self.evidence_window), np.nan)  # for evidence
        self._z_ring = np.full((0, self.evidence_window), np.nan)
        self._value_ring = np.full((0, self.evidence_window), np.nan)
        self._peer_ring = np.full((0, self.evidence_window), np.nan)
        self._clean_run = np.zeros(0, dtype=np.int64)
        self._episode_start = np.full(0, -1, dtype=np.int64)  # first slow step of the current run
        self._nodes: list[str | None] = []
        self._run_of: tuple = (None, None)  # (slots, their first slot if consecutive) of the last step
        self._firing: dict[int, Alert] = {}
        self._published_at: dict[int, int] = {}  # firing rank -> steps evaluated when its version was first seen
        self._evaluated = 0
        self._first_step: int | None = None
        self.last_verdict: StepVerdict | None = None
        # Input-pipeline channel: consecutive steps each rank waited far longer for data than
        # its peers, and its recent data waits (and the peers' median) for the evidence.
        self._data_run = np.zeros(0, dtype=np.int64)
        self._data_compute = 0.0
        self._data_ring = np.full((0, self.window), np.nan)
        self._data_peer_ring = np.full((0, self.window), np.nan)
        # Background rate of slow rank-steps (decayed sums), and resolved episodes for the hold-off.
        self._bg_slow = 0.0
        self._bg_n = 0.0
        self._resolved: dict[int, tuple[int, float]] = {}  # rank -> (resolved step, episode ratio)
        self._suppressed: set[int] = set()
        # Small groups: each rank's pace against its peers, against its own usual (models/steps/small_group.py),
        # and how the last step was judged.
        self._pace = PairedPace(spread_floor=self.spread_floor, max_ranks=4 * self.min_peers)
        self._basis = "peers"
        # Intermittent slowness: each rank's slow verdicts of its last ``intermittent_window`` steps, their
        # count, a decayed mean of its ratio on its slow steps; the step judged at each column.
        width = max(self.intermittent_window, 1)
        self._flaky_ring = np.zeros((0, width), dtype=bool)
        self._flaky_count = np.zeros(0, dtype=np.int64)
        self._flaky_ratio = np.zeros(0)
        self._flaky_peer = np.zeros(0)  # decayed mean of the peers' value on the rank's slow steps
        self._flaky_steps = np.full(width, -1, dtype=np.int64)
        self._flaky_n = 0  # steps counted (a step judged on the step time beside richer signals is not)
        self._rich_at = -1  # the latest evaluated step judged on compute time or arrival
        # Slow and judged steps of each rank since its alert fired (its episode's slow rate; reset on firing).
        self._episode_slow = np.zeros(0, dtype=np.int64)
        self._episode_steps = np.zeros(0, dtype=np.int64)
        self._flaky_need: dict[tuple[int, float], int] = {}  # (steps seen, rate) -> fewest slow that may fire

    # -- state management ------------------------------------------------------------------

    def _slots_for(self, ranks: np.ndarray) -> np.ndarray:
        # Most steps have the same ranks as the one before: reuse its slots.
        last_ranks, last_slots = self._last_lookup
        if len(ranks) == len(last_ranks) and np.array_equal(ranks, last_ranks):
            return last_slots
        slots = self._lookup_slots(ranks)
        self._last_lookup = (ranks.copy(), slots)
        return slots

    def _first_of_run(self, slots: np.ndarray) -> int | None:
        """The first slot when ``slots`` are consecutive (the usual step: the same ranks as before, in order)."""
        if slots is self._run_of[0]:
            return self._run_of[1]
        n = len(slots)
        first = int(slots[0]) if n and int(slots[-1]) - int(slots[0]) == n - 1 and (
            n == 1 or bool((np.diff(slots) == 1).all())) else None
        self._run_of = (slots, first)
        return first

    def _lookup_slots(self, ranks: np.ndarray) -> np.ndarray:
        slot = self._slot
        new = [int(r) for r in ranks if int(r) not in slot]
        if new:
            start = len(slot)
            for i, r in enumerate(new):
                slot[r] = start + i
            grow = len(new)
            self._ranks = np.concatenate([self._ranks, np.asarray(new, dtype=np.int64)])
            self._slow_ring = np.vstack([self._slow_ring, np.zeros((grow, self.window), dtype=bool)])
            for name in ("_ratio_ring", "_z_ring", "_value_ring", "_peer_ring"):
                ring = getattr(self, name)
                setattr(self, name, np.vstack([ring, np.full((grow, self.evidence_window), np.nan)]))
            self._clean_run = np.concatenate([self._clean_run, np.zeros(grow, dtype=np.int64)])
            self._flaky_ring = np.vstack([self._flaky_ring, np.zeros((grow, self._flaky_ring.shape[1]), dtype=bool)])
            self._flaky_count = np.concatenate([self._flaky_count, np.zeros(grow, dtype=np.int64)])
            self._flaky_ratio = np.concatenate([self._flaky_ratio, np.zeros(grow)])
            self._flaky_peer = np.concatenate([self._flaky_peer, np.zeros(grow)])
            self._episode_slow = np.concatenate([self._episode_slow, np.zeros(grow, dtype=np.int64)])
            self._episode_steps = np.concatenate([self._episode_steps, np.zeros(grow, dtype=np.int64)])
            self._data_run = np.concatenate([self._data_run, np.zeros(grow, dtype=np.int64)])
            for name in ("_data_ring", "_data_peer_ring"):
                ring = getattr(self, name)
                setattr(self, name, np.vstack([ring, np.full((grow, ring.shape[1]), np.nan)]))
            self._episode_start = np.concatenate([self._episode_start, np.full(grow, -1, dtype=np.int64)])
            self._nodes.extend([None] * grow)
        return np.fromiter((slot[int(r)] for r in ranks), dtype=np.int64, count=len(ranks))

    #: The settings this rule takes (set after the class: its constructor's keywords among
    #: ``StragglerSettings``; the ``long_*`` rest configures the long-horizon rule).
    TUNABLE: tuple[str, ...] = ()
    _INTS = frozenset({"min_flagged", "window", "clear_after", "min_peers", "warmup_steps", "evidence_window",
                       "holdoff_steps", "intermittent_window"})
    #: Weight (rank-steps) of the ``spike_rate_floor`` prior in the background rate; its decay half-life (steps).
    _BG_PRIOR = 1000.0
    _BG_HALFLIFE = 200.0

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
        if window != self.window:
            self._slow_ring = self._resized(self._slow_ring, self.window, window, False)
            for name in ("_data_ring", "_data_peer_ring"):
                setattr(self, name, self._resized(getattr(self, name), self.window, window, np.nan))
        intermittent = int(new.get("intermittent_window", self.intermittent_window))
        if intermittent < 0:
            raise ValueError("need intermittent_window >= 0")
        if max(intermittent, 1) != self._flaky_ring.shape[1]:
            old, width = self._flaky_ring.shape[1], max(intermittent, 1)
            self._flaky_ring = self._resized(self._flaky_ring, old, width, False, self._flaky_n)
            self._flaky_count = self._flaky_ring.sum(axis=1).astype(np.int64)
            self._flaky_steps = self._resized(self._flaky_steps[None, :], old, width, -1, self._flaky_n)[0]
            self._flaky_need.clear()
        if evidence_window != self.evidence_window:
            for name in ("_ratio_ring", "_z_ring", "_value_ring", "_peer_ring"):
                setattr(self, name, self._resized(getattr(self, name), self.evidence_window, evidence_window,
                                                  np.nan))
        for name, value in new.items():
            setattr(self, name, int(value) if name in self._INTS else float(value))

    def _resized(self, ring: np.ndarray, old: int, new: int, fill, written: int | None = None) -> np.ndarray:
        # Columns are written at ``written % width`` (``_evaluated`` unless given): keep the newest ones
        # that fit, placed where the new width expects them, so the next write lands after them.
        written = self._evaluated if written is None else written
        out = np.full((ring.shape[0], new), fill, dtype=ring.dtype)
        keep = min(written, old, new)
        for k in range(1, keep + 1):
            out[:, (written - k) % new] = ring[:, (written - k) % old]
        return out

    @property
    def firing(self) -> dict[int, Alert]:
        """Open straggler alerts by rank."""
        return dict(self._firing)

    def speaking_for(self):
        """Ranks this rule speaks for: firing, or held off from re-firing (the long-horizon rule leaves them)."""
        return self._firing.keys() | self._suppressed if self._suppressed else self._firing

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
        peers = None
        flaky_slow = flaky_ratio = None
        if small:
            # Too few peers for a robust median: each rank's pace against its peers on this step, against its
            # own usual pace, over a run of steps (models/steps/small_group.py).
            self._pace.spread_floor = self.spread_floor
            judged = self._pace.judge(step.ranks, x, step.step)
            if judged is None:  # baselines still being learnt
                self._pace.learn(off=False, flagged=False)
                return []
            ratio, z, peers = judged.ratio, judged.z, judged.expected
            # The intermittent rule counts single slow steps, not sustained ones.
            flaky_ratio = judged.step_ratio
            flaky_slow = (flaky_ratio >= self.ratio_threshold) & (judged.step_z >= self.z_threshold)
        elif self.rank_class:
            spread = max(normal_mad(x, peer), self.spread_floor * peer, 1e-9)
            peers, spreads = self._class_peers(step.ranks, x, peer, spread)
            ratio = x / peers
            z = (x - peers) / spreads
        else:
            spread = max(normal_mad(x, peer), self.spread_floor * peer, 1e-9)
            ratio = x / peer
            z = (x - peer) / spread
        self._basis = "self" if small else "peers"
        slow = (ratio >= self.ratio_threshold) & (z >= self.z_threshold)
        if flaky_slow is not None:  # small group: sustained, and slow on this step too
            slow &= flaky_ratio >= self.ratio_threshold
        self.last_verdict = StepVerdict(step.step, signal, step.ranks, ratio, z, slow)
        if self.on_verdict is not None:
            self.on_verdict(self, self.last_verdict)

        slots = self._slots_for(step.ranks)
        first = self._first_of_run(slots)
        # The rows of the step's ranks in the rings: a slice when consecutive (the usual step), a view instead of
        # a gather; the same values as ``slots`` (each slot once)
        at = slots if first is None else slice(first, first + len(slots))
        col = self._evaluated % self.window
        ecol = self._evaluated % self.evidence_window
        if self._evaluated >= self.window:
            self._learn_background(step.ranks, slots, at, col)
        if self.intermittent_window:
            self._count_intermittent(slots, at, slow if flaky_slow is None else flaky_slow,
                                     ratio if flaky_ratio is None else flaky_ratio, step.step, signal,
                                     np.broadcast_to(peers if peers is not None else peer, ratio.shape))
        self._evaluated += 1
        self._slow_ring[at, col] = slow
        self._ratio_ring[at, ecol] = ratio
        self._z_ring[at, ecol] = z
        self._value_ring[at, ecol] = x
        self._peer_ring[at, ecol] = peers if peers is not None else peer
        if first is not None and None not in step.nodes:  # the usual step: one slice write
            self._nodes[first:first + len(slots)] = step.nodes
        else:
            for slot, node in zip(slots, step.nodes):
                if node is not None:
                    self._nodes[slot] = node
        data_slow = self._judge_data(step, at, col, peer) if signal == "compute_time" and not small else None
        # Ranks missing from this step carry their old verdicts; they neither fire nor clear.
        counts = self._slow_ring[at].sum(axis=1)
        new_episode = slow & (counts == 1) & (self._episode_start[at] < 0)
        self._episode_start[slots[new_episode]] = step.step
        busy = slow if data_slow is None else slow | data_slow
        self._clean_run[at] = np.where(busy, 0, self._clean_run[at] + 1)
        self._episode_start[slots[counts == 0]] = -1

        if small:  # a step joins the baselines only while no rank of the group is off its pace, flagged or firing
            off = np.abs(np.log(ratio)) >= math.log(self.ratio_threshold)
            self._pace.learn(off=bool(off.any()),
                             flagged=bool(counts.any()) or any(int(r) in self._firing for r in step.ranks))

        out: list[Alert] = []
        for rank in [r for r in self._suppressed if self._slow_ring[self._slot[r]].sum() == 0
                     and self._clean_run[self._slot[r]] >= self._clean_needed(self._slot[r])]:
            self._suppressed.discard(rank)  # that episode is over (by the hysteresis that resolves alerts)
        candidates = np.flatnonzero(counts >= self.min_flagged)
        rate = self._background_now(slots, counts, candidates) if len(candidates) else 0.0
        for i in candidates:
            rank = int(step.ranks[i])
            if rank not in self._firing and self._not_coincidence(int(slots[i]), int(counts[i]), rate) \
                    and self._past_holdoff(rank, int(slots[i]), step.step):
                alert = self._fire(rank, int(slots[i]), signal, step)
                self._firing[rank] = alert
                self._start_episode(int(slots[i]))
                out.append(alert)
        if self.intermittent_window:
            for i in self._intermittent_candidates(slots):
                rank = int(step.ranks[i])
                if rank not in self._firing and self._past_holdoff(rank, int(slots[i]), step.step):
                    alert = self._fire_intermittent(rank, int(slots[i]), signal, step)
                    self._firing[rank] = alert
                    self._start_episode(int(slots[i]))
                    out.append(alert)
        if data_slow is not None:
            for i in np.flatnonzero(self._data_run[slots] >= self.window):
                rank = int(step.ranks[i])
                if rank not in self._firing:
                    alert = self._fire_data(rank, int(slots[i]), step)
                    self._firing[rank] = alert
                    self._start_episode(int(slots[i]))
                    out.append(alert)
        for rank in [r for r in self._firing if self._clean_run[self._slot[r]] >= self._clean_needed(self._slot[r])]:
            out.append(self._resolve(rank, step))
        out.extend(self._moved(step, slots, counts, signal))
        return out

    def _moved(self, step: GroupStep, slots: np.ndarray, counts: np.ndarray, signal: str) -> list[Alert]:
        """New versions (same id, start and first step) of firing alerts whose rank's ratio moved by more than
        ``REPUBLISH_MOVE`` from the one published while the rank is still slow by the rule: the estimate follows
        the truth (a window that still held pre-onset steps, a slowdown that keeps growing)."""
        out: list[Alert] = []
        if not self._firing:
            return out
        for i in np.flatnonzero(counts >= self.min_flagged):
            rank = int(step.ranks[i])
            alert = self._firing.get(rank)
            if alert is None or alert.evidence.get("pattern") or alert.evidence.get("signal") != signal:
                continue  # an intermittent or data-wait alert's ratio is another measure
            since = self._published_at.setdefault(rank, self._evaluated)
            old = alert.evidence.get("ratio")
            slot = int(slots[i])
            # Moved for good, not by noise: the window's ratio and the median of every step judged since the
            # last version (a window of them at least, the evidence ring's at most) both moved.
            n = min(self._evaluated - since, self.evidence_window)
            if n < self.window or not isinstance(old, (int, float)) or old <= 0:
                continue
            ring = self._ratio_ring[slot, (self._evaluated - 1 - np.arange(n)) % self.evidence_window]
            ring = ring[~np.isnan(ring)]
            now = self._evidence(slot, signal).get("ratio")
            if not len(ring) or not isinstance(now, (int, float)) or abs(now / old - 1.0) <= REPUBLISH_MOVE \
                    or abs(float(np.median(ring)) / old - 1.0) <= REPUBLISH_MOVE:
                continue
            first = alert.evidence.get("first_step")
            new = self._fire(rank, slot, signal, step, first_step=first if isinstance(first, int) else None)
            new = dataclasses.replace(new, id=alert.id, starts_at=alert.starts_at)
            self._firing[rank] = new
            self._published_at[rank] = self._evaluated
            out.append(new)
        return out

    # -- intermittent slowness ------------------------------------------------------------------

    def _count_intermittent(self, slots: np.ndarray, at, slow: np.ndarray, ratio: np.ndarray, step: int,
                            signal: str, peers: np.ndarray) -> None:
        """This step's verdicts into each rank's ring of its last ``intermittent_window`` (the count kept equal
        to the ring's row sum: only the ranks written change); ``at``: ``slots``, or the slice they make."""
        width = self._flaky_ring.shape[1]
        if signal != "step_time":
            self._rich_at = self._evaluated
        elif self._rich_at >= 0 and self._evaluated - self._rich_at < width:
            # Judged on the step time (every rank waits alike in synchronous training) while the job's other
            # steps carry compute or arrival times: says nothing, and would read a steady straggler as flaky.
            return
        col = self._flaky_n % width
        self._flaky_n += 1
        self._flaky_count[at] += slow.astype(np.int64) - self._flaky_ring[at, col]
        self._flaky_ring[at, col] = slow
        self._flaky_steps[col] = step
        self._episode_slow[at] += slow
        self._episode_steps[at] += 1
        if slow.any():
            hit = slots[slow]
            old = self._flaky_ratio[hit]
            self._flaky_ratio[hit] = np.where(old > 0, 0.8 * old + 0.2 * ratio[slow], ratio[slow])
            self._flaky_peer[hit] = np.where(old > 0, 0.8 * self._flaky_peer[hit] + 0.2 * peers[slow], peers[slow])

    def _intermittent_candidates(self, slots: np.ndarray) -> np.ndarray:
        """Indices (into this step's ranks) of ranks whose slow steps in the window are too many for their peers'
        rate and were clearly slow."""
        seen = min(self._flaky_n, self._flaky_ring.shape[1])
        counts = self._flaky_count[slots]
        floor_need = self._need(seen, self.spike_rate_floor)  # the fewest at the lowest rate: a cheap filter
        maybe = np.flatnonzero((counts >= floor_need)
                               & (self._flaky_ratio[slots] >= 1.0 + 2.0 * (self.ratio_threshold - 1.0)))
        if not len(maybe):
            return maybe
        total, others = int(self._flaky_count.sum()), len(self._flaky_count) - 1
        keep = []
        for i in maybe:
            slot = int(slots[i])
            if self._clean_run[slot] >= self._clean_needed(slot):
                continue  # the pattern ended (a long enough clean run): nothing to fire now
            k = int(counts[i])
            span = self._span(slot)
            if k >= 0.5 * span:
                continue  # slow on most steps: the short rule's (a steady straggler), not a flaky pattern
            if 1.0 + (k / span) * (float(self._flaky_ratio[slot]) - 1.0) < self.ratio_threshold:
                continue  # costs the job less on average than one slow step must: rare mild outliers, no page
            rate = max(self.spike_rate_floor, (total - k) / max(others * seen, 1))
            if _binomial_tail(k, seen, rate) <= self.coincidence_p:
                keep.append(i)
        return np.asarray(keep, dtype=np.int64)

    def _first_slow(self, slot: int) -> int:
        """The step of the rank's oldest slow verdict in its window (-1: none)."""
        cols = np.flatnonzero(self._flaky_ring[slot])
        return int(self._flaky_steps[cols].min()) if len(cols) else -1

    def _span(self, slot: int) -> int:
        """Steps counted since the rank's oldest slow step in its window."""
        first = self._first_slow(slot)
        return max(1, int((self._flaky_steps >= first).sum())) if first >= 0 else 1

    def _start_episode(self, slot: int) -> None:
        # Its slow steps in the window so far count: the episode began before the alert fired.
        self._episode_slow[slot] = self._flaky_count[slot]
        self._episode_steps[slot] = min(self._flaky_n, self._flaky_ring.shape[1])

    def _need(self, seen: int, rate: float) -> int:
        """The fewest slow steps of ``seen`` whose chance at ``rate`` is at most ``coincidence_p`` (cached)."""
        key = (seen, rate)
        need = self._flaky_need.get(key)
        if need is None:
            need = max(INTERMITTENT_MIN, self.min_flagged)
            while need <= seen and _binomial_tail(need, seen, rate) > self.coincidence_p:
                need += 1
            if len(self._flaky_need) > 1024:
                self._flaky_need.clear()
            self._flaky_need[key] = need
        return need

    def _clean_needed(self, slot: int) -> int:
        """Clean steps that end an episode: ``clear_after``, or more while the rank's slow rate before its clean
        run makes so many clean steps in a row likely (a flaky rank is clean most steps)."""
        need = self.clear_after
        if not self.intermittent_window:
            return need
        clean = int(self._clean_run[slot])
        # The slow rate before the clean run: over the window, and over the whole episode (a burst in the
        # window alone would overstate it); the lower one, which asks for the longer clean run.
        rates = [k / n for k, n in ((int(self._flaky_count[slot]), min(self._flaky_n, self._flaky_ring.shape[1])
                                     - clean), (int(self._episode_slow[slot]), int(self._episode_steps[slot]) - clean))
                 if n > 0 and k > 0]
        q = min(rates, default=1.0)
        if q < 1.0:
            need = max(need, math.ceil(math.log(RECOVERY_P) / math.log1p(-q)))
        return need

    def _fire_intermittent(self, rank: int, slot: int, signal: str, step: GroupStep) -> Alert:
        width = self._flaky_ring.shape[1]
        seen = min(self._flaky_n, width)
        k = int(self._flaky_count[slot])
        first_step = self._first_slow(slot)
        first_step = first_step if first_step >= 0 else step.step
        total, others = int(self._flaky_count.sum()), len(self._flaky_count) - 1
        peer_rate = (total - k) / max(others * seen, 1)
        when_slow = float(self._flaky_ratio[slot])
        # What it costs on average since it began: slow steps at their ratio, the rest at par.
        rate = min(1.0, k / self._span(slot))
        ratio = 1.0 + rate * (when_slow - 1.0)
        evidence = self._evidence(slot, signal)
        evidence.update(
            pattern="intermittent", slow_steps=k, window=seen, slow_rate=_round(k / seen),
            peer_slow_rate=_round(peer_rate), slow_step_ratio=_round(when_slow), ratio=_round(ratio),
            first_step=first_step, detected_step=step.step)
        # Its mean pace against the peers' on its slow steps (its last steps are mostly clean, and a job whose
        # steps mix signals would compare the step time with the arrival time).
        peer = float(self._flaky_peer[slot])
        if peer > 0:
            evidence.update(peer_median=_round(peer), rank_median=_round(peer * ratio))
        evidence.update(straggler_cost(evidence, step))  # models/steps/cost.py
        node = self._nodes[slot]
        where = f"rank {rank}" + (f" on node {node}" if node else "")
        group = f" among group {self.group}" if self.group else ""
        summary = (f"straggler: {where} is intermittently slow: {when_slow:.2f}x its peers{group} on {k} of its last "
                   f"{seen} steps (peers: {peer_rate:.1%} of theirs), {ratio:.2f}x on average, since step "
                   f"{first_step} (a flaky device or host)")
        return Alert(id=alert_id(self.job, "straggler", self.group, rank, first_step), status="firing",
                     type="straggler", severity="critical" if ratio >= self.critical_ratio else "warning",
                     job=self.job, ranks=(rank,), nodes=(node,) if node else (), starts_at=step.ts,
                     summary=summary, evidence=evidence)

    def _class_peers(self, ranks: np.ndarray, x: np.ndarray, peer: float, spread: float
                     ) -> tuple[np.ndarray, np.ndarray]:
        """Peer median and spread of each rank's own class (ranks without one: the whole group's)."""
        peers = np.full(len(x), peer)
        spreads = np.full(len(x), spread)
        cls = np.fromiter((self.rank_class.get(int(r), -1) for r in ranks), dtype=np.int64, count=len(ranks))
        for c in np.unique(cls[cls >= 0]):
            members = cls == c
            if members.sum() < self.min_peers:
                peers[members] = np.inf  # too few alike peers to judge: never slow
                continue
            m = median(x[members])
            peers[members] = m
            spreads[members] = max(normal_mad(x[members], m), self.spread_floor * m, 1e-9)
        return peers, spreads

    def _learn_background(self, ranks: np.ndarray, slots: np.ndarray, at, col: int) -> None:
        # The verdicts about to leave the window, of ranks with no other slow step in it and not
        # firing: what isolated spikes look like in this job (a rank slow on and off, e.g. warming
        # up to a straggler, is left out, or one rank of 64 would inflate the rate by 1.5%).
        counts = self._slow_ring[at].sum(axis=1)
        keep = counts <= 1
        if self._firing:
            keep &= ~np.isin(ranks, np.fromiter(self._firing, dtype=np.int64))
        decay = 0.5 ** (1.0 / self._BG_HALFLIFE)
        self._bg_slow = decay * self._bg_slow + float(self._slow_ring[slots[keep], col].sum())
        self._bg_n = decay * self._bg_n + float(keep.sum())

    def _background_now(self, slots: np.ndarray, counts: np.ndarray, candidates: np.ndarray) -> float:
        """The rate the k-of-n test judges ``candidates`` at: the learned background, or the rate of slow steps
        of the other ranks over the same recent steps when higher. A rotating MoE hot expert or job-wide jitter
        makes every rank slow on a share of its steps; in a small job the learned rate takes hundreds of steps
        to reach it, and until then each rank that happens to be slow 3 steps in 5 would page. The other ranks
        show the share at once: their slow verdicts of the intermittent ring (its last ``intermittent_window``
        steps; the k-of-n window without it). Candidates and firing ranks are not among them, so two
        stragglers or a whole node at once still fire at the learned rate. Their rate is taken only when the
        learned one cannot explain it (chance at most ``WINDOW_RATE_P``): in a big job their few spikes are the
        background the learned rate already holds, and a rate read from them would only delay stragglers."""
        rate = self.spike_rate()
        if self._basis == "self":  # a small group judges each rank against its own pace: too few others to read
            return rate
        mine = set(slots[candidates].tolist()) | {self._slot[r] for r in self._firing}
        mine_at = np.fromiter(mine, dtype=np.int64, count=len(mine))
        if self.intermittent_window and self._flaky_n:
            ring, steps = self._flaky_count, min(self._flaky_n, self._flaky_ring.shape[1])
        else:
            ring, steps = self._slow_ring.sum(axis=1), min(self._evaluated, self.window)
        n = (len(ring) - len(mine_at)) * steps
        slow = int(ring.sum()) - int(ring[mine_at].sum())
        if n > 0 and slow > 1 and slow / n > rate and _poisson_tail(slow, n * rate) <= WINDOW_RATE_P:
            rate = (slow - 1) / n  # a lone slow step of theirs sets no rate
        return rate

    def spike_rate(self) -> float:
        """The job's background rate of slow rank-steps (independent spikes), floored."""
        floor = self.spike_rate_floor
        return max(floor, (self._bg_slow + floor * self._BG_PRIOR) / (self._bg_n + self._BG_PRIOR))

    def _not_coincidence(self, slot: int, count: int, rate: float) -> bool:
        """Too many slow steps to be independent spikes at the background ``rate``?"""
        if self.coincidence_p >= 1.0:
            return True
        if _binomial_tail(count, self.window, rate) <= self.coincidence_p:
            return True
        r, z = self._ratio_ring[slot], self._z_ring[slot]
        seen = ~np.isnan(r)
        k = int(((r[seen] >= self.ratio_threshold) & (z[seen] >= self.z_threshold)).sum())
        return int(seen.sum()) > self.window and _binomial_tail(k, int(seen.sum()), rate) <= self.coincidence_p

    def _past_holdoff(self, rank: int, slot: int, step: int) -> bool:
        """A rank that resolved recently fires again only when clearly worse; else it is a flap."""
        resolved = self._resolved.get(rank)
        if resolved is None or step - resolved[0] > self.holdoff_steps:
            return True
        recent = (self._evaluated - 1 - np.arange(min(self.window, self._evaluated))) % self.evidence_window
        ratios = self._ratio_ring[slot, recent]
        ratio = float(np.median(ratios[~np.isnan(ratios)]))
        worse = ratio >= self.critical_ratio or ratio - 1.0 >= 1.5 * (resolved[1] - 1.0)
        if rank not in self._suppressed:
            outcome = "refired" if worse else "suppressed"
            self.flaps[outcome] += 1
            if self.on_flap is not None:
                self.on_flap(self, outcome)
            if not worse:
                self._suppressed.add(rank)
        return worse

    def _judge_data(self, step: GroupStep, at, col: int, compute_median: float) -> np.ndarray | None:
        """Input-pipeline channel: a rank whose data wait exceeds its peers' by the straggler
        margin of a typical compute time (and by the robust z threshold) on every one of the
        last ``window`` steps. Stricter than the compute rule (all of the window, not k of it):
        single data-loader hiccups are common and harmless, a stall is persistent."""
        d = step.data_time
        if np.isnan(d).any():
            return None
        peer = step_median(step, "data_time")
        spread = max(normal_mad(d, peer), self.spread_floor * compute_median, 1e-9)
        excess = d - peer
        data_slow = (excess >= (self.ratio_threshold - 1.0) * compute_median) & (excess / spread >= self.z_threshold)
        self._data_run[at] = np.where(data_slow, self._data_run[at] + 1, 0)
        self._data_ring[at, col] = d
        self._data_peer_ring[at, col] = peer
        self._data_compute = compute_median
        return data_slow

    def _fire_data(self, rank: int, slot: int, step: GroupStep) -> Alert:
        waits = self._data_ring[slot]
        ok = ~np.isnan(waits)
        rank_wait = float(np.median(waits[ok]))
        peer_wait = float(np.median(self._data_peer_ring[slot][ok]))
        compute = self._data_compute
        # How much longer this rank makes the step: its extra wait on top of a typical step.
        ratio = (compute + rank_wait) / (compute + peer_wait) if compute + peer_wait > 0 else float("nan")
        first_step = step.step - self.window + 1
        node = self._nodes[slot]
        where = f"rank {rank}" + (f" on node {node}" if node else "")
        evidence = DataWaitEvidence(
            group=self.group or None, rank_median=_round(rank_wait), peer_median=_round(peer_wait),
            compute_median=_round(compute), ratio=_round(ratio), window=self.window, first_step=first_step,
            detected_step=step.step, ratio_threshold=self.ratio_threshold, z_threshold=self.z_threshold,
        ).to_dict()
        evidence.update(straggler_cost(evidence, step))  # what it costs the job (models/steps/cost.py)
        summary = (f"straggler: {where} waits {rank_wait - peer_wait:.3f}s longer for input data than its peers "
                   f"every step (data_time {evidence['rank_median']}s vs peer median {evidence['peer_median']}s), "
                   f"making steps {ratio:.2f}x slower, since step {first_step}: input pipeline")
        return Alert(id=alert_id(self.job, "straggler", self.group, rank, first_step), status="firing",
                     type="straggler", severity="critical" if ratio >= self.critical_ratio else "warning",
                     job=self.job, ranks=(rank,), nodes=(node,) if node else (), starts_at=step.ts,
                     summary=summary, evidence=evidence)

    def _evidence(self, slot: int, signal: str) -> dict:
        # The last `window` judged steps: the ones that made the rule true (or clear).
        recent = (self._evaluated - 1 - np.arange(min(self.window, self._evaluated))) % self.evidence_window
        values = self._value_ring[slot, recent]
        peers = self._peer_ring[slot, recent]
        ok = ~np.isnan(values)
        rank_median = float(np.median(values[ok])) if ok.any() else None
        peer_median = float(np.median(peers[ok])) if ok.any() else None
        return PeerEvidence(
            signal=StragglerSignal(signal), group=self.group or None, rank_median=_round(rank_median),
            peer_median=_round(peer_median),
            ratio=_round(rank_median / peer_median) if rank_median and peer_median else None,
            robust_z=_round(float(np.median(self._z_ring[slot, recent][ok]))) if ok.any() else None,
            slow_steps=int(self._slow_ring[slot].sum()), window=self.window,
            recent_ratios=tuple(_round(float(r), 3) for r in self._ratio_ring[slot, recent][ok]),
            ratio_threshold=self.ratio_threshold, z_threshold=self.z_threshold, baseline=Baseline(self._basis),
        ).to_dict()

    def _fire(self, rank: int, slot: int, signal: str, step: GroupStep, *, first_step: int | None = None) -> Alert:
        if first_step is None:  # (given: a new version of an alert, its episode's first step)
            first_step = int(self._episode_start[slot]) if self._episode_start[slot] >= 0 else step.step
            if self._basis == "self":  # a run of steps was judged: its slowdown began before the first slow verdict
                onset = self._pace.onset(rank, self.ratio_threshold)
                first_step = min(first_step, onset) if onset is not None else first_step
        evidence = self._evidence(slot, signal)
        evidence.update(first_step=first_step, detected_step=step.step, **straggler_cost(  # models/steps/cost.py
            evidence, step, self._value_ring[:, (self._evaluated - 1 - np.arange(min(self.window, self._evaluated)))
                                             % self.evidence_window], slot))
        if signal == "arrival":
            evidence["arrival_source"] = step.comm_source
            if step.comm_ops is not None:
                evidence["process_group"], evidence["op"] = step.comm_ops
        ratio = evidence["ratio"] or float(self._ratio_ring[slot, (self._evaluated - 1) % self.evidence_window])
        node = self._nodes[slot]
        where = f"rank {rank}" + (f" on node {node}" if node else "")
        group = f" among group {self.group}" if self.group else ""
        if self._basis == "self":
            summary = (f"straggler: {where} is {ratio:.2f}x slower than its own recent steps while its "
                       f"{len(step.ranks) - 1} peer(s){group} kept their pace ({signal} {evidence['rank_median']}s "
                       f"vs {evidence['peer_median']}s expected, robust z {evidence['robust_z']}) since step "
                       f"{first_step}")
        else:
            summary = (f"straggler: {where} is {ratio:.2f}x slower than its peers{group} "
                       f"({signal} {evidence['rank_median']}s vs peer median {evidence['peer_median']}s, "
                       f"robust z {evidence['robust_z']}) since step {first_step}")
        return Alert(
            id=alert_id(self.job, "straggler", self.group, rank, first_step),
            status="firing",
            type="straggler",
            severity="critical" if ratio >= self.critical_ratio else "warning",
            job=self.job,
            ranks=(rank,),
            nodes=(node,) if node else (),
            starts_at=step.ts,
            summary=summary,
            evidence=evidence,
        )

    def _resolve(self, rank: int, step: GroupStep) -> Alert:
        alert = self._firing.pop(rank)
        self._published_at.pop(rank, None)
        slot = self._slot[rank]
        # The episode is over: its slow steps do not count towards a new intermittent pattern.
        self._flaky_ring[slot] = False
        self._flaky_count[slot] = 0
        self._flaky_ratio[slot] = 0.0
        self._flaky_peer[slot] = 0.0
        ratio = alert.evidence.get("ratio")
        self._resolved[rank] = (step.step, float(ratio) if isinstance(ratio, (int, float)) else self.ratio_threshold)
        evidence = dict(alert.evidence)
        clean = int(self._clean_run[slot])
        evidence.update(resolved_step=step.step, clean_steps=clean)
        still = self._still_slow_by(alert, slot, clean)
        if still is not None:  # clean only because the thresholds were raised while it fired
            changed = ", ".join(f"straggler.{name} {old:g} -> {new:g}" for name, old, new in still[1])
            evidence.update(resolution=Resolution.THRESHOLD_CHANGED.value, resolution_detail=changed,
                            recent_ratio=_round(still[0]))
            summary = (f"resolved: threshold changed ({changed}); rank {rank} is still {still[0]:.2f}x its peers, "
                       f"no longer a straggler by the new threshold ({alert.summary})")
        else:
            evidence["resolution"] = Resolution.RECOVERED.value
            summary = (f"resolved: rank {rank} back in line with its peers since step "
                       f"{step.step - clean + 1} ({alert.summary})")
        return alert.resolved(at=step.ts, summary=summary, evidence=evidence)

    def _still_slow_by(self, alert: Alert, slot: int, clean: int) -> tuple[float, list] | None:
        """When the thresholds were raised since ``alert`` fired and its rank's recent steps are still slow
        by the thresholds it fired with: (their median ratio, [(setting, old, new)]); else None."""
        ev = alert.evidence
        old_ratio, old_z = ev.get("ratio_threshold"), ev.get("z_threshold")
        if not isinstance(old_ratio, (int, float)) or not isinstance(old_z, (int, float)):
            return None
        raised = [(name, old, new) for name, old, new in (("ratio_threshold", old_ratio, self.ratio_threshold),
                                                           ("z_threshold", old_z, self.z_threshold)) if new > old]
        if not raised:
            return None
        recent = (self._evaluated - 1 - np.arange(min(clean, self._evaluated, self.evidence_window))) \
            % self.evidence_window
        r, z = self._ratio_ring[slot, recent], self._z_ring[slot, recent]
        ok = ~np.isnan(r)
        if not ok.any():
            return None
        slow = (r[ok] >= old_ratio) & (z[ok] >= old_z)
        if 2 * int(slow.sum()) < int(ok.sum()):
            return None  # mostly clean by the old thresholds too: it recovered
        return float(np.median(r[ok])), raised

    def close_all(self, *, at: float, reason: str) -> list[Alert]:
        """Resolve every open alert (the job ended)."""
        out = []
        self._published_at.clear()
        for rank in list(self._firing):
            alert = self._firing.pop(rank)
            out.append(with_resolution(alert.resolved(at=at, summary=f"resolved ({reason}): {alert.summary}"),
                                       Resolution.JOB_ENDED, reason))
        return out


def _poisson_tail(k: int, mu: float) -> float:
    """P(X >= k) for X ~ Poisson(mu) (k terms: callers pass counts of a few steps' slow verdicts)."""
    if k >= 2.0 * mu + 12.0:  # far in the tail (below 1e-3 for any mu): no need to sum
        return 0.0
    below = sum(math.exp(j * math.log(mu) - mu - math.lgamma(j + 1)) for j in range(k)) if mu > 0 else 1.0
    return max(0.0, 1.0 - below)


def _binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    return sum(math.comb(n, j) * p ** j * (1.0 - p) ** (n - j) for j in range(max(k, 0), n + 1))


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


StragglerDetector.TUNABLE = tuple(name for name in runtime_fields(StragglerSettings)
                                  if name in inspect.signature(StragglerDetector.__init__).parameters)
