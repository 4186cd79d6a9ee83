"""The node agent: samples GPUs (NVML), InfiniBand/RoCE ports (sysfs) and host signals (procfs); publishes them.

Xid events come from NVML and, with ``kmsg_path`` (``--kmsg``), from the kernel log (producers/kmsg.py);
repeated device events are coalesced (one event a second per node, GPU and code, with a ``count``) and
queued per kind, bounded, newest wins (producers/event_storm.py).

Runs on every node (``stepwatch agent``). Every ``interval`` seconds it sends one batch
keyed by the node name to the telemetry topic: a ``gpu`` event per GPU, a ``link``
event per port and one ``host`` event (producers/procfs_host.py), with raw cumulative counters; ``xid`` events go out as soon as NVML
reports them; a ``topology`` event (GPU -> nearest NICs, and with ``topology_file`` the switch at
the other end of each port's cable, producers/port_neighbors.py) at the start and every
``topology_interval`` seconds. What the node lacks (no GPU, no NVML, no InfiniBand) is
reported once and skipped.

Jobs without stepwatch code (docs/zero-code.md): with ``nccl_inspector_dir`` it also tails the
NCCL Inspector logs of every process on the node (producers/nccl_inspector.py) and with
``nccl_ras`` it queries NCCL RAS (producers/nccl_ras.py); what they give are job events
(``nccl_window``, ``heartbeat``), handed to ``job_sink`` keyed by job for the events topic.
Those read what local users control (files, a port anyone may listen on): they run on a thread
of their own (``stepwatch-agent-jobs``), so a stuck read or a trickling server never holds the
sampling thread; the agent trusts no local user (docs/security.md), and what it refused is in
``refusals`` (counted by cause, each cause logged once; printed when the agent stops).

It must never take the node down: the sampler never blocks on Kafka. Batches go through
the producer transport (producers/transport.py, drop mode): a bounded queue to a daemon
sender thread; when the queue is full the oldest batches are dropped and counted; a send
blocks the sender at most ``max_block_ms``; while Kafka is away the sender keeps retrying
to connect with a backoff. TLS/SASL: the ``STEPWATCH_SECURITY_*`` settings, as for the worker.
"""

from __future__ import annotations

import logging
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

from stepwatch.config import Settings

from .event_storm import Coalescer, KindQueues
from .kmsg import KmsgReader, short_bus_id, sysfs_gpu_order
from .nccl_inspector import InspectorReader, InspectorSettings, window_bounds
from .nccl_ras import RasPoller
from .nvml_sampler import NvmlSampler
from .port_neighbors import LocalPort, TopologyFile, nic_entries
from .proc_identity import ProcTable
from .procfs_host import HostReader
from .refusals import Refusals
from .transport import DROP, Transport
from .sysfs_ib import IbReader, normalize_bus_id

log = logging.getLogger("stepwatch.agent")


