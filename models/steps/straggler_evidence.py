"""The straggler rules' evidence as typed records: what each rule writes, field by field, and its wire form.

The short rule, models/steps/straggler.py, builds one record when a rank fires (``PeerEvidence`` for a rank slower than
its peers or than its own pace in a small group, ``DataWaitEvidence`` for a rank waiting on its input
pipeline). ``to_dict`` is the alert's ``evidence`` on the wire (docs/alerts.md), written where the alert
is made: the records fix the names, types and order of the keys in one place (the order and the keys are
the ones the dict-building code wrote before, so recordings replay byte for byte). What the rule adds
after that (the cost, models/steps/cost.py; the collective of an arrival signal; the resolution) and what
the engine adds later (suspected causes) are merged into that dict. Modules that act on a straggler
alert read it back through models/evidence.py ``StragglerEvidence``.

The long-horizon rule (models/steps/long_straggler.py) writes ``LongStragglerEvidence`` (with its own
measured ``LongStragglerCost``), and reads its own alert back through ``LongStragglerEvidence.from_dict``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ..evidence import Horizon, StragglerSignal


class Baseline(StrEnum):
    """What a rank was compared with (``evidence.baseline``)."""

    PEERS = "peers"  # the median of the group's ranks
    SELF = "self"  # a small group: the rank's own usual pace against its peers' (models/steps/small_group.py)


#: The rule's own reading of a data-wait straggler (``evidence.cause``), before telemetry names causes.
INPUT_PIPELINE = "input pipeline"


@dataclass(frozen=True, slots=True)
class PeerEvidence:
    """A rank slower than its peers (or, in a small group, than its own pace) over the rule's window."""

    signal: StragglerSignal
    group: str | None  # the peer group (pipeline stage) compared within; None: the whole job
    rank_median: float | None  # the rank's median of ``signal`` over the window (seconds)
    peer_median: float | None  # its peers' median (self: the value expected of the rank)
    ratio: float | None  # rank_median / peer_median
    robust_z: float | None  # median robust z over the window
    slow_steps: int  # slow verdicts in the window
    window: int
    recent_ratios: tuple[float, ...]  # the window's ratios, newest first
    ratio_threshold: float  # the thresholds it fired with (a resolution compares them with the current ones)
    z_threshold: float
    baseline: Baseline

    def to_dict(self) -> dict[str, Any]:
        return {"signal": self.signal.value, "horizon": Horizon.SHORT.value, "group": self.group,
                "rank_median": self.rank_median, "peer_median": self.peer_median, "ratio": self.ratio,
                "robust_z": self.robust_z, "slow_steps": self.slow_steps, "window": self.window,
                "recent_ratios": list(self.recent_ratios), "ratio_threshold": self.ratio_threshold,
                "z_threshold": self.z_threshold, "baseline": self.baseline.value}


@dataclass(frozen=True, slots=True)
class DataWaitEvidence:
    """A rank that waits longer for its input data than its peers, every step of the window."""

    group: str | None
    rank_median: float | None  # the rank's median data wait (seconds)
    peer_median: float | None  # its peers' median data wait
    compute_median: float | None  # the group's median compute time (what a step costs without the wait)
    ratio: float | None  # how much longer the rank makes a step: (compute + its wait) / (compute + peers' wait)
    window: int
    first_step: int
    detected_step: int
    ratio_threshold: float
    z_threshold: float

    def to_dict(self) -> dict[str, Any]:
        return {"signal": StragglerSignal.DATA_TIME.value, "horizon": Horizon.SHORT.value, "group": self.group,
                "rank_median": self.rank_median, "peer_median": self.peer_median,
                "compute_median": self.compute_median, "ratio": self.ratio, "slow_steps": self.window,
                "window": self.window, "first_step": self.first_step, "detected_step": self.detected_step,
                "cause": INPUT_PIPELINE, "ratio_threshold": self.ratio_threshold, "z_threshold": self.z_threshold}


@dataclass(frozen=True, slots=True)
class LongStragglerCost:
    """What the job loses to a long-horizon straggler, measured over the steps since its onset."""

    seconds_lost_per_step: float  # mean seconds per step the group waited for the rank (its excess over the next)
    step_share_lost: float  # that wait as a share of the group's median step time
    job_slowdown: float  # the job's step over the step without the rank's excess
    job_ranks: int  # ranks of the whole job (all of them wait)
    gpu_hours_lost_per_day: float

    def to_dict(self) -> dict[str, Any]:
        return {"seconds_lost_per_step": self.seconds_lost_per_step, "step_share_lost": self.step_share_lost,
                "job_slowdown": self.job_slowdown, "job_ranks": self.job_ranks,
                "gpu_hours_lost_per_day": self.gpu_hours_lost_per_day}

    @classmethod
    def from_dict(cls, ev: dict[str, Any]) -> "LongStragglerCost":
        return cls(seconds_lost_per_step=ev["seconds_lost_per_step"], step_share_lost=ev["step_share_lost"],
                   job_slowdown=ev["job_slowdown"], job_ranks=ev["job_ranks"],
                   gpu_hours_lost_per_day=ev["gpu_hours_lost_per_day"])


@dataclass(frozen=True, slots=True)
class LongStragglerEvidence:
    """A rank a few percent slower than its peers for a long run of steps (the sign-test CUSUM crossed)."""

    signal: StragglerSignal
    group: str | None  # the peer group compared within; None: the whole job
    ratio: float  # the rank's median ratio to the peer median since the onset
    rank_median: float  # ratio x peer_median (seconds)
    peer_median: float  # the peers' median of ``signal`` since the onset (seconds)
    steps: int  # steps judged since the onset (at most ``window``)
    window: int
    cusum: float  # the CUSUM when it fired
    threshold: float  # the CUSUM level it fired at
    min_effect: float  # the smallest slowdown reported when it fired (a resolution compares it with the current)
    first_step: int  # where the CUSUM last left 0
    detected_step: int
    rank_class: int | None  # its rank class (models/steps/imbalance.py) when the job has classes: ``class``
    cost: LongStragglerCost

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "horizon": Horizon.LONG.value, "signal": self.signal.value, "group": self.group, "ratio": self.ratio,
            "rank_median": self.rank_median, "peer_median": self.peer_median, "steps": self.steps,
            "window": self.window, "cusum": self.cusum, "threshold": self.threshold, "min_effect": self.min_effect,
            "first_step": self.first_step, "detected_step": self.detected_step}
        if self.rank_class is not None:
            out["class"] = self.rank_class
        out.update(self.cost.to_dict())
        return out

    @classmethod
    def from_dict(cls, ev: dict[str, Any]) -> "LongStragglerEvidence":
        """The record of a long-horizon alert's evidence (keys added later, e.g. the resolution, are ignored)."""
        if ev.get("horizon") != Horizon.LONG.value:
            raise ValueError(f"not a long-horizon straggler's evidence: horizon {ev.get('horizon')!r}")
        return cls(signal=StragglerSignal(ev["signal"]), group=ev["group"], ratio=ev["ratio"],
                   rank_median=ev["rank_median"], peer_median=ev["peer_median"], steps=ev["steps"],
                   window=ev["window"], cusum=ev["cusum"], threshold=ev["threshold"], min_effect=ev["min_effect"],
                   first_step=ev["first_step"], detected_step=ev["detected_step"], rank_class=ev.get("class"),
                   cost=LongStragglerCost.from_dict(ev))
