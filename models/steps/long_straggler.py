"""Long-horizon straggler rule: a rank a few percent slower than its peers, for hours.

The short rule (models/steps/straggler.py) pages for ranks clearly slower (10% and more) within a
few steps. A rank 3-6% slower (a weak cooler, a lower-binned part, a NIC on a busy PCIe
switch) never crosses it, yet the whole synchronous job waits for it every step. With
per-step noise around 1% such a rank is many standard deviations out once a few hundred
steps are seen, so this rule looks at the long run:

* each step, each rank's signal (the short rule's ``compute_time`` / arrival / ``step_time``)
  over the peer median (of its class, when the job has rank classes);
* a **sign test** on that ratio, run sequentially as a Bernoulli CUSUM: the step counts as
  "above" when the ratio exceeds ``1 + min_effect / 2``. A healthy rank is above at most half
  of the time, however heavy-tailed its noise (a sign test only asks which side of the line a
  step fell, so a 2.5x spike weighs no more than a 1.02x step); a rank ``min_effect`` slower
  is above most of the time. The log-likelihood ratio of "above with probability ``p_alt``"
  against "with probability 1/2" is summed (never below 0); at ``threshold`` (16: odds of
  about 10^7 to 1) the evidence is very strong;
* it fires when, in addition, the rank's median ratio since the CUSUM left 0 (at most
  ``window`` steps) is at least ``1 + min_effect`` (a rank steadily 1.6% slow in very quiet noise passes the sign test but is below the effect
  worth reporting), and the short rule is neither firing for it nor holding it off;
* it resolves when the median ratio of the last ``resolve_steps`` steps (all after the alert
  fired) is back under ``1 + min_effect / 2``.

Its cost is measured, not assumed: each step the job waits for a rank by how much the rank's
time exceeds the slowest of the others (0 when another rank is slower still), averaged over
the steps since the onset, as a share of the step time, times the job's ranks and 24 h:
``evidence.gpu_hours_lost_per_day``. Severity ``info``: nothing is broken and nobody should be
woken; the waste is steady and worth a ticket (and, over many jobs, a node ledger entry).
"""

from __future__ import annotations

import math

import numpy as np

from ..alerts import Alert, alert_id
from .assembly import GroupStep
from .layout import kept_ranks, same_ranks
from ..resolution import Resolution, with_resolution
from .robust import median, nan_median, step_median
from .straggler import choose_signal
from .straggler_evidence import LongStragglerCost, LongStragglerEvidence
from ..evidence import StragglerSignal


def _top_two(x: np.ndarray) -> tuple[int, float, float]:
    """``np.argmax(x)`` and the two largest values as ``np.partition`` gives them (1-D, at least 2 values): a few
    ranks' in Python when neither is NaN nor a zero (whose sign numpy's pick sets), the same index and floats."""
    if len(x) <= 16:
        values = x.tolist()
        ordered = sorted(values)
        first, second = ordered[-1], ordered[-2]
        if first == first and second == second and first != 0.0 and second != 0.0 and \
                not any(v != v for v in values):
            return values.index(first), first, second
    second, first = np.partition(x, len(x) - 2)[-2:]
    return int(np.argmax(x)), first, second


def at_rest(cusum: np.ndarray, ratio: np.ndarray, above: float) -> bool:
    """Whether a step leaves these CUSUMs as they are: every one at 0 and no ratio over ``above`` nor NaN (a NaN max
    fails the test), so each would go to ``max(0, 0 + _down) = 0`` (``_down < 0``: ``p_alt > 0.5``). Ten numpy
    calls on a few ranks' arrays the usual step of a healthy job skips."""
    return bool(ratio.size) and not cusum.any() and bool(ratio.max() <= above)


