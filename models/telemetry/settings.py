"""Settings of node telemetry (``TelemetrySettings``: models/telemetry/telemetry_hub.py, the node agent) and of
the host signals and device-layer rules (``HostSettings``: models/telemetry/host.py), in a module that imports
no detector."""

from __future__ import annotations

from dataclasses import dataclass

from ..tunable import MAX_SECONDS, runtime


@dataclass(frozen=True, kw_only=True)
class TelemetrySettings:
    """Node telemetry: the node agent, counter spikes, GPU/link alerts, correlation
    (models/telemetry/telemetry_hub.py)."""

    #: Topic of node telemetry (keyed by node), under the Kafka topic prefix.
    topic: str = "telemetry"
    #: Seconds between two samples of the node agent.
    agent_interval: float = 1.0
    #: Root of sysfs for the agent (tests point it at a recorded tree).
    sysfs_root: str = "/sys"
    #: Root of procfs for the agent's host signals (tests point it at a fake tree).
    proc_root: str = "/proc"
    #: The agent reads Xid lines from this kernel log (``/dev/kmsg``, or a file written the same way); "" = off.
    kmsg_path: str = ""
    #: Batches the agent holds while Kafka is slow or away; beyond, the oldest are dropped and counted.
    agent_queue_size: int = 600
    #: How long one send may block on a full producer buffer or missing metadata, milliseconds.
    agent_max_block_ms: int = 1000
    #: The agent's NCCL Inspector reader (producers/nccl_inspector.py, docs/zero-code.md): the directory of
    #: NCCL_INSPECTOR_DUMP_DIR ("" = off), and the coll_sn per window of its ``nccl_window`` events: ``auto``
    #: (powers of two up to 64, ~1 s of each communicator's collectives), ``auto:CAP``, or a fixed number.
    nccl_inspector_dir: str = ""
    nccl_inspector_window: str = "auto"
    #: The agent's NCCL RAS client (producers/nccl_ras.py): HOST:PORT ("" = off; NCCL's is localhost:28028),
    #: queried every this many seconds (at least 5: frequent queries have crashed jobs, NVIDIA/nccl#1762).
    nccl_ras: str = ""
    nccl_ras_interval: float = 10.0
    #: Seconds between two topology events from the agent.
    topology_interval: float = 60.0
    #: The agent's topology file (producers/port_neighbors.py, docs/network.md): ``ibnetdiscover`` output,
    #: ``lldpctl -f json`` output or a node -> port -> switch map, re-read when it changes ("" = none).
    topology_file: str = ""
    #: Suspected causes are spikes and faults within this many seconds of an alert's start (both sides).
    correlation_window: float = 60.0
    #: Samples of each rate's own recent baseline (bounded memory).
    baseline_samples: int = runtime(120, low=1, high=10_000, why="a ring of this many samples per GPU and port")
    #: Samples a baseline needs before a rate is judged against it.
    baseline_min_samples: int = runtime(10, low=1, high=10_000)
    #: A rate (xmit_wait, CNPs) is a spike at this multiple of its baseline median (and above its floor).
    rate_factor: float = 4.0
    #: Bandwidth below this fraction of its baseline (while the baseline is busy) is a collapse.
    bandwidth_collapse_ratio: float = runtime(0.3, high=1.0)
    #: Throttling counts as a fault once the SM clock is below this fraction of its baseline.
    clock_drop_ratio: float = runtime(0.85, high=1.0)
    #: Consecutive throttled samples before a gpu_fault for throttling fires.
    throttle_min_samples: int = runtime(3, low=1, high=10_000)
    #: A port has sustained errors (link_errors alert) when its error counters rose in
    #: ``link_error_min_samples`` of its last ``link_error_window`` samples (or 2 spanning the seconds that many
    #: span at 5 s, by the port's own sampling period: at a 10-30 s agent 2 samples; counters.sustained).
    link_error_window: int = runtime(10, low=1, high=10_000)
    link_error_min_samples: int = runtime(3, low=1, high=10_000)
    #: A condition-based alert (throttling, link errors, link down) resolves after this many clean samples.
    clear_after: int = runtime(30, low=1, high=100_000)
    #: An event-based fault (Xid, ECC double-bit error) resolves this long after its last occurrence.
    fault_hold_seconds: float = runtime(300.0, low=0.0, high=MAX_SECONDS)
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
    #: Persistent link baselines (models/telemetry/link_baseline.py, docs/network.md): a sample's weight halves
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

    def check(self) -> None:
        """``ValueError`` unless the fields make sense together."""
        if not 1 <= self.link_error_min_samples <= self.link_error_window:
            raise ValueError("telemetry: need 1 <= link_error_min_samples <= link_error_window")
        if self.baseline_min_samples > self.baseline_samples:
            raise ValueError("telemetry: need baseline_min_samples <= baseline_samples")


@dataclass(frozen=True, kw_only=True)
class HostSettings:
    """Host signals as causes (models/telemetry/host.py) and the device-layer rules of seed 003
    (models/telemetry/device_rules.py)."""

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
    #: An NFS mount's WRITE or COMMIT round trip (ms per completed op over a sample) counts at this multiple of
    #: the mount's own baseline ...
    nfs_rtt_factor: float = 4.0
    #: ... and above this many ms; a sample with a major RPC timeout or a retransmission counts whatever the rtt.
    nfs_rtt_floor_ms: float = 50.0
    #: Host samples in the correlation window a condition must hold in to be evidence.
    min_samples: int = 2
    #: A silent rank is blamed on an OOM kill of its node within this many seconds after its last event.
    oom_window_seconds: float = 60.0
    #: Host samples kept per node (the correlation looks ``telemetry.correlation_window`` either side of an
    #: alert's start; causes are kept once the window has closed). About 500 bytes each.
    history_samples: int = 300
    #: gpu_idle: a GPU that runs a rank of a stepping job below this utilization (%) for ``gpu_idle_seconds``.
    gpu_idle_util_pct: float = runtime(10.0, high=100.0)
    gpu_idle_seconds: float = runtime(300.0, low=0.0, high=MAX_SECONDS)
    #: gpu_hot: temperature at or above this (degrees C) in ``gpu_hot_samples`` consecutive samples.
    gpu_hot_temp_c: float = runtime(85.0, high=1000.0)
    gpu_hot_samples: int = runtime(3, low=1, high=10_000)
    #: hbm_full: memory used above this share of total (``gpu_hot_samples`` samples in a row) while the job's
    #: step time (median of its last 10 steps) grew to ``hbm_step_growth`` x its earlier median.
    hbm_full_ratio: float = runtime(0.90, high=1.0)
    hbm_step_growth: float = runtime(1.1, low=1.0, high=1000.0)
    #: Hysteresis of the device rules: a firing gpu_hot holds until the temperature is this many degrees below
    #: ``gpu_hot_temp_c``, hbm_full until memory is this share below ``hbm_full_ratio``, gpu_idle until
    #: utilization is this many points above ``gpu_idle_util_pct`` ...
    gpu_hot_clear_c: float = runtime(3.0, low=0.0, high=1000.0)
    hbm_full_clear_ratio: float = runtime(0.02, low=0.0, high=1.0)
    gpu_idle_clear_pct: float = runtime(5.0, low=0.0, high=100.0)
    #: ... for 5 samples and at least this many seconds of the GPU's clock: a value hovering at a threshold is
    #: one incident, not one per crossing.
    device_clear_seconds: float = runtime(60.0, low=0.0, high=MAX_SECONDS)
