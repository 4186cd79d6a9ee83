"""The detection core's settings tree: the sections the core reads, each defined next to what it configures.

=================  ==============================================  ===================================
section            class, where                                    configures
=================  ==============================================  ===================================
``straggler``      ``StragglerSettings``, models/steps/straggler.py      straggler and long-horizon rules
``assembly``       ``AssemblySettings``, models/steps/assembly.py        gathering ranks into one step
``hang``           ``HangSettings``, models/hang/detector.py                the hang rule
``job_health``     ``JobHealthSettings``, models/jobhealth/job_health.py     throughput, comm, checkpoint rules
``retention``      ``RetentionSettings``, models/engine.py         bounds on the engine's jobs
``telemetry``      ``TelemetrySettings``, models/telemetry/telemetry_hub.py  node telemetry, causes, the agent
``host``           ``HostSettings``, models/telemetry/host.py                host signals, device-layer rules
``oncall``         ``OnCallSettings``, models/oncall/oncall.py            scope, action, restarts, node ledger
``worker``         ``PipelineSettings``, models/pipeline.py        the pipeline's timer, input checks
=================  ==============================================  ===================================

stepwatch/config.py's ``Settings`` extends this tree with what only the processes need (Kafka,
security, the worker's web server, Alertmanager, the shard stage) and reads the environment
(``STEPWATCH_<SECTION>_<FIELD>``). Fields marked ``runtime`` (models/tunable.py) may change while
the worker runs. The core takes a ``DetectionSettings`` (or a ``Settings``) and imports nothing from
``stepwatch``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .steps.assembly import AssemblySettings
from .engine import RetentionSettings
from .hang.detector import HangSettings
from .telemetry.host import HostSettings
from .jobhealth.job_health import JobHealthSettings
from .oncall.oncall import OnCallSettings
from .pipeline import PipelineSettings
from .steps.straggler import StragglerSettings
from .telemetry.telemetry_hub import TelemetrySettings

__all__ = ["AssemblySettings", "DetectionSettings", "HangSettings", "HostSettings", "JobHealthSettings",
           "OnCallSettings", "PipelineSettings", "RetentionSettings", "StragglerSettings", "TelemetrySettings"]


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