class LongStragglerDetector:
    """Per-rank sequential test on the ratio to the peer median, for one (job, group).

    Example: rank 3 is 5% slower from step 20 on, below the short rule's 10%; this rule reports it.

    >>> import numpy as np
    >>> from stepwatch.models.steps.assembly import GroupStep
    >>> ranks = np.arange(8)
    >>> def step(n):
    ...     compute = np.where((ranks == 3) & (n >= 20), 1.05, 1.0)
    ...     return GroupStep(job="j", group="", step=n, ts=1000.0 + n, ranks=ranks,
    ...                      step_time=np.full(8, compute.max() + 0.1), compute_time=compute,
    ...                      comm_time=compute.max() - compute + 0.1, data_time=np.full(8, 0.01),
    ...                      tokens=np.full(8, 4096.0), nodes=("node-0",) * 8, phase="train")
    >>> detector = LongStragglerDetector(job="j")
    >>> alerts = [alert for n in range(400) for alert in detector.update(step(n))]
    >>> [(str(a.type), str(a.status), str(a.severity), a.ranks) for a in alerts]
    [('straggler', 'firing', 'info', (3,))]

    Hyperparameters (keyword-only):

    * ``min_effect``: smallest steady slowdown worth reporting (0.03: 3%).
    * ``window``: steps of per-rank history for the median ratio and the cost.
    * ``threshold``: CUSUM level (sum of log-likelihood ratios) to fire at.
    * ``p_alt``: the share of steps above ``1 + min_effect / 2`` the alternative assumes.
    * ``resolve_steps``: steps whose median ratio must be back under ``1 + min_effect / 2``.
    * ``min_peers``, ``warmup_steps``: as the short rule's.
    """

    def __init__(self, *, job: str, group: str = "", min_effect: float = 0.03, window: int = 200,
                 threshold: float = 16.0, p_alt: float = 0.7, resolve_steps: int = 100, min_peers: int = 4,
                 warmup_steps: int = 10) -> None:
        if not 0.5 < p_alt < 1.0:
            raise ValueError("need 0.5 < p_alt < 1")
        self.job = job
        self.group = group
        self.min_effect = min_effect
        self.window = window
        self.threshold = threshold
        self.p_alt = p_alt
        self.resolve_steps = min(resolve_steps, window)
        self.min_peers = min_peers
        self.warmup_steps = warmup_steps
        #: rank -> class index (models/steps/imbalance.py): ranks are compared within their class.
        self.rank_class: dict[int, int] = {}
        self._up = math.log(p_alt / 0.5)
        self._down = math.log((1.0 - p_alt) / 0.5)
        self._slot: dict[int, int] = {}
        self._ranks = np.zeros(0, dtype=np.int64)
        self._ratio = np.full((0, window), np.nan)  # per-rank ratio ring
        self._wait = np.full((0, window), np.nan)  # seconds the group waited for the rank, per step
        self._cusum = np.zeros(0)
        self._onset = np.full(0, -1, dtype=np.int64)  # step where the CUSUM last left 0
        self._nodes: list[str | None] = []
        self._step_time = np.full(window, np.nan)  # the group's median step time, per step
        self._peer = np.full(window, np.nan)  # the peer median of the signal, per step
        self._evaluated = 0
        self._first_step: int | None = None
        self._firing: dict[int, Alert] = {}
        self._fired: dict[int, LongStragglerEvidence] = {}  # rank -> what its open alert was fired with
        self._last_lookup: tuple[np.ndarray, np.ndarray] = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))

    @property
    def firing(self) -> dict[int, Alert]:
        return dict(self._firing)

    def _slots_for(self, ranks: np.ndarray) -> tuple[np.ndarray, bool]:
        """Slots of ``ranks``, and whether they differ from the previous step's (most steps: same ranks)."""
        last_ranks, last_slots = self._last_lookup
        if same_ranks(ranks, last_ranks):
            return last_slots, False
        new = [int(r) for r in ranks if int(r) not in self._slot]
        if new:
            for r in new:
                self._slot[r] = len(self._slot)
            grow = len(new)
            self._ranks = np.concatenate([self._ranks, np.asarray(new, dtype=np.int64)])
            self._ratio = np.vstack([self._ratio, np.full((grow, self.window), np.nan)])
            self._wait = np.vstack([self._wait, np.full((grow, self.window), np.nan)])
            self._cusum = np.concatenate([self._cusum, np.zeros(grow)])
            self._onset = np.concatenate([self._onset, np.full(grow, -1, dtype=np.int64)])
            self._nodes.extend([None] * grow)
        slots = np.fromiter((self._slot[int(r)] for r in ranks), dtype=np.int64, count=len(ranks))
        self._last_lookup = (kept_ranks(ranks), slots)
        return slots, True

    def _peers(self, step: GroupStep, signal: str, x: np.ndarray) -> np.ndarray | float | None:
        if not self.rank_class:
            peer = step_median(step, signal, x)
            return peer if peer > 0 else None
        ranks = step.ranks
        cls = np.fromiter((self.rank_class.get(int(r), -1) for r in ranks), dtype=np.int64, count=len(ranks))
        peers = np.full(len(x), step_median(step, signal, x))
        for c in np.unique(cls[cls >= 0]):
            members = cls == c
            peers[members] = median(x[members]) if members.sum() >= self.min_peers else np.nan
        return peers

    def update(self, step: GroupStep, *, job_ranks: int | None = None, exclude=()) -> list[Alert]:
        """Judge one closed step. ``job_ranks``: ranks of the whole job (all wait for a straggler);
        ``exclude``: ranks the short rule is firing for (it speaks for them)."""
        if self._first_step is None:
            self._first_step = step.step
        if step.phase != "train" or step.step < self._first_step + self.warmup_steps:
            return []
        if len(step.ranks) < self.min_peers:
            return []
        chosen = choose_signal(step)
        if chosen is None:
            return []
        signal, x = chosen
        peers = self._peers(step, signal, x)
        if peers is None:
            return []
        slots, changed = self._slots_for(step.ranks)
        col = self._evaluated % self.window
        self._evaluated += 1
        if isinstance(peers, float):  # (> 0: no division by zero, nor 0/0, to silence)
            ratio = x / peers
        else:
            with np.errstate(invalid="ignore", divide="ignore"):
                ratio = x / peers
        self._ratio[slots, col] = ratio
        # What the group waited for each rank: its excess over the slowest of the others.
        self._wait[slots, col] = 0.0
        if len(x) > 1:
            top, first, second = _top_two(x)
            self._wait[slots[top], col] = first - second
        typical = step_median(step, "step_time")  # NaN: no rank reported one
        self._step_time[col] = typical if typical == typical else float(np.nanmax(x))
        self._peer[col] = peers if isinstance(peers, float) else nan_median(peers)
        if changed or self._evaluated % 100 == 1:  # nodes rarely change: not every step
            for slot, node in zip(slots, step.nodes):
                if node is not None:
                    self._nodes[slot] = node

        old = self._cusum[slots]
        if self.threshold > 0 and at_rest(old, ratio, 1.0 + self.min_effect / 2):
            return self._resolutions(step)  # the usual step: no CUSUM moves, no onset, none at the threshold
        above = ratio > 1.0 + self.min_effect / 2  # NaN (no class peers) is never above
        judged = ~np.isnan(ratio)
        new = np.where(judged, np.maximum(0.0, old + np.where(above, self._up, self._down)), old)
        # Cap: a rank that was slow for days must not need days to look healthy again.
        new = np.minimum(new, 2 * self.threshold)
        self._onset[slots[(old == 0) & (new > 0)]] = step.step
        self._cusum[slots] = new

        out: list[Alert] = []
        for i in (new >= self.threshold).nonzero()[0]:  # (1-D: flatnonzero's ravel for nothing)
            rank = int(step.ranks[i])
            if rank in self._firing:
                continue
            if rank in exclude:  # the short rule speaks for it; start afresh once it is done
                self._cusum[slots[i]] = 0.0
                continue
            slot = int(slots[i])
            r = self._ratio[slot, self._since_onset(slot, step.step)]
            r = r[~np.isnan(r)]
            if len(r) and float(np.median(r)) >= 1.0 + self.min_effect:
                alert = self._fire(rank, slot, signal, step, job_ranks or len(step.ranks))
                self._firing[rank] = alert
                out.append(alert)
        return out + self._resolutions(step)

    def _resolutions(self, step: GroupStep) -> list[Alert]:
        """Open alerts whose rank is back in line over the last ``resolve_steps`` steps, resolved."""
        out: list[Alert] = []
        for rank in list(self._firing):
            if step.step - self._fired[rank].detected_step < self.resolve_steps:
                continue  # judge "back" on steps after the alert only (the window before holds healthy ones)
            slot = self._slot[rank]
            recent = (self._evaluated - 1 - np.arange(min(self.resolve_steps, self._evaluated))) % self.window
            r = self._ratio[slot, recent]
            r = r[~np.isnan(r)]
            if len(r) >= self.resolve_steps and float(np.median(r)) < 1.0 + self.min_effect / 2:
                self._cusum[slot] = 0.0
                out.append(self._resolve(rank, step, float(np.median(r)), len(r)))
        return out

    def _resolve(self, rank: int, step: GroupStep, ratio: float, steps: int) -> Alert:
        alert = self._firing.pop(rank)
        fired_with = self._fired.pop(rank).min_effect
        if self.min_effect > fired_with and ratio >= 1.0 + fired_with / 2:
            # Clean only by the raised setting: say so, not "back in line".
            detail = f"straggler.long_min_effect {fired_with:g} -> {self.min_effect:g}"
            evidence = {**alert.evidence, "resolution": Resolution.THRESHOLD_CHANGED,
                        "resolution_detail": detail, "recent_ratio": round(ratio, 4)}
            summary = (f"resolved: threshold changed ({detail}); rank {rank} is still {100 * (ratio - 1):.1f}% "
                       f"slower than its peers over the last {steps} steps ({alert.summary})")
        else:
            evidence = {**alert.evidence, "resolution": Resolution.RECOVERED}
            summary = f"resolved: rank {rank} back in line with its peers over the last {steps} steps ({alert.summary})"
        return alert.resolved(at=step.ts, summary=summary, evidence=evidence)

    def _since_onset(self, slot: int, step: int) -> np.ndarray:
        """Ring columns of the steps since the rank's CUSUM left 0 (at most ``window``)."""
        onset = int(self._onset[slot])
        n = self.window if onset < 0 else max(1, min(self.window, step - onset + 1, self._evaluated))
        n = min(n, self._evaluated)
        return (self._evaluated - 1 - np.arange(n)) % self.window

    def cost(self, slot: int, job_ranks: int, cols: np.ndarray | None = None) -> LongStragglerCost:
        """What the job loses to this rank (over ``cols``, default the window): seconds per step,
        share of the step time, GPU-hours a day."""
        waits = self._wait[slot] if cols is None else self._wait[slot, cols]
        waits = waits[~np.isnan(waits)]
        lost = float(np.mean(waits)) if len(waits) else 0.0
        step_time = float(np.nanmedian(self._step_time))
        share = min(lost / step_time, 1.0) if step_time > 0 else 0.0
        # the job's step over the step without this rank's excess (models/steps/cost.py's job_slowdown)
        return LongStragglerCost(seconds_lost_per_step=round(lost, 5), step_share_lost=round(share, 5),
                                 job_slowdown=round(1.0 / (1.0 - min(share, 0.99)), 4), job_ranks=int(job_ranks),
                                 gpu_hours_lost_per_day=round(job_ranks * 24.0 * share, 2))

    def _fire(self, rank: int, slot: int, signal: str, step: GroupStep, job_ranks: int) -> Alert:
        cols = self._since_onset(slot, step.step)
        r = self._ratio[slot, cols]
        ok = ~np.isnan(r)
        ratio = float(np.median(r[ok]))
        peer = float(np.nanmedian(self._peer[cols]))
        onset = int(self._onset[slot]) if self._onset[slot] >= 0 else step.step
        cost = self.cost(slot, job_ranks, cols)
        node = self._nodes[slot]
        where = f"rank {rank}" + (f" on node {node}" if node else "")
        group = f" among group {self.group}" if self.group else ""
        evidence = LongStragglerEvidence(
            signal=StragglerSignal(signal), group=self.group or None, ratio=round(ratio, 4),
            rank_median=round(ratio * peer, 4), peer_median=round(peer, 4), steps=int(ok.sum()), window=self.window,
            cusum=round(float(self._cusum[slot]), 2), threshold=self.threshold, min_effect=self.min_effect,
            first_step=onset, detected_step=step.step, rank_class=self.rank_class.get(rank), cost=cost)
        self._fired[rank] = evidence
        summary = (f"straggler (long horizon): {where} is {100 * (ratio - 1):.1f}% slower than its peers{group} "
                   f"over the last {evidence.steps} steps (median ratio {ratio:.3f}, since step {onset}); "
                   f"the job waits {100 * cost.step_share_lost:.1f}% of each step for it, about "
                   f"{cost.gpu_hours_lost_per_day:.0f} GPU-hours a day")
        return Alert(id=alert_id(self.job, "straggler", self.group, rank, "long", onset), status="firing",
                     type="straggler", severity="info", job=self.job, ranks=(rank,), nodes=(node,) if node else (),
                     starts_at=step.ts, summary=summary, evidence=evidence.to_dict())

    def hand_over(self, rank: int) -> Alert | None:
        """Let go of ``rank``'s open alert without resolving it (the short-horizon rule's alert continues it: one
        slow rank, one incident); None if none is open."""
        self._fired.pop(rank, None)
        return self._firing.pop(rank, None)

    def close_all(self, *, at: float, reason: str) -> list[Alert]:
        out = [with_resolution(a.resolved(at=at, summary=f"resolved ({reason}): {a.summary}"), Resolution.JOB_ENDED,
                               reason) for a in self._firing.values()]
        self._firing.clear()
        self._fired.clear()
        return out
