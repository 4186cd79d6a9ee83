"""The short straggler rule's evidence as typed records: what the rule writes, field by field, and its wire form.

models/steps/straggler.py builds one record when a rank fires (``PeerEvidence`` for a rank slower than
its peers or than its own pace in a small group, ``DataWaitEvidence`` for a rank waiting on its input
pipeline). ``to_dict`` is the alert's ``evidence`` on the wire (docs/alerts.md), written where the alert
is made: the records fix the names, types and order of the keys in one place (the order and the keys are
the ones the dict-building code wrote before, so recordings replay byte for byte). What the rule adds
after that (the cost, models/steps/cost.py; the collective of an arrival signal; the resolution) and what
the engine adds later (suspected causes) are merged into that dict. Modules that act on a straggler
alert read it back through models/evidence.py ``StragglerEvidence``.
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
