"""The straggler rule's verdict on one step: which signal, each rank's ratio and robust z against its peers.

Peer comparison (models/steps/straggler.py explains why): ``ratio = x / median`` and ``z = (x - median) /
spread``, the spread the normal-scaled MAD floored at ``spread_floor * median``; slow when both reach their
thresholds. Ranks with a rank class (models/steps/imbalance.py) are compared within it; a small group
(2 .. ``min_peers`` - 1 ranks) is judged against each rank's own pace (models/steps/small_group.py).
Pure maths on one step: what the rule remembers across steps lives in the other ``straggler_*`` modules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .assembly import GroupStep
from .robust import median, time_before
from .small_group import PairedPace

SIGNALS = ("compute_time", "arrival", "step_time")

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


@dataclass(frozen=True, slots=True)
class Judgement:
    """One step's per-rank comparison, before it enters the rule's history."""

    ratio: np.ndarray
    z: np.ndarray
    slow: np.ndarray
    peers: np.ndarray | None  # each rank's expected value (classes, small group); None: the step's median
    step_slow: np.ndarray | None  # small group: slow on this step alone (the intermittent rule counts these)
    step_ratio: np.ndarray | None  # small group: this step's ratio alone


def choose_signal(step: GroupStep) -> tuple[str, np.ndarray] | None:
    """The best signal every rank of this step reported, with its values (chosen once per step: three rules ask)."""
    memo = step.chosen
    if not memo:
        memo.append(_choose_signal(step))
    return memo[0]


def _choose_signal(step: GroupStep) -> tuple[str, np.ndarray] | None:
    if not np.isnan(step.compute_time).any():
        return "compute_time", step.compute_time
    if not (np.isnan(step.comm_time).any() or np.isnan(step.step_time).any()):
        # Time before the rank entered its collectives: the last to arrive waits least.
        arrival = np.maximum(time_before(step)[0], 0.0)
        arrival.flags.writeable = False  # shared by the rules that judge the step, as its columns are
        return "arrival", arrival
    if not np.isnan(step.step_time).any():
        return "step_time", step.step_time
    return None


def judge(step: GroupStep, x: np.ndarray, peer: float, *, small: bool, pace: PairedPace,
          rank_class: dict[int, int], ratio_threshold: float, z_threshold: float, spread_floor: float,
          min_peers: int) -> Judgement | None:
    """Each rank's ratio, z and slow verdict on ``step`` (``x``: the chosen signal, ``peer``: its median);
    None while a small group's baselines are still being learnt."""
    peers = step_slow = step_ratio = None
    if small:
        # Too few peers for a robust median: each rank's pace against its peers on this step, against its
        # own usual pace, over a run of steps (models/steps/small_group.py).
        pace.spread_floor = spread_floor
        judged = pace.judge(step.ranks, x, step.step)
        if judged is None:  # baselines still being learnt
            pace.learn(off=False, flagged=False)
            return None
        ratio, z, peers = judged.ratio, judged.z, judged.expected
        # The intermittent rule counts single slow steps, not sustained ones.
        step_ratio = judged.step_ratio
        step_slow = (step_ratio >= ratio_threshold) & (judged.step_z >= z_threshold)
    elif rank_class:
        spread = max(normal_mad(x, peer), spread_floor * peer, 1e-9)
        peers, spreads = class_peers(step.ranks, x, peer, spread, rank_class, min_peers=min_peers,
                                     spread_floor=spread_floor)
        ratio = x / peers
        z = (x - peers) / spreads
    else:
        spread = max(normal_mad(x, peer), spread_floor * peer, 1e-9)
        ratio = x / peer
        z = (x - peer) / spread
    slow = (ratio >= ratio_threshold) & (z >= z_threshold)
    if step_slow is not None:  # small group: sustained, and slow on this step too
        slow &= step_ratio >= ratio_threshold
    return Judgement(ratio=ratio, z=z, slow=slow, peers=peers, step_slow=step_slow, step_ratio=step_ratio)


def off_pace(ratio: np.ndarray, ratio_threshold: float) -> bool:
    """Any rank of a small group off its pace either way (such a step does not join the baselines)."""
    return bool((np.abs(np.log(ratio)) >= math.log(ratio_threshold)).any())


def class_peers(ranks: np.ndarray, x: np.ndarray, peer: float, spread: float, rank_class: dict[int, int], *,
                min_peers: int, spread_floor: float) -> tuple[np.ndarray, np.ndarray]:
    """Peer median and spread of each rank's own class (ranks without one: the whole group's)."""
    peers = np.full(len(x), peer)
    spreads = np.full(len(x), spread)
    cls = np.fromiter((rank_class.get(int(r), -1) for r in ranks), dtype=np.int64, count=len(ranks))
    for c in np.unique(cls[cls >= 0]):
        members = cls == c
        if members.sum() < min_peers:
            peers[members] = np.inf  # too few alike peers to judge: never slow
            continue
        m = median(x[members])
        peers[members] = m
        spreads[members] = max(normal_mad(x[members], m), spread_floor * m, 1e-9)
    return peers, spreads
