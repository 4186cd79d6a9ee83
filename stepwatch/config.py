"""One immutable configuration object, with documented defaults and env-var overrides.

Every setting has a default that suits a typical synchronous data-parallel job.
Each one can be overridden from the environment as ``STEPWATCH_<SECTION>_<FIELD>``
(for example ``STEPWATCH_STRAGGLER_RATIO_THRESHOLD=1.2``); the Kafka bootstrap
servers also honour the shorter ``KAFKA_BOOTSTRAP``. Build it with
``Settings.from_env()``; override single fields with ``dataclasses.replace``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, kw_only=True)
class StragglerSettings:
    """Peer-comparison straggler rule (see models/straggler.py)."""

    #: A step is "slow" for a rank when its signal is at least this multiple of the peer median ...
    ratio_threshold: float = 1.10
    #: ... and its robust z-score (MAD-based) is at least this.
    z_threshold: float = 3.5
    #: Fire when at least ``min_flagged`` of the last ``window`` evaluated steps were slow.
    min_flagged: int = 3
    window: int = 5
    #: Resolve after this many consecutive clean steps (hysteresis).
    clear_after: int = 10
    #: Floor on the spread used by the z-score, as a fraction of the peer median: stops a
    #: perfectly uniform group (MAD ~ 0) from turning 0.1% differences into huge z-scores.
    spread_floor: float = 0.02
    #: Groups with fewer ranks than this are not compared (a median of 2 says nothing).
    min_peers: int = 4
    #: Steps ignored at the start of a job (and after each restart of the step counter).
    warmup_steps: int = 10
    #: Ratio at and above which a straggler alert is critical rather than a warning.
    critical_ratio: float = 1.5
    #: Steps of per-rank history kept for the evidence of an alert.
    evidence_window: int = 20
    #: Fire only when so many slow steps have at most this chance of being independent spikes at
    #: the job's learned background rate (1 disables the test: plain k of n).
    coincidence_p: float = 2e-7
    #: Lowest background rate of slow rank-steps assumed (also the prior before it is learned).
    spike_rate_floor: float = 0.001
    #: A rank whose alert resolved fires again within this many steps only when clearly worse.
    holdoff_steps: int = 200
    #: Long-horizon rule (models/long_straggler.py, severity info): smallest steady slowdown
    #: reported (0 = off) ...
    long_min_effect: float = 0.03
    #: ... judged over this many steps of per-rank history.
    long_window: int = 200


@dataclass(frozen=True, kw_only=True)
class AssemblySettings:
    """How per-rank step events are gathered into one comparable step."""

    #: A step is evaluated once every known rank of its group reported, or once a step
    #: this many steps newer has arrived (late ranks are then left out of that step) ...
    max_lag_steps: int = 3
    #: ... or once it has waited this many seconds of event time.
    max_wait_seconds: float = 30.0
    #: Bound on steps held open per group (memory bound for jobs with missing ranks).
    max_pending_steps: int = 16


@dataclass(frozen=True, kw_only=True)
class HangSettings:
    """Hang rule: a job whose step counter stops advancing (see models/hang.py, docs/hang.md)."""

    #: Critical once no step completed for this many seconds (the user's N).
    timeout_seconds: float = 600.0
    #: Used instead while the job is in the ``checkpoint`` phase (never below the job's timeout).
    checkpoint_timeout_seconds: float = 1800.0
    #: Used instead before the job's first step completed, e.g. model loading (never below the job's timeout).
    first_step_timeout_seconds: float = 1200.0
    #: Per-job overrides of ``timeout_seconds``: ``"jobA=300,jobB=900"``.
    job_timeouts: str = ""
    #: Early warning once no step completed for ``warning_factor`` x the p99 of recent train step times ...
    warning_factor: float = 10.0
    #: ... but never sooner than this many seconds (one slow step is not a hang).
    warning_floor_seconds: float = 30.0
    #: Train steps needed in the history before the early warning applies.
    warning_min_steps: int = 5
    #: Recent train step times kept for the p99 (bounded memory).
    step_history: int = 256
    #: A rank is silent after no event from it for max(this, ``heartbeat_timeout_factor`` x the
    #: observed heartbeat interval) seconds, counted from the job's latest event.
    heartbeat_timeout_seconds: float = 15.0
    heartbeat_timeout_factor: float = 3.0
    #: Most ranks listed per category in an alert's evidence (counts are always complete).
    max_listed_ranks: int = 32
    #: On a hang, ask the culprits (and ``stack_waiting_ranks`` waiting ranks) for their Python
    #: stacks on the control topic (docs/hang.md); False: never ask.
    stacks: bool = True
    stack_waiting_ranks: int = 3
    #: Ranks that have not answered this many seconds after the request are listed in ``stack_missing``.
    stack_timeout_seconds: float = 10.0
    #: At most one stack request per job per this many seconds.
    stack_min_interval_seconds: float = 60.0

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


@dataclass(frozen=True, kw_only=True)
class KafkaSettings:
    """Where the worker, producers and CLI connect, and the topic names."""

    #: Bootstrap servers; empty means "none configured" (demo starts a local broker).
    bootstrap: str = ""
    #: Prefix for every topic name, so several deployments (or tests) share a cluster.
    topic_prefix: str = "stepwatch."
    events_topic: str = "events"
    alerts_topic: str = "alerts"
    deadletter_topic: str = "deadletter"
    #: Runtime settings (compacted, keyed by job id or ``*``; see docs/operations.md).
    config_topic: str = "config"
    #: Workers registry (compacted, one partition, keyed by worker URL): which worker owns which
    #: events partition, for the status API's proxying (streams/registry.py).
    workers_topic: str = "workers"
    #: Persistent link baselines (compacted, keyed by node; streams/link_baselines.py, docs/network.md).
    link_baselines_topic: str = "link-baselines"
    #: Worker -> rank monitors requests (stack requests, keyed by job; docs/hang.md).
    control_topic: str = "control"
    #: Output of the optional shard stage (``stepwatch shard``): the raw events re-batched per job, keyed
    #: by job. Detection workers read it with ``STEPWATCH_KAFKA_EVENTS_TOPIC=job-events``.
    job_events_topic: str = "job-events"
    #: Partitions for topics stepwatch creates; jobs are spread over partitions by key.
    partitions: int = 4
    #: Replication factor for topics stepwatch creates (1 suits a single local broker).
    replication_factor: int = 1
    #: Faust application id (also the consumer group).
    app_id: str = "stepwatch"

    def topic(self, name: str) -> str:
        return f"{self.topic_prefix}{name}"


@dataclass(frozen=True, kw_only=True)
class WorkerSettings:
    #: How often the worker's timer runs time-driven rules (hang checks, step flush), seconds.
    tick_interval: float = 1.0
    #: Port of the worker's web server (metrics, status); 0 disables it.
    web_port: int = 6066
    #: Where Faust keeps local state; empty means ~/.cache/stepwatch/<app_id>.
    datadir: str = ""
    #: On (re)assignment, messages per events partition read back before the committed
    #: offset to rebuild the detectors' windows (streams/recovery.py); 0 disables it.
    recovery_messages: int = 1000
    #: Alerts per alerts-topic partition read back to learn which alerts are open.
    recovery_alerts_lookback: int = 5000
    #: Events stamped further than this ahead of the worker's clock are dead-lettered (a
    #: sender clock or unit bug); older timestamps are fine (recordings, clock offsets).
    max_future_seconds: float = 86_400.0
    #: Consumer-group session timeout, seconds: how long a crashed worker's partitions stay
    #: with it before another worker (or its restart) takes them over.
    session_timeout: float = 30.0
    #: How other workers reach this one's web server (status requests for a job on another
    #: worker are proxied there); empty means http://127.0.0.1:<web_port>.
    canonical_url: str = ""
    #: Seconds between two advertisements of this worker's events partitions on the workers topic
    #: (also sent on every assignment change); entries older than 3 intervals are ignored.
    registry_interval: float = 10.0
    #: Recent judged steps kept per job for the dashboard's heatmap and step-rate line.
    status_history_steps: int = 60
    #: The dashboard's heatmap shows at most this many rows: per node, then per node range, beyond it.
    dashboard_max_rows: int = 256
    #: Who consumes the events topic: ``aiokafka`` (the worker's own consumer in the group
    #: ``<app_id>-events``, ``getmany`` batches into the engine; the default) or ``faust`` (a Faust
    #: agent in the group ``<app_id>``, one message at a time).
    consumer: str = "aiokafka"

    def __post_init__(self) -> None:
        if self.consumer not in ("faust", "aiokafka"):
            raise ValueError(f"worker.consumer: expected 'faust' or 'aiokafka', got {self.consumer!r}")


@dataclass(frozen=True, kw_only=True)
class ShardSettings:
    """The optional first stage that spreads one large job over several processes (``stepwatch shard``,
    streams/shard.py, docs/operations.md "One large job over several workers")."""

    #: Longest time (seconds) a job's events wait in the stage before they go out as an envelope: the
    #: latency the stage adds at most.
    flush_interval: float = 0.1
    #: Events per envelope at most (a job's buffer goes out at once when it holds this many).
    max_events: int = 256
    #: Events held per process at most, buffered or sent but not yet acknowledged; beyond, every buffer is
    #: flushed at once and consumption waits for acknowledgements (nothing is dropped).
    max_buffered: int = 100_000
    #: Seconds between commits of the consumed offsets (only of events the broker acknowledged).
    commit_interval: float = 1.0
    #: Port of the stage's Prometheus metrics (``/metrics``); 0 serves none.
    metrics_port: int = 0

    def __post_init__(self) -> None:
        if not self.flush_interval > 0:
            raise ValueError(f"shard.flush_interval: expected a positive number of seconds, "
                             f"got {self.flush_interval!r}")
        if not 1 <= self.max_events <= 100_000:
            raise ValueError(f"shard.max_events: expected 1 to 100000, got {self.max_events!r}")
        if self.max_buffered < self.max_events:
            raise ValueError(f"shard.max_buffered: expected at least shard.max_events ({self.max_events}), "
                             f"got {self.max_buffered!r}")


@dataclass(frozen=True, kw_only=True)
class AlertmanagerSettings:
    """Optional delivery of alerts to Prometheus Alertmanager (the alerts topic stays the primary output)."""

    #: Base URL, e.g. http://alertmanager:9093; empty disables the sink.
    url: str = ""
    #: Firing alerts are sent again this often (seconds), as Prometheus does.
    resend_interval: float = 60.0
    #: Per-request timeout, seconds.
    timeout: float = 10.0
    #: Alerts waiting to be sent; when full the oldest waiting update is dropped (detection never waits).
    queue_size: int = 1000
    #: Retry a failed POST with exponential backoff from this many seconds ...
    backoff_initial: float = 0.5
    #: ... up to this many seconds between attempts ...
    backoff_max: float = 30.0
    #: ... for at most this many attempts.
    max_attempts: int = 8


@dataclass(frozen=True, kw_only=True)
class TelemetrySettings:
    """Node telemetry: the node agent, counter spikes, GPU/link alerts, correlation (models/telemetry.py)."""

    #: Topic of node telemetry (keyed by node), under the Kafka topic prefix.
    topic: str = "telemetry"
    #: Seconds between two samples of the node agent.
    agent_interval: float = 1.0
    #: Root of sysfs for the agent (tests point it at a recorded tree).
    sysfs_root: str = "/sys"
    #: Root of procfs for the agent's host signals (tests point it at a fake tree).
    proc_root: str = "/proc"
    #: Batches the agent holds while Kafka is slow or away; beyond, the oldest are dropped and counted.
    agent_queue_size: int = 600
    #: How long one send may block on a full producer buffer or missing metadata, milliseconds.
    agent_max_block_ms: int = 1000
    #: Seconds between two topology events from the agent.
    topology_interval: float = 60.0
    #: Suspected causes are spikes and faults within this many seconds of an alert's start (both sides).
    correlation_window: float = 60.0
    #: Samples of each rate's own recent baseline (bounded memory).
    baseline_samples: int = 120
    #: Samples a baseline needs before a rate is judged against it.
    baseline_min_samples: int = 10
    #: A rate (xmit_wait, CNPs) is a spike at this multiple of its baseline median (and above its floor).
    rate_factor: float = 4.0
    #: Bandwidth below this fraction of its baseline (while the baseline is busy) is a collapse.
    bandwidth_collapse_ratio: float = 0.3
    #: Throttling counts as a fault once the SM clock is below this fraction of its baseline.
    clock_drop_ratio: float = 0.85
    #: Consecutive throttled samples before a gpu_fault for throttling fires.
    throttle_min_samples: int = 3
    #: A port has sustained errors (link_errors alert) when its error counters rose in
    #: ``link_error_min_samples`` of its last ``link_error_window`` samples.
    link_error_window: int = 10
    link_error_min_samples: int = 3
    #: A condition-based alert (throttling, link errors, link down) resolves after this many clean samples.
    clear_after: int = 30
    #: An event-based fault (Xid, ECC double-bit error) resolves this long after its last occurrence.
    fault_hold_seconds: float = 300.0
    #: Xid codes caused by the application, not the hardware: no gpu_fault.
    app_xids: str = "13,31,43,45,68"
    #: A straggler whose data_time is at least this multiple of its peers' points at the input pipeline.
    data_time_ratio: float = 3.0
    #: Spikes remembered per node for correlation (oldest dropped first).
    max_spikes_per_node: int = 512
    #: Suspected causes listed per alert.
    max_causes: int = 5
    #: Enrichment updates (new versions) published per alert at most.
    max_enrichment_updates: int = 5
    #: The worker's global telemetry feed starts this many seconds back in the topic.
    feed_lookback_seconds: float = 300.0
    #: Persistent link baselines (models/link_baseline.py, docs/network.md): a sample's weight halves
    #: after this many seconds of the node's clock; a port's own baseline counts after this many samples;
    #: the owner of a node's partition writes the node's baselines to the compacted topic this often.
    link_baseline_half_life: float = 21600.0
    link_baseline_min_samples: int = 120
    link_baseline_publish_interval: float = 60.0

    def app_xid_set(self) -> frozenset[int]:
        try:
            return frozenset(int(x) for x in self.app_xids.split(",") if x.strip())
        except ValueError:
            raise ValueError(f"telemetry.app_xids: expected comma-separated integers, got {self.app_xids!r}") from None


@dataclass(frozen=True, kw_only=True)
class HostSettings:
    """Host signals as causes (models/host.py) and the device-layer rules of seed 003 (models/device_rules.py)."""

    #: IO pressure: PSI io ``some avg10`` at or above this percentage (and ``pressure_factor`` x the node's baseline).
    io_pressure_pct: float = 20.0
    #: CPU saturation: busy share of all CPUs at or above this (0-1), or PSI cpu ``some avg10`` above
    #: ``cpu_pressure_pct``.
    cpu_busy_ratio: float = 0.95
    cpu_pressure_pct: float = 50.0
    #: Memory pressure: PSI memory ``some avg10`` at or above this percentage, or MemAvailable below
    #: ``mem_available_ratio`` of MemTotal.
    memory_pressure_pct: float = 10.0
    mem_available_ratio: float = 0.05
    #: A pressure counts only at this multiple of the node's own baseline median (once it has one).
    pressure_factor: float = 2.0
    #: A disk's read latency (ms per completed read) counts at this multiple of its baseline or of the peer
    #: nodes' disks' median ...
    disk_latency_factor: float = 4.0
    #: ... and above this many ms (a fast NVMe going from 0.1 to 0.5 ms is no stall).
    disk_latency_floor_ms: float = 2.0
    #: Reads between two samples below which a latency is not measured (too few to mean anything).
    disk_min_reads: int = 5
    #: Host samples in the correlation window a condition must hold in to be evidence.
    min_samples: int = 2
    #: A silent rank is blamed on an OOM kill of its node within this many seconds after its last event.
    oom_window_seconds: float = 60.0
    #: Host samples kept per node (the correlation looks ``telemetry.correlation_window`` either side of an
    #: alert's start; causes are kept once the window has closed). About 500 bytes each.
    history_samples: int = 300
    #: gpu_idle: a GPU that runs a rank of a stepping job below this utilization (%) for ``gpu_idle_seconds``.
    gpu_idle_util_pct: float = 10.0
    gpu_idle_seconds: float = 300.0
    #: gpu_hot: temperature at or above this (degrees C) in ``gpu_hot_samples`` consecutive samples.
    gpu_hot_temp_c: float = 85.0
    gpu_hot_samples: int = 3
    #: hbm_full: memory used above this share of total (``gpu_hot_samples`` samples in a row) while the job's
    #: step time (median of its last 10 steps) grew to ``hbm_step_growth`` x its earlier median.
    hbm_full_ratio: float = 0.90
    hbm_step_growth: float = 1.1


@dataclass(frozen=True, kw_only=True)
class JobHealthSettings:
    """Job-wide rules: throughput drop, communication slowdown, checkpoint staleness (issue 9)."""

    #: Throughput drop: smallest slowdown worth an alert (fraction of the baseline step time).
    throughput_min_effect: float = 0.10
    #: CUSUM alarm level (sum of relative excess over ``min_effect / 2``).
    throughput_threshold: float = 0.4
    #: Steps whose median must be ``min_effect`` above the baseline (one slow step never fires).
    throughput_persistence: int = 5
    #: Healthy steps the baseline is the median of.
    throughput_baseline_steps: int = 200
    #: Steps missing some of their group's ranks (late or lost events) are left out, up to this many
    #: in a row; beyond, they are judged as the job's new normal.
    throughput_max_incomplete_steps: int = 100
    #: Communication slowdown: collective transfer time this fraction above its baseline ...
    comm_threshold: float = 0.30
    #: ... as a median over this many collectives ...
    comm_window: int = 20
    #: ... for this many consecutive collectives.
    comm_persistence: int = 10
    #: Checkpoint staleness: the last successful checkpoint older than this (seconds; 0 = off) ...
    checkpoint_max_age_seconds: float = 3600.0
    #: ... or this many steps (0 = off) ...
    checkpoint_max_age_steps: int = 0
    #: ... or a checkpoint taking this many times its usual duration.
    checkpoint_slow_factor: float = 3.0
    #: Policy: every job must checkpoint, so the age rule also runs for a job that never reported a
    #: checkpoint. Off: only jobs that have reported one (then stopped) can be stale.
    checkpoint_required: bool = False


@dataclass(frozen=True, kw_only=True)
class RetentionSettings:
    """Bounds on the engine's state: nothing grows without limit."""

    #: A job with no event for this long is forgotten (its open alerts resolve as "evicted").
    job_idle_seconds: float = 6 * 3600.0
    #: A job that sent ``phase: end`` is forgotten this long after its last event.
    ended_job_seconds: float = 600.0
    #: At most this many jobs are tracked; beyond, the least recently active is forgotten.
    max_jobs: int = 10_000


