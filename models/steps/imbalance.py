"""Job-level imbalance: pipeline stages of unequal cost, and ranks that fall into classes.

Both are steady waste, not a bad worker, and both are reported once per job (severity
``info``), and again only when the picture changes:

* **stage** (``evidence.kind: "stage"``): when ranks carry a ``group`` (pipeline stage), the
  stages' typical compute time (the median over ``window`` steps of each stage's per-step
  median) is compared. When the slowest stage is at least ``1 + stage_min_effect`` times the
  median stage, every other stage idles for it each step: ``evidence.groups`` lists the stages
  slowest first (``group``, ``ranks``, ``median``, ``ratio`` to the median stage),
  ``wait_share`` is the share of each step a typical stage waits (slowest - median) / slowest,
  ``balanced_step_time`` the step time the same work evenly partitioned would give: the step
  time less the excess of what paces each step over the stages' mean (the slowest stage's
  median, or the median over steps of its slowest rank when that is ``stage_min_effect`` beyond
  it: uneven data per micro-batch); ``job_slowdown`` (step
  time / balanced step time) and ``gpu_hours_lost_per_day`` over all the job's ranks
  (models/steps/cost.py); ``action.kind: "repartition"``.
  ByteDance's straggler study found this a leading cause of slow jobs.
* **classes** (``evidence.kind: "classes"``): within a peer group, each rank's median signal
  over the last ``window`` steps, sorted; a gap of at least ``class_gap`` times between
  neighbours splits the ranks into classes when each side holds at least ``min_class_share``
  of them (a lone slow rank is a straggler, the per-rank rule's business). Half a job 3x slower
  than the other half (shared GPUs, mixed GPU models, a slow switch) is one finding, not a
  straggler alert per slow rank flickering as the median swings between the classes. The
  per-rank rules then compare ranks within their class (``class_of``).

The picture is the set of slow stages, or the number of classes; a new picture must hold on
two evaluations in a row before the alert changes (a rank swinging between classes updates
the membership silently).
"""

from __future__ import annotations

import math
import warnings
from collections import deque
from dataclasses import replace

import numpy as np

from ..alerts import Alert, alert_id
from .assembly import GroupStep
from .cost import cost
from .imbalance_evidence import (ClassImbalanceEvidence, Remedy, RemedyKind, RankClass, StageImbalanceEvidence,
                                 StageLoad)
from .layout import kept_ranks, same_ranks
from ..resolution import Resolution
from .robust import nan_max, step_median
from .straggler import choose_signal


class _GroupHistory:
    """Per-step medians and per-rank values of one peer group."""

    __slots__ = ("medians", "maxima", "step_times", "slot", "ranks", "values", "nodes", "count", "classes",
                 "class_map", "pending", "last")

    def __init__(self, window: int) -> None:
        self.medians: deque[float] = deque(maxlen=window)
        self.maxima: deque[float] = deque(maxlen=window)  # per step, the group's slowest rank
        self.step_times: deque[float] = deque(maxlen=window)
        self.slot: dict[int, int] = {}
        self.ranks: list[int] = []
        self.values = np.full((0, window), np.nan)
        self.nodes: dict[int, str] = {}
        self.count = 0
        self.classes: list[list[int]] = []  # current classes, slowest first ([] = none)
        self.class_map: dict[int, int] = {}  # rank -> index in ``classes``
        self.pending: int | None = None  # a new class count seen once, waiting for confirmation
        self.last: tuple[np.ndarray, np.ndarray | slice] | None = None  # (ranks, slots) of the previous step


