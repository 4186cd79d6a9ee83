"""Settings of the hang rule (models/hang/detector.py), in a module that imports no detector."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..tunable import MAX_SECONDS, runtime


@dataclass(frozen=True, kw_only=True)
class HangSettings:
    """Settings of the hang rule (models/hang/detector.py, docs/hang.md): ``STEPWATCH_HANG_<FIELD>``. Fields marked
    ``runtime`` may change while running (``stepwatch config set hang.FIELD=VALUE``); ``job_timeouts``
    and ``step_history`` are read at start-up."""

    #: Critical once no step completed for this many seconds (the user's N).
    timeout_seconds: float = runtime(600.0, low=0.0, above=True, high=MAX_SECONDS, why="0 would fire at once")
    #: Used instead while the job is in the ``checkpoint`` phase (never below the job's timeout).
    checkpoint_timeout_seconds: float = runtime(1800.0, low=0.0, above=True, high=MAX_SECONDS)
    #: Used instead before the job's first step completed, e.g. model loading (never below the job's timeout).
    first_step_timeout_seconds: float = runtime(1200.0, low=0.0, above=True, high=MAX_SECONDS)
    #: Per-job overrides of ``timeout_seconds``: ``"jobA=300,jobB=900"``.
    job_timeouts: str = ""
    #: Early warning once no step completed for ``warning_factor`` x the p99 of recent train step times ...
    warning_factor: float = runtime(10.0, low=1.0, above=True, high=1000.0, why="1 or less warns on ordinary steps")
    #: ... but never sooner than this many seconds (one slow step is not a hang).
    warning_floor_seconds: float = runtime(30.0, low=0.0, high=MAX_SECONDS)
    #: Train steps needed in the history before the early warning applies (before: ``warning_timeout_fraction``).
    warning_min_steps: int = runtime(5, low=1, high=100_000)
    #: The early warning in training comes at the latest at this fraction of the timeout, so that it comes strictly
    #: before the critical at every pace (60 s steps: 10 x p99 is the timeout itself). 0: off.
    warning_timeout_fraction: float = runtime(0.5, low=0.0, high=0.99, why="1 or more is the critical itself")
    #: In a checkpoint or eval: once most ranks have left it (or wait in the collective after it) and some have not
    #: for ``pause_hang_factor`` x the pause length (the job's usual one, the median of its recent marked pauses,
    #: or how long most ranks took in this one, the longer), never sooner than ``pause_hang_floor_seconds``, warn
    #: naming those. The pause timeout stays the last resort. Both 0: off.
    pause_hang_factor: float = runtime(3.0, low=0.0, high=1000.0)
    pause_hang_floor_seconds: float = runtime(30.0, low=0.0, high=MAX_SECONDS)
    #: A job that stopped and went on by itself (a warning resolved by the job's next step: an unmarked
    #: checkpoint or eval pause) is warned about again only after this many times its longest recent such
    #: pause: a checkpoint every N steps warns once, not every N steps. 0: off. The timeout is unchanged.
    pause_factor: float = runtime(1.5, low=0.0, high=1000.0)
    #: Recent train step times kept for the p99 (bounded memory).
    step_history: int = 256
    #: A rank is silent after no event from it for max(this, ``heartbeat_timeout_factor`` x the
    #: observed heartbeat interval) seconds, counted from the job's latest event.
    heartbeat_timeout_seconds: float = runtime(15.0, low=0.0, above=True, high=86_400.0)
    heartbeat_timeout_factor: float = runtime(3.0, low=1.0, high=1000.0,
                                               why="below 1 every rank is silent between heartbeats")
    #: Most ranks listed per category in an alert's evidence (counts are always complete).
    max_listed_ranks: int = runtime(32, low=1, high=10_000)
    #: On a hang, ask the culprits (and ``stack_waiting_ranks`` waiting ranks) for their Python
    #: stacks on the control topic (docs/hang.md); False: never ask.
    stacks: bool = runtime(True)
    stack_waiting_ranks: int = runtime(3, low=0, high=64, why="ranks asked for stacks per hang")
    #: Ranks that have not answered this many seconds after the request are listed in ``stack_missing``.
    stack_timeout_seconds: float = runtime(10.0, low=0.0, above=True, high=3600.0)
    #: At most one stack request per job per this many seconds.
    stack_min_interval_seconds: float = runtime(60.0, low=1.0, high=86_400.0, why="a bound on stack requests per job")

    def __post_init__(self) -> None:
        self.job_timeout_map()  # fail early, naming the setting, on a malformed value

    def job_timeout_map(self) -> dict[str, float]:
        """``job_timeouts`` parsed: job id -> timeout seconds."""
        out: dict[str, float] = {}
        for item in self.job_timeouts.split(","):
            item = item.strip()
            if not item:
                continue
            job, sep, value = item.rpartition("=")
            try:
                if not sep or not job.strip():
                    raise ValueError
                seconds = float(value)
                if not seconds > 0:
                    raise ValueError
            except ValueError:
                raise ValueError(f"hang.job_timeouts: expected 'JOB=SECONDS[,JOB=SECONDS...]' with positive "
                                 f"seconds, got {item!r}") from None
            out[job.strip()] = seconds
        return out

    def timeout_for(self, job: str) -> float:
        return self.job_timeout_map().get(job, self.timeout_seconds)

    def for_job(self, job: str) -> HangSettings:
        """These settings as the environment gives them to ``job``: its ``job_timeouts`` entry as the timeout
        (models/settings_store.py asks this of the fleet's settings only; a run-time default replaces them)."""
        timeout = self.job_timeout_map().get(job)
        return self if timeout is None else dataclasses.replace(self, timeout_seconds=timeout)

    def check(self) -> None:
        """``ValueError`` unless the settings are usable as a whole (the environment's included)."""
        for name in ("timeout_seconds", "checkpoint_timeout_seconds", "first_step_timeout_seconds",
                     "warning_factor", "heartbeat_timeout_seconds"):
            if not getattr(self, name) > 0:
                raise ValueError(f"hang.{name} must be positive")
        if self.warning_min_steps < 1 or self.max_listed_ranks < 1:
            raise ValueError("hang.warning_min_steps and hang.max_listed_ranks must be at least 1")