class KafkaSender:
    """The producer transport (producers/transport.py) in its drop mode, set up for node telemetry.

    ``offer`` never blocks the sampler; a full queue drops its oldest batch (fresh samples
    matter more), counted. TLS/SASL and the bootstrap come from ``settings`` (default
    ``Settings.from_env()``), like the worker's. On each (re)connection the telemetry topic
    is created if missing.
    """

    def __init__(self, *, bootstrap: str | None = None, topic: str, queue_size: int = 600, max_block_ms: int = 1000,
                 partitions: int = 4, replication_factor: int = 1, settings: Settings | None = None) -> None:
        self.settings = settings if settings is not None else Settings.from_env()
        self.bootstrap = bootstrap or self.settings.kafka.bootstrap
        self.topic = topic
        self.max_block_ms = max_block_ms
        self.partitions = partitions
        self.replication_factor = replication_factor
        self._queue_size = queue_size
        self.transport: Transport | None = None

    def start(self) -> "KafkaSender":
        if self.transport is None:
            self.transport = Transport(
                topic=self.topic, bootstrap=self.bootstrap, settings=self.settings, mode=DROP,
                queue_size=self._queue_size, flush_interval=0.2, linger_ms=50, max_block_ms=self.max_block_ms,
                acks=1, producer_config={"retries": 3},
                on_connect=self._create_topic, name="stepwatch-agent-sender")
        return self

    def _create_topic(self) -> None:
        from stepwatch.security import client_config
        from stepwatch.topics import create_topics

        try:
            create_topics(self.bootstrap, [self.topic], self.partitions, replication_factor=self.replication_factor,
                          timeout=10, client_config=client_config(self.settings), append_time=[self.topic])
        except Exception as exc:  # the topic may exist, or be created by the operator
            log.info("could not create %s: %s", self.topic, exc)

    def offer(self, key: str, events: list[dict]) -> bool:
        """Queue one batch; False when the queue was full (its oldest batch was dropped and counted)."""
        if self.transport is None:
            self.start()
        return self.transport.offer(key, events)

    @property
    def sent(self) -> int:
        """Batches Kafka acknowledged."""
        return self.transport.batches_sent if self.transport is not None else 0

    @property
    def dropped(self) -> int:
        """Batches dropped because the queue was full."""
        return self.transport.batches_dropped if self.transport is not None else 0

    @property
    def failed(self) -> int:
        """Batches that left the queue but were not delivered (Kafka away too long, or left at close)."""
        return self.transport.batches_failed if self.transport is not None else 0

    @property
    def connect_failures(self) -> int:
        return self.transport.connect_failures if self.transport is not None else 0

    def close(self, timeout: float = 5.0) -> None:
        if self.transport is not None:
            self.transport.close(timeout)