class ImbalanceDetector:
    """Stage imbalance and rank classes for one job; feed it every closed step of every group.

    Example: four pipeline stages, ``pp2`` takes 1.5 s a step and the others 1.0 s.

    >>> import numpy as np
    >>> from stepwatch.models.steps.assembly import GroupStep
    >>> ranks = np.arange(8)
    >>> def stage(group, n, t):
    ...     return GroupStep(job="j", group=group, step=n, ts=1000.0 + n, ranks=ranks, step_time=np.full(8, t),
    ...                      compute_time=np.full(8, t), comm_time=np.full(8, 0.1), data_time=np.full(8, 0.01),
    ...                      tokens=np.full(8, 4096.0), nodes=("node-0",) * 8, phase="train")
    >>> detector = ImbalanceDetector(job="j")
    >>> alerts = [alert for n in range(60) for group, t in (("pp0", 1.0), ("pp1", 1.0), ("pp2", 1.5), ("pp3", 1.0))
    ...           for alert in detector.update(stage(group, n, t))]
    >>> [(str(a.type), str(a.status)) for a in alerts]
    [('imbalance', 'firing')]

    Hyperparameters (keyword-only):

    * ``window``: steps of history per group (stage medians, per-rank medians).
    * ``min_steps``: steps a group needs before it is judged (classes must be known before the
      per-rank rule starts judging, i.e. within its warm-up).
    * ``every``: steps between evaluations (classes: for the first ``window`` steps, then every
  ``window / 2``).
    * ``stage_min_effect``: slowest stage over the median stage at least ``1 +`` this.
    * ``class_gap``: ratio between neighbouring rank medians that separates two classes.
    * ``min_class_share``: smallest share of a group's ranks (and at least 2) a class holds.

    ``reconfigure`` changes ``stage_min_effect``, ``class_gap`` and ``min_class_share`` at run time: stages and
    classes are judged again at the next step (no second look: the data did not change, the threshold
    did), and an alert that ends because its threshold was raised says so (``evidence.resolution =
    threshold_changed``).
    """

    #: Settings ``reconfigure`` may change at run time, with the evidence key each alert keeps it under.
    TUNABLE = ("stage_min_effect", "class_gap", "min_class_share")

    def __init__(self, *, job: str, window: int = 200, min_steps: int = 10, every: int = 10,
                 stage_min_effect: float = 0.10, class_gap: float = 1.5, min_class_share: float = 0.2) -> None:
        self.job = job
        self.window = window
        self.min_steps = min_steps
        self.every = every
        self.stage_min_effect = stage_min_effect
        self.class_gap = class_gap
        self.min_class_share = min_class_share
        self._groups: dict[str, _GroupHistory] = {}
        self._stage_alert: Alert | None = None
        self._stage_pending: tuple[str, ...] | None = None
        #: The ranks the stage alert fired naming, and its summary then (``_stage_grown``'s versions extend it).
        self._stage_named: tuple[frozenset[int], str] = (frozenset(), "")
        self._class_alerts: dict[str, Alert] = {}
        self._steps = 0
        self._rejudge: set[str] = set()  # groups whose classes are judged again at once (settings changed)
        self._rejudge_stages = False

    def reconfigure(self, **values) -> None:
        """Change settings in place (unknown names ignored); judged again at each group's next step."""
        changed = False
        for name, value in values.items():
            if name in self.TUNABLE and float(value) != getattr(self, name):
                setattr(self, name, float(value))
                changed = True
        if changed:
            self._rejudge = set(self._groups)
            self._rejudge_stages = True

    # -- views ----------------------------------------------------------------------------

    def class_of(self, group: str) -> dict[int, int]:
        """rank -> class index (0 = slowest) of a group, empty when it has no classes."""
        g = self._groups.get(group)
        return {} if g is None else g.class_map

    def open_alerts(self) -> list[Alert]:
        return [a for a in (self._stage_alert, *self._class_alerts.values()) if a is not None]

    # -- input ----------------------------------------------------------------------------

    def update(self, step: GroupStep) -> list[Alert]:
        if step.phase != "train":
            return []
        chosen = choose_signal(step)
        if chosen is None:
            return []
        signal, x = chosen
        g = self._groups.get(step.group)
        if g is None:
            g = self._groups[step.group] = _GroupHistory(self.window)
        changed = g.last is None or not same_ranks(step.ranks, g.last[0])
        if changed:  # most steps have the same ranks as the one before
            new = [int(r) for r in step.ranks if int(r) not in g.slot]
            if new:
                for r in new:
                    g.slot[r] = len(g.ranks)
                    g.ranks.append(r)
                g.values = np.vstack([g.values, np.full((len(new), self.window), np.nan)])
            slots = [g.slot[int(r)] for r in step.ranks]
            # consecutive slots (the usual group): a slice, written without a gather
            at = slice(slots[0], slots[-1] + 1) if slots and slots[-1] - slots[0] == len(slots) - 1 and \
                slots == list(range(slots[0], slots[-1] + 1)) else np.array(slots, dtype=np.int64)
            g.last = (kept_ranks(step.ranks), at)
        col = g.count % self.window
        if len(step.ranks) < len(g.ranks):  # a rank missing (late, lost): not its value of ``window`` steps ago
            g.values[:, col] = np.nan
        g.values[g.last[1], col] = x
        g.count += 1
        g.medians.append(step_median(step, signal, x))
        g.maxima.append(nan_max(x))
        g.step_times.append(step_median(step, "step_time"))
        if changed or g.count % 100 == 1:  # nodes rarely change: not every step
            for r, node in zip(step.ranks, step.nodes):
                if node is not None:
                    g.nodes[int(r)] = node
        self._steps += 1
        out: list[Alert] = []
        # Classes are judged early (before the per-rank rule starts), then every ``every`` steps for the
        # first ``window`` steps, then every ``window / 2``: they change slowly, and the per-rank medians
        # of a big job are the costliest part of this rule.
        cadence = self.every if g.count <= self.window else max(self.every, self.window // 2)
        due = g.count == self.min_steps or (g.count > self.min_steps and g.count % cadence == 0)
        now = step.group in self._rejudge and g.count >= self.min_steps
        if now:
            self._rejudge.discard(step.group)
        if due or now:
            out.extend(self._judge_classes(step, g, now=now))
        stages_now = self._rejudge_stages and len(self._groups) > 1
        if len(self._groups) > 1 and (self._steps % self.every == 0 or stages_now):
            self._rejudge_stages = False
            out.extend(self._judge_stages(step, now=stages_now))
        return out

    def _resolved(self, old: Alert, fired_at: float, at: float, what: str, setting: str, value: float) -> Alert:
        """``old`` resolved because ``what``; because its threshold (``fired_at``, now ``value``) was raised, if so."""
        if value > fired_at:
            detail = f"imbalance.{setting} {fired_at:g} -> {value:g}"
            return old.resolved(at=at, summary=f"resolved: threshold changed ({detail}); {what} by the new "
                                               f"threshold ({old.summary})",
                                evidence={**old.evidence, "resolution": Resolution.THRESHOLD_CHANGED,
                                          "resolution_detail": detail})
        return old.resolved(at=at, summary=f"resolved: {what} ({old.summary})")

    # -- stages ---------------------------------------------------------------------------

    def _judge_stages(self, step: GroupStep, *, now: bool = False) -> list[Alert]:
        groups = {name: g for name, g in self._groups.items() if len(g.medians) >= self.min_steps}
        if len(groups) < 2 or len(groups) < len(self._groups):
            return []
        typical = {name: float(np.median(g.medians)) for name, g in groups.items()}
        mid = float(np.median(list(typical.values())))
        if mid <= 0:
            return []
        slowest = max(typical.values())
        slow = tuple(sorted(n for n, t in typical.items() if t >= (1 + self.stage_min_effect) * mid))
        fired = StageImbalanceEvidence.from_dict(self._stage_alert.evidence) if self._stage_alert else None
        current = fired.slow_groups if fired is not None else ()
        if slow == current:
            self._stage_pending = None
            return self._stage_grown(groups, slow)
        if self._stage_pending != slow and not now:  # a new picture must hold twice in a row
            self._stage_pending = slow
            if current or not slow:
                return []
        self._stage_pending = None
        out: list[Alert] = []
        if self._stage_alert is not None and fired is not None:
            old, self._stage_alert = self._stage_alert, None
            out.append(self._resolved(old, fired.min_effect, step.ts, "stage balance changed", "stage_min_effect",
                                      self.stage_min_effect))
        if not slow:
            return out
        step_times = [t for g in groups.values() for t in g.step_times if not math.isnan(t)]
        step_time = float(np.median(step_times)) if step_times else slowest
        mean = float(np.mean(list(typical.values())))
        order = sorted(typical, key=lambda n: -typical[n])
        listed = tuple(StageLoad(group=n, ranks=tuple(sorted(groups[n].ranks)), median=round(typical[n], 5),
                                 ratio=round(typical[n] / mid, 3)) for n in order)
        wait_share = (slowest - mid) / slowest
        # Each step waits for the slowest rank of the slowest stage: when that rank is typically
        # ``stage_min_effect`` beyond the stage's median (uneven data per micro-batch, not noise), it is
        # what paces the step; a balanced partition runs every stage at the stages' mean.
        maxima = [v for v in groups[order[0]].maxima if not math.isnan(v)]
        paced = float(np.median(maxima)) if maxima else slowest
        if paced < (1 + self.stage_min_effect) * slowest:
            paced = slowest
        price = cost(step_time, paced - mean, sum(len(g.ranks) for g in groups.values()))
        balanced = step_time - price.seconds_lost_per_step if price is not None else max(step_time - (slowest - mean), 0.0)
        evidence = StageImbalanceEvidence(
            groups=listed, slow_groups=slow, ratio=round(slowest / mid, 3), wait_share=round(wait_share, 4),
            step_time=round(step_time, 5), balanced_step_time=round(balanced, 5), cost=price,
            steps=min(len(g.medians) for g in groups.values()), min_effect=self.stage_min_effect,
            action=Remedy(RemedyKind.REPARTITION,
                          f"move layers out of stage(s) {', '.join(slow)} to the faster stages"))
        names = ", ".join(f"{n} ({typical[n] / mid:.2f}x)" for n in order if n in slow)
        summary = (f"stage imbalance: job {self.job}: stage(s) {names} slower than the median stage "
                   f"({mid:.3f}s); the other stages wait {100 * wait_share:.0f}% of each step; a balanced "
                   f"partition would take about {balanced:.3f}s per step instead of {step_time:.3f}s"
                   + (f" (the job runs {price.job_slowdown:.2f}x slower, about {price.gpu_hours_lost_per_day:.0f} "
                      f"GPU-hours a day)" if price is not None else "") + ": repartition")
        ranks = tuple(r for n in slow for r in sorted(groups[n].ranks))
        nodes = tuple(sorted({groups[n].nodes[r] for n in slow for r in groups[n].ranks if r in groups[n].nodes}))
        self._stage_named = (frozenset(ranks), summary)
        self._stage_alert = Alert(id=alert_id(self.job, "imbalance", "stage", *slow), status="firing",
                                  type="imbalance", severity="info", job=self.job, ranks=ranks, nodes=nodes,
                                  starts_at=step.ts, summary=summary, evidence=evidence.to_dict())
        out.append(self._stage_alert)
        return out

    def _stage_grown(self, groups: dict[str, _GroupHistory], slow: tuple[str, ...]) -> list[Alert]:
        """The open stage alert again, naming the slow stages' ranks seen since it fired (a rank whose producer
        stalled through the stage's first steps: gen3:stage_imbalance_only with 1% of its messages 30 s late named
        7 of its slow stage's 8 ranks); nothing if none joined. The alert is about the whole stage."""
        alert = self._stage_alert
        if alert is None or not slow or sum(len(groups[n].ranks) for n in slow) <= len(alert.ranks):
            return []
        ranks = tuple(r for n in slow for r in sorted(groups[n].ranks))
        nodes = tuple(sorted({groups[n].nodes[r] for n in slow for r in groups[n].ranks if r in groups[n].nodes}))
        # (a summary of its own: a version saying what the last said is not published again)
        named, first = self._stage_named
        later = [r for r in ranks if r not in named]
        shown = ", ".join(map(str, later[:8])) + (f" and {len(later) - 8} more" if len(later) > 8 else "")
        summary = f"{first} (and rank{'s' if len(later) > 1 else ''} {shown}, first seen since)"
        listed = [dict(g, ranks=sorted(groups[g["group"]].ranks)) if g["group"] in groups else g
                  for g in alert.evidence["groups"]]
        self._stage_alert = replace(alert, ranks=ranks, nodes=nodes, summary=summary,
                                    evidence={**alert.evidence, "groups": listed})
        return [self._stage_alert]

    # -- classes --------------------------------------------------------------------------

    def _split(self, g: _GroupHistory) -> list[list[int]]:
        """Classes of a group's ranks by their medians (of their values over their steps' medians), slowest first
        ([] when one class)."""
        n = len(g.ranks)
        filled = min(g.count, self.window)
        if n < 4 or filled < self.min_steps:
            return []
        vals = g.values[:, :filled] if g.count <= self.window else g.values
        # Each rank over its steps' medians: ranks are compared on the same steps. A rank whose producer stalled
        # through the steady steps has only the job's slow first steps in, and was a class of its own
        # (gen3:arrival_only_straggler with 2% of its messages 5 s late: 2 ranks "2.9x" the others). The steps'
        # medians are taken over the same ranks every step (those reporting the most): a step missing a rank of
        # one class would move the median to the other (gen3:mixed_gpu_classes, two classes 8 and 8).
        cover = (~np.isnan(vals)).sum(axis=1)
        top = cover.max()
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a step none of them reported: NaN, left out
            if top == vals.shape[1]:  # the rows taken hold no NaN (the usual case): nanmedian's value, 8x cheaper
                scale = np.median(vals if cover.min() == top else vals[cover == top], axis=0)
            else:
                scale = np.nanmedian(vals[cover == top], axis=0)
            scale[~(scale > 0)] = np.nan
            vals = vals / scale
        if np.isnan(vals).any():
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # a rank with no step left: NaN, left out below
                meds = np.nanmedian(vals, axis=1)
        else:
            meds = np.median(vals, axis=1)
        ok = np.flatnonzero(np.isfinite(meds) & (meds > 0))
        if len(ok) < 4:
            return []
        order = ok[np.argsort(meds[ok])]
        logs = np.log(meds[order])
        least = max(2, math.ceil(self.min_class_share * len(order)))
        cuts = [i + 1 for i in np.flatnonzero(np.diff(logs) >= math.log(self.class_gap))]
        bounds, last = [0], 0
        for c in cuts:  # keep cuts that leave big enough classes on both sides
            if c - last >= least and len(order) - c >= least:
                bounds.append(c)
                last = c
        if len(bounds) < 2:
            return []
        bounds.append(len(order))
        classes = [[g.ranks[i] for i in order[a:b]] for a, b in zip(bounds, bounds[1:])]
        return [sorted(c) for c in reversed(classes)]  # slowest first

    def _judge_classes(self, step: GroupStep, g: _GroupHistory, *, now: bool = False) -> list[Alert]:
        classes = self._split(g)
        count = len(classes)
        out: list[Alert] = []
        if count == len(g.classes):
            g.pending = None
            self._set_classes(g, classes)  # same picture: membership may move silently
            return out
        first = not g.classes and step.group not in self._class_alerts
        if not (first and count) and g.pending != count and not now:  # a change must hold twice in a row
            g.pending = count
            return out
        g.pending = None
        self._set_classes(g, classes)
        old = self._class_alerts.pop(step.group, None)
        if old is not None:
            out.append(self._resolved(old, ClassImbalanceEvidence.from_dict(old.evidence).class_gap, step.ts,
                                      "rank classes changed", "class_gap", self.class_gap))
        if classes:
            alert = self._class_alert(step, g, classes)
            self._class_alerts[step.group] = alert
            out.append(alert)
        return out

    @staticmethod
    def _set_classes(g: _GroupHistory, classes: list[list[int]]) -> None:
        if classes != g.classes:
            g.classes = classes
            g.class_map = {r: i for i, members in enumerate(classes) for r in members}

    def _class_alert(self, step: GroupStep, g: _GroupHistory, classes: list[list[int]]) -> Alert:
        filled = min(g.count, self.window)
        vals = g.values[:, :filled] if g.count <= self.window else g.values
        listed = []
        for members in classes:
            rows = [g.slot[r] for r in members]
            nodes = tuple(sorted({g.nodes[r] for r in members if r in g.nodes}))
            listed.append(RankClass(ranks=tuple(members), nodes=nodes, median=round(float(np.nanmedian(vals[rows])), 5)))
        ratio = listed[0].median / listed[-1].median if listed[-1].median > 0 else float("nan")
        node_sets = [set(c.nodes) for c in listed]
        split_by_node = all(node_sets) and all(a.isdisjoint(b) for i, a in enumerate(node_sets)
                                               for b in node_sets[i + 1:])
        reason = ("the classes sit on different nodes: mixed GPU models or clocks, or a slow switch or host"
                  if split_by_node else "ranks on the same nodes differ: shared GPUs or per-process contention")
        evidence = ClassImbalanceEvidence(
            group=step.group or None, classes=tuple(listed), ratio=round(ratio, 3), steps=filled,
            class_gap=self.class_gap, likely_reason=reason, split_by_node=split_by_node,
            action=Remedy(RemedyKind.PLACEMENT, "per-rank straggler alerts now compare ranks within their class"))
        sizes = " / ".join(f"{len(c.ranks)} ranks at {c.median:.3g}s" for c in listed)
        group = f" group {step.group}:" if step.group else ""
        summary = (f"rank classes: job {self.job}:{group} {len(listed)} stable classes ({sizes}), the slowest "
                   f"{ratio:.1f}x the fastest; likely {reason}")
        return Alert(id=alert_id(self.job, "imbalance", "classes", step.group, len(listed)), status="firing",
                     type="imbalance", severity="info", job=self.job, ranks=listed[0].ranks,
                     nodes=listed[0].nodes, starts_at=step.ts, summary=summary, evidence=evidence.to_dict())

    def close(self, *, at: float, reason: str) -> list[Alert]:
        out = [a.resolved(at=at, summary=f"resolved ({reason}): {a.summary}") for a in self.open_alerts()]
        self._stage_alert = None
        self._class_alerts.clear()
        return out
