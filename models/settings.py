"""The detection core's settings tree: the sections the core reads, each defined next to what it configures.

==============  ===================================================  ====================================
section         class, where                                         configures
==============  ===================================================  ====================================
``straggler``   ``StragglerSettings``, models/steps/settings.py      straggler and long-horizon rules
``assembly``    ``AssemblySettings``, models/steps/settings.py       gathering ranks into one step
``hang``        ``HangSettings``, models/hang/settings.py            the hang rule
``job_health``  ``JobHealthSettings``, models/jobhealth/settings.py  throughput, comm, checkpoint rules
``retention``   ``RetentionSettings``, this module                   bounds on the engine's jobs
``telemetry``   ``TelemetrySettings``, models/telemetry/settings.py  node telemetry, causes, the agent
``host``        ``HostSettings``, models/telemetry/settings.py       host signals, device-layer rules
``oncall``      ``OnCallSettings``, models/oncall/settings.py        scope, action, restarts, node ledger
``worker``      ``PipelineSettings``, this module                    the pipeline's timer, input checks
==============  ===================================================  ====================================

stepwatch/config.py's ``Settings`` extends this tree with what only the processes need (Kafka,
security, the worker's web server, Alertmanager, the shard stage) and reads the environment
(``STEPWATCH_<SECTION>_<FIELD>``). Fields marked ``runtime`` (models/tunable.py) may change while
the worker runs. The core takes a ``DetectionSettings`` (or a ``Settings``) and imports nothing from
``stepwatch``. Each section's class lives in a light ``settings.py`` beside what it configures, importing no
detector (its old home re-exports it), so this tree and stepwatch/config.py load no engine
(tests/models/test_settings_tree.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .hang.settings import HangSettings
from .jobhealth.settings import JobHealthSettings
from .oncall.settings import OnCallSettings
from .steps.settings import AssemblySettings, StragglerSettings
from .telemetry.settings import HostSettings, TelemetrySettings

__all__ = ["AssemblySettings", "DetectionSettings", "HangSettings", "HostSettings", "JobHealthSettings",
           "OnCallSettings", "PipelineSettings", "RetentionSettings", "StragglerSettings", "TelemetrySettings"]


@dataclass(frozen=True, kw_only=True)
class RetentionSettings:
    """Bounds on the engine's state: nothing grows without limit."""

    #: A job with no event for this long is forgotten (its open alerts resolve as "evicted").
    job_idle_seconds: float = 6 * 3600.0
    #: A job that sent ``phase: end`` is forgotten this long after its last event.
    ended_job_seconds: float = 600.0
    #: At most this many jobs are tracked; beyond, the least recently active job *without an open
    #: alert* nor a hang still to judge is forgotten (a hung or stalled job is never pushed out by new ones), else one whose only open alert
    #: is a hang no rank has spoken since (dead junk: its hang resolves ``forgotten``; issue 44 finding 2);
    #: when the ``EVICTION_PROBES`` (models/jobs_store.py) least recently active are neither, the new job's event is refused
    #: and counted (``stepwatch_engine_jobs_refused_total``). Evictions: ``stepwatch_engine_jobs_evicted_total``.
    max_jobs: int = 10_000
    #: Ranks tracked per job at most; events of further new ranks are left out and counted
    #: (``stepwatch_state_capped_total{what="ranks_per_job"}``): one producer cannot grow a job forever.
    max_ranks_per_job: int = 131_072
    #: Ranks tracked across all jobs at most (per-job caps must not multiply: 2 jobs x 100k ranks took 877 MB);
    #: events of further new ranks are left out and counted as the per-job cap's are.
    max_ranks_total: int = 262_144
    #: Process groups tracked across all jobs at most (the per-job 4096 must not multiply across forged jobs);
    #: heartbeats' further new groups are left out, counted (``stepwatch_state_capped_total{what="process_groups_total"}``).
    max_process_groups_total: int = 65_536


@dataclass(frozen=True, kw_only=True)
class PipelineSettings:
    """What the pipeline itself needs of the worker's settings (``STEPWATCH_WORKER_<FIELD>``;
    stepwatch/config.py's ``WorkerSettings`` adds the rest)."""

    #: How often the worker's timer runs time-driven rules (hang checks, step flush), seconds
    #: (``run_recording`` ticks a recording's clock as often).
    tick_interval: float = 1.0
    #: Events stamped further than this ahead of the worker's clock are dead-lettered (a
    #: sender clock or unit bug); older timestamps are fine (recordings, clock offsets).
    max_future_seconds: float = 86_400.0
    #: New jobs one message may open at most: events of further new jobs in it are dead-lettered (cause
    #: ``capped``) and counted (``stepwatch_state_capped_total{what="new_jobs_per_message"}``), so that one
    #: message cannot churn the job table (a rank monitor's envelope holds one job).
    max_new_jobs_per_message: int = 256


@dataclass(frozen=True, kw_only=True)
class DetectionSettings:
    """Every setting the detection core reads, one immutable tree (override with ``dataclasses.replace``)."""

    straggler: StragglerSettings = field(default_factory=StragglerSettings)
    assembly: AssemblySettings = field(default_factory=AssemblySettings)
    hang: HangSettings = field(default_factory=HangSettings)
    job_health: JobHealthSettings = field(default_factory=JobHealthSettings)
    retention: RetentionSettings = field(default_factory=RetentionSettings)
    telemetry: TelemetrySettings = field(default_factory=TelemetrySettings)
    host: HostSettings = field(default_factory=HostSettings)
    oncall: OnCallSettings = field(default_factory=OnCallSettings)
    worker: PipelineSettings = field(default_factory=PipelineSettings)