class NodeAgent:
    """Discovers what the node has, samples it, and hands batches to ``sink(key, events)``."""

    def __init__(self, *, node: str | None = None, settings: Settings | None = None, sysfs_root: str | None = None,
                 proc_root: str | None = None, nvml: Any = None, sink: Callable[[str, list[dict]], Any], report: TextIO | None = None,
                 clock: Callable[[], float] = time.time,
                 job_sink: Callable[[str, list[dict]], Any] | None = None) -> None:
        self.settings = settings or Settings.from_env()
        t = self.settings.telemetry
        self.node = node or socket.gethostname()
        self.interval = t.agent_interval
        self.topology_interval = t.topology_interval
        self.ib = IbReader(sysfs_root if sysfs_root is not None else t.sysfs_root)
        self.host = HostReader(proc_root if proc_root is not None else t.proc_root,
                               sysfs_root if sysfs_root is not None else t.sysfs_root)
        self.gpus = NvmlSampler(self.node, nvml=nvml)
        self.sink = sink
        self.report = report if report is not None else sys.stderr
        self.clock = clock
        self.skipped: list[str] = []
        self.found: list[str] = []
        self._next_topology = 0.0
        self._xid_thread: threading.Thread | None = None
        self._jobs_thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.samples = 0
        self.job_sink = job_sink if job_sink is not None else sink
        #: What the agent refused to read or speak for (producers/refusals.py), shared by every job source.
        self.refusals = Refusals()
        procs = self.procs = ProcTable(proc_root if proc_root is not None else t.proc_root, refusals=self.refusals)
        self.inspector = None
        if t.nccl_inspector_dir:
            low, cap = window_bounds(t.nccl_inspector_window)  # a bad value: one-line ValueError
            self.inspector = InspectorReader(InspectorSettings(directory=t.nccl_inspector_dir, window_min=low,
                                                               window_size=cap), node=self.node, procs=procs,
                                             clock=clock)
        self.ras = RasPoller(t.nccl_ras, procs=procs, node=self.node, interval=t.nccl_ras_interval,
                             clock=clock) if t.nccl_ras else None
        #: The switch behind each port (ibnetdiscover output, lldpctl -f json or a map), re-read when it changes.
        self.topology_file = TopologyFile(t.topology_file) if t.topology_file else None
        self._topology_error: str | None = None
        #: Storm protection (producers/event_storm.py): repeated device events coalesced, bounded queues per kind.
        self.storm = Coalescer(window=1.0)
        self.queues = KindQueues(size=1000)
        self._sysfs_root = sysfs_root if sysfs_root is not None else t.sysfs_root
        #: Xid lines of the kernel log (producers/kmsg.py), from ``t.kmsg_path`` ("" = off).
        self.kmsg = KmsgReader(t.kmsg_path, node=self.node, gpus=self._bus_to_gpu) if t.kmsg_path else None

    def discover(self) -> None:
        """Find GPUs and ports; say once what exists and what is skipped."""
        if self.gpus.start():
            self.found.append(f"{len(self.gpus.handles)} GPU(s) via NVML")
            if not self.gpus.watch_xids():
                self.skipped.append("xid events (NVML cannot report Xid events here)")
        else:
            self.skipped.append(f"gpu and xid events ({self.gpus.reason})")
        devices = self.ib.devices()
        if devices:
            ports = sum(len(self.ib.ports(d)) for d in devices)
            self.found.append(f"{len(devices)} RDMA device(s) with {ports} port(s) under {self.ib.class_dir}")
        else:
            self.skipped.append(f"link events (no InfiniBand/RoCE device under {self.ib.class_dir})")
        if self.host.available:
            psi = "with PSI" if self.host.psi() else "no PSI"
            self.found.append(f"host signals under {self.host.proc} ({psi}, {len(self.host.disks())} disk(s))")
        else:
            self.skipped.append(f"host events (cannot read {self.host.proc / 'stat'})")
        if self.kmsg is not None:
            if self.kmsg.open():
                self.found.append(f"Xid lines in {self.kmsg.path}")
            else:
                self.skipped.append(f"kernel log Xid lines ({self.kmsg.error})")
        if self.inspector is not None:
            self.found.append(f"NCCL Inspector logs under {self.inspector.dir}")
        if self.ras is not None:
            self.found.append(f"NCCL RAS at {self.ras.addr} every {self.ras.interval:g}s")
        if not devices:
            self.skipped.append("topology (no RDMA device)")
        elif not self.gpus.available:
            self.skipped.append("GPU -> NIC topology (no GPU)")
        if self.topology_file is not None:
            ports = self.local_ports()
            neighbors = self.topology_file.neighbors(self.node, ports)
            if self.topology_file.error:
                self._topology_error = self.topology_file.error
                self.skipped.append(f"switch neighbours ({self.topology_file.error})")
            else:
                switches = sorted({n.switch for n in neighbors.values()})
                self.found.append(f"the switch of {len(neighbors)} of {len(ports)} port(s) in "
                                  f"{self.topology_file.path} ({self.topology_file.source.value}"
                                  + (f": {', '.join(switches[:4])}" if switches else "") + ")")
        found = "; ".join(self.found) or "nothing to sample"
        line = f"stepwatch agent: node {self.node}: found {found}"
        if self.skipped:
            line += "; skipped: " + "; ".join(self.skipped)
        if self.gpus.unsupported:
            line += "; NVML fields not supported: " + ", ".join(sorted(self.gpus.unsupported))
        print(line, file=self.report, flush=True)

    def sample(self) -> list[dict]:
        """One batch: topology when due, a gpu event per GPU, a link event per port."""
        now = self.clock()
        events: list[dict] = []
        if now >= self._next_topology and self.ib.devices():
            events.append(self.topology_event(now))
            self._next_topology = now + self.topology_interval
        if self.gpus.available:
            try:
                events.extend(self.gpus.sample(now))
            except Exception:  # a driver problem must not stop the link sampling
                log.exception("GPU sampling failed")
        for port in self.ib.read_all():
            events.append(port.to_event(self.node, now))
        host = self.host.to_event(self.node, now)
        if host is not None:
            events.append(host)
        events.extend(self.device_events(now))
        self.samples += 1
        return events

    def device_events(self, now: float) -> list[dict]:
        """The kernel log's new Xid lines and the storm's held repeats, coalesced, through the bounded queues."""
        if self.kmsg is not None:
            for event in self.kmsg.poll(now):
                self.queues.offer(self.storm.add(event, now))
        self.queues.offer(self.storm.flush(now))
        return self.queues.drain()

    def _bus_to_gpu(self) -> dict[str, int]:
        """Short PCI bus id -> GPU index: NVML's where it knows them, else the nvidia driver's sysfs order."""
        if self.gpus.available and self.gpus.bus_ids:
            return {short_bus_id(b): i for i, b in enumerate(self.gpus.bus_ids) if b}
        return sysfs_gpu_order(self._sysfs_root)

    def local_ports(self) -> list[LocalPort]:
        """This node's ports as a topology file can name them (node GUID, NodeDescription, netdev)."""
        out = []
        for dev in self.ib.devices():
            guid, desc = self.ib.node_guid(dev), self.ib.node_desc(dev)
            for port in self.ib.ports(dev) or [1]:
                out.append(LocalPort(dev, port, node_guid=guid, node_desc=desc, netdev=self.ib.netdev(dev, port)))
        return out

    def topology_event(self, now: float) -> dict:
        """GPU -> nearest NICs (when NVML is there) and each port's neighbour switch (with a topology file)."""
        bus = {i: normalize_bus_id(b) for i, b in enumerate(self.gpus.bus_ids) if b} if self.gpus.available else {}
        gpus, nics = self.ib.topology(bus)
        if self.topology_file is not None:
            neighbors = self.topology_file.neighbors(self.node, self.local_ports())
            error = self.topology_file.error
            if error and error != self._topology_error:  # said once per new problem, then carried on without
                log.warning("topology file: %s; ports sent without their switch", error)
            self._topology_error = error
            for nic in nics:
                nic.update(nic_entries(neighbors, nic["device"], nic["ports"]))
        return {"v": 1, "kind": "topology", "node": self.node, "ts": round(now, 6), "gpus": gpus, "nics": nics}

    def job_events(self, *, final: bool = False) -> int:
        """Poll the NCCL sources; hand their events to ``job_sink`` keyed by job. Returns how many."""
        events: list[dict] = []
        if self.inspector is not None:
            try:
                events.extend(self.inspector.poll(final=final))
            except Exception:  # a reader bug must not stop the telemetry
                log.exception("reading NCCL Inspector logs failed")
        if self.ras is not None:
            try:
                events.extend(self.ras.poll(force=final))
            except Exception:
                log.exception("polling NCCL RAS failed")
        by_job: dict[str, list[dict]] = {}
        for event in events:
            by_job.setdefault(event["job"], []).append(event)
        for job, batch in by_job.items():
            self.job_sink(job, batch)
        return len(events)

    def _watch_xids(self) -> None:
        while not self._stop.is_set():
            try:
                events = self.gpus.wait_xid(1000, self.clock)
            except Exception:
                log.exception("waiting for Xid events failed")
                self._stop.wait(5)
                continue
            now = self.clock()
            for event in events:  # the first of a burst at once; its repeats with the next sample, counted
                self.queues.offer(self.storm.add(event, now))
            out = self.queues.drain()
            if out:
                self.sink(self.node, out)

    def _poll_jobs(self) -> None:
        """The job sources' own loop: what they read (other users' files, a port anyone may listen on) can be
        slow or hostile, and must never hold the sampling thread."""
        while not self._stop.is_set():
            self.job_events()
            self._stop.wait(self.interval)

    def run(self, *, once: bool = False, max_samples: int | None = None) -> None:
        """Sample every ``interval`` seconds until :meth:`stop` (or once)."""
        if self.gpus.available and "Xid events" not in self.gpus.unsupported and not once:
            self._xid_thread = threading.Thread(target=self._watch_xids, name="stepwatch-agent-xid", daemon=True)
            self._xid_thread.start()
        if (self.inspector is not None or self.ras is not None) and not once and self._jobs_thread is None:
            self._jobs_thread = threading.Thread(target=self._poll_jobs, name="stepwatch-agent-jobs", daemon=True)
            self._jobs_thread.start()
        next_at = time.monotonic()
        while not self._stop.is_set():
            events = self.sample()
            if events:
                self.sink(self.node, events)
            if once:
                self.job_events(final=True)
            if once or (max_samples is not None and self.samples >= max_samples):
                break
            next_at += self.interval
            delay = next_at - time.monotonic()
            if delay < 0:  # fell behind (slow sysfs/NVML): skip, do not burst
                next_at = time.monotonic()
                delay = 0
            self._stop.wait(delay)

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        self.stop()
        self.gpus.close()
        if self.kmsg is not None:
            self.kmsg.close()