@dataclass(frozen=True, kw_only=True)
class SecuritySettings:
    """How every Kafka client (worker, producers, agent, CLI) connects: the usual Kafka client settings.

    Secrets come from the environment or from files and are never logged: ``repr`` and
    ``Settings.as_dict`` leave them out.
    """

    #: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.
    protocol: str = "PLAINTEXT"
    #: CA bundle (PEM) that signed the brokers' certificates; empty: the system's trust store.
    ssl_cafile: str = ""
    #: Client certificate and key (PEM) for mutual TLS.
    ssl_certfile: str = ""
    ssl_keyfile: str = ""
    #: Check that the broker's certificate names the host connected to.
    ssl_check_hostname: bool = True
    #: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
    sasl_mechanism: str = "PLAIN"
    sasl_username: str = ""
    #: The SASL password itself (prefer ``sasl_password_file``).
    sasl_password: str = field(default="", repr=False)
    #: A file holding the SASL password (e.g. a mounted Kubernetes secret).
    sasl_password_file: str = ""


@dataclass(frozen=True, kw_only=True)
class OnCallSettings:
    """Scope and action on every alert, restarts, the node ledger and action hooks (docs/operations.md, "On call")."""

    #: Overrides of the failure-class table (models/actions.py): JSON, or ``@path`` of a JSON file.
    failure_classes: str = ""
    #: The node ledger counts a node's incidents over this sliding window (seconds) ...
    ledger_window_seconds: float = 24 * 3600.0
    #: ... and a node implicated in this many distinct jobs within it is a ``node_suspect``.
    ledger_min_jobs: int = 2
    #: Compacted topic of incidents (keyed by node and alert): every worker's ledger reads it whole.
    ledger_topic: str = "ledger"
    #: Compacted topic of job placement (keyed by job), written by each job's owner, read by every worker.
    placement_topic: str = "placement"
    #: A node alert names the jobs that had ranks on the node within this many seconds of it.
    placement_window_seconds: float = 300.0
    #: A job restarted when its step counter goes back by more than this many steps ...
    restart_min_steps_back: int = 2
    #: ... after at least this many seconds without events from the rank that reports it.
    restart_min_silence_seconds: float = 30.0
    #: Action hooks: off by default. On: ``evidence.action`` of new node_suspect and critical device
    #: alerts goes to the actions topic (and the webhook, if set).
    hooks_enabled: bool = False
    actions_topic: str = "actions"
    #: Optional webhook URL (JSON POST) for actions.
    webhook_url: str = ""
    #: Dry run (the default): commands are rendered into the payload, never executed.
    dry_run: bool = True
    #: Executor command run with the rendered command appended, only when dry_run is off; empty: none.
    executor: str = ""
    #: Command templates ({node}, {reason}) rendered into each action.
    slurm_template: str = "scontrol update nodename={node} state=drain reason=\"{reason}\""
    kubernetes_template: str = "kubectl cordon {node}"


