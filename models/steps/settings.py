"""Settings of the per-step rules, in a module that imports no detector: ``StragglerSettings`` (the straggler
rules, models/steps/straggler.py and long_straggler.py) and ``AssemblySettings`` (models/steps/assembly.py)."""

from __future__ import annotations

from dataclasses import dataclass

from ..tunable import runtime


@dataclass(frozen=True, kw_only=True)
class StragglerSettings:
    """Settings of the peer-comparison straggler rule (models/steps/straggler.py) and of the long-horizon rule
    (models/steps/long_straggler.py): ``STEPWATCH_STRAGGLER_<FIELD>``. Every field may change at run time
    (``stepwatch config set straggler.FIELD=VALUE``)."""

    #: A step is "slow" for a rank when its signal is at least this multiple of the peer median ...
    ratio_threshold: float = runtime(1.10, low=1.0, above=True, high=100.0, why="a ratio of 1 or less flags every rank")
    #: ... and its robust z-score (MAD-based) is at least this.
    z_threshold: float = runtime(3.5, low=0.0, above=True, high=1000.0)
    #: Fire when at least ``min_flagged`` of the last ``window`` evaluated steps were slow.
    min_flagged: int = runtime(3, low=1, high=1000)
    window: int = runtime(5, low=1, high=1000, why="a ring of this many steps per rank")
    #: Resolve after this many consecutive clean steps (hysteresis).
    clear_after: int = runtime(10, low=1, high=100_000)
    #: Floor on the spread used by the z-score, as a fraction of the peer median: stops a
    #: perfectly uniform group (MAD ~ 0) from turning 0.1% differences into huge z-scores.
    spread_floor: float = runtime(0.02, low=0.0, high=1.0)
    #: Groups with fewer ranks than this (a median of 2 says nothing) are judged against each rank's
    #: own usual pace against its peers instead (2 ranks at least; models/steps/small_group.py).
    min_peers: int = runtime(4, low=1, high=100_000)
    #: Steps ignored at the start of a job (and after each restart of the step counter).
    warmup_steps: int = runtime(10, low=0, high=1_000_000)
    #: Ratio at and above which a straggler alert is critical rather than a warning.
    critical_ratio: float = runtime(1.5, low=1.0, above=True, high=100.0,
                                      why="a ratio of 1 or less makes every alert critical")
    #: Steps of per-rank history kept for the evidence of an alert.
    evidence_window: int = runtime(20, low=1, high=1000, why="a ring of this many steps per rank")
    #: Fire only when so many slow steps have at most this chance of being independent spikes at
    #: the job's learned background rate (1 disables the test: plain k of n).
    coincidence_p: float = runtime(2e-7, low=0.0, above=True, high=1.0, why="a probability")
    #: Lowest background rate of slow rank-steps assumed (also the prior before it is learned).
    spike_rate_floor: float = runtime(0.001, low=0.0, high=1.0, why="a rate per rank-step")
    #: A rank whose alert resolved fires again within this many steps only when clearly worse.
    holdoff_steps: int = runtime(200, low=0, high=1_000_000)
    #: Intermittent slowness: slow verdicts counted over each rank's last this many steps (0: off).
    intermittent_window: int = runtime(100, low=0, high=2000, why="a ring of this many steps per rank")
    #: Long-horizon rule (models/steps/long_straggler.py, severity info): smallest steady slowdown
    #: reported (0 = off) ...
    long_min_effect: float = runtime(0.03, low=0.0, high=10.0)
    #: ... judged over this many steps of per-rank history.
    long_window: int = runtime(200, low=1, high=2000, why="this many steps of history per rank")

    def check(self) -> None:
        """``ValueError`` unless the fields make sense together (each field's range: ``runtime`` above)."""
        if not 1 <= self.min_flagged <= self.window:
            raise ValueError("straggler: need 1 <= min_flagged <= window")
        for name in ("ratio_threshold", "critical_ratio", "z_threshold"):
            if not getattr(self, name) > 0:
                raise ValueError(f"straggler.{name} must be positive")
        if self.intermittent_window < 0:
            raise ValueError("straggler.intermittent_window must not be negative")
        for name in ("evidence_window", "clear_after", "min_peers", "long_window"):
            if getattr(self, name) < 1:
                raise ValueError(f"straggler.{name} must be at least 1")
        if not 0 < self.coincidence_p <= 1:
            raise ValueError("straggler.coincidence_p must be in (0, 1]")
        if self.holdoff_steps < 0 or self.long_min_effect < 0 or self.spike_rate_floor < 0:
            raise ValueError("straggler.holdoff_steps, long_min_effect and spike_rate_floor must not be negative")


@dataclass(frozen=True, kw_only=True)
class AssemblySettings:
    """How per-rank step events are gathered into one comparable step."""

    #: A step is evaluated once every known rank of its group reported, or once half the group's
    #: ranks reported a step this many steps newer (late ranks are then left out of that step) ...
    max_lag_steps: int = 3
    #: ... or once it has waited this many seconds of event time (or half the job's own step time, if longer, at
    #: most 300 s: at 2-minute steps a slow rank reports its step's end tens of seconds after its peers).
    max_wait_seconds: float = 30.0
    #: Steps held open per group at least: the most a late rank's events may trail by (the learned lag's
    #: bound), and the memory bound for jobs with missing ranks ...
    max_pending_steps: int = 16
    #: ... or as many steps of the job as fit in this many seconds (its pace: the step times it reports), for
    #: fast steps whose producers send in bursts (a rank's events then come up to a flush interval late) and
    #: recordings sorted by host time, where a host whose clock is 10 s ahead trails one 10 s behind by 20 s ...
    max_pending_seconds: float = 30.0
    #: ... but never more than this many by the seconds (the hard memory bound per group, with ``max_pending_steps``).
    pending_steps_cap: int = 256