@dataclass(frozen=True, kw_only=True)
class Settings:
    straggler: StragglerSettings = field(default_factory=StragglerSettings)
    assembly: AssemblySettings = field(default_factory=AssemblySettings)
    hang: HangSettings = field(default_factory=HangSettings)
    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    worker: WorkerSettings = field(default_factory=WorkerSettings)
    telemetry: TelemetrySettings = field(default_factory=TelemetrySettings)
    alertmanager: AlertmanagerSettings = field(default_factory=AlertmanagerSettings)
    security: SecuritySettings = field(default_factory=SecuritySettings)
    job_health: JobHealthSettings = field(default_factory=JobHealthSettings)
    retention: RetentionSettings = field(default_factory=RetentionSettings)
    shard: ShardSettings = field(default_factory=ShardSettings)
    oncall: OnCallSettings = field(default_factory=OnCallSettings)
    host: HostSettings = field(default_factory=HostSettings)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "Settings":
        """Defaults overridden by ``STEPWATCH_<SECTION>_<FIELD>`` variables.

        Raises ``ValueError`` naming the variable when a value does not parse.
        """
        env = os.environ if environ is None else environ
        sections: dict[str, Any] = {}
        for section_field in dataclasses.fields(cls):
            default_section = section_field.default_factory()  # type: ignore[misc]
            overrides = {}
            for f in dataclasses.fields(default_section):
                var = f"STEPWATCH_{section_field.name}_{f.name}".upper()
                if var in env:
                    overrides[f.name] = _parse(var, env[var], type(getattr(default_section, f.name)))
            sections[section_field.name] = dataclasses.replace(default_section, **overrides)
        if "KAFKA_BOOTSTRAP" in env and "STEPWATCH_KAFKA_BOOTSTRAP" not in env:
            sections["kafka"] = dataclasses.replace(sections["kafka"], bootstrap=env["KAFKA_BOOTSTRAP"])
        return cls(**sections)

    def as_dict(self) -> dict[str, Any]:
        """Every setting, secrets redacted (safe to log or serve in the status API)."""
        out = dataclasses.asdict(self)
        if out["security"]["sasl_password"]:
            out["security"]["sasl_password"] = "***"
        return out


def _parse(var: str, raw: str, kind: type) -> Any:
    try:
        if kind is bool:
            lowered = raw.strip().lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        return kind(raw)
    except ValueError:
        raise ValueError(f"{var}={raw!r} is not a valid {kind.__name__}") from None
