"""The node agent: samples GPUs (NVML), InfiniBand/RoCE ports (sysfs) and host signals (procfs); publishes them.

Runs on every node (``stepwatch agent``). Every ``interval`` seconds it sends one batch
keyed by the node name to the telemetry topic: a ``gpu`` event per GPU, a ``link``
event per port and one ``host`` event (producers/procfs_host.py), with raw cumulative counters; ``xid`` events go out as soon as NVML
reports them; a ``topology`` event (GPU -> nearest NICs) at the start and every
``topology_interval`` seconds. What the node lacks (no GPU, no NVML, no InfiniBand) is
reported once and skipped.

It must never take the node down: the sampler never blocks on Kafka. Batches go through a
bounded queue to a daemon sender thread; when the queue is full new batches are dropped
and counted; the producer's own buffer is bounded and a send blocks at most
``max_block_ms``; while Kafka is away the sender keeps retrying to connect with a backoff.
"""

from __future__ import annotations

import logging
import queue
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

from stepwatch.config import Settings

from .nvml_sampler import NvmlSampler
from .procfs_host import HostReader
from .sysfs_ib import IbReader, normalize_bus_id

log = logging.getLogger("stepwatch.agent")


class KafkaSender:
    """Bounded queue + daemon thread in front of a kafka-python producer; never blocks the caller."""

    def __init__(self, *, bootstrap: str, topic: str, queue_size: int = 600, max_block_ms: int = 1000,
                 partitions: int = 4, replication_factor: int = 1) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.max_block_ms = max_block_ms
        self.partitions = partitions
        self.replication_factor = replication_factor
        self._queue: queue.Queue = queue.Queue(maxsize=max(queue_size, 1))
        self._producer = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stepwatch-agent-sender", daemon=True)
        self.sent = 0
        self.dropped = 0  # batches dropped because the queue was full
        self.failed = 0  # batches the producer could not take (Kafka away too long)
        self.connect_failures = 0

    def start(self) -> "KafkaSender":
        self._thread.start()
        return self

    def offer(self, key: str, events: list[dict]) -> bool:
        """Queue one batch; False (dropped and counted) when the queue is full."""
        try:
            self._queue.put_nowait((key, events))
            return True
        except queue.Full:
            self.dropped += 1
            if self.dropped in (1, 10, 100) or self.dropped % 1000 == 0:
                log.warning("telemetry queue full (Kafka slow or away): %d batches dropped so far", self.dropped)
            return False

    def _connect(self) -> bool:
        from kafka import KafkaProducer

        try:
            self._producer = KafkaProducer(
                bootstrap_servers=self.bootstrap, max_block_ms=self.max_block_ms, linger_ms=50,
                compression_type="gzip", acks=1, retries=3,  # kafka-python 3 has no buffer_memory setting
                request_timeout_ms=10_000)
        except Exception as exc:  # NoBrokersAvailable, DNS, ...: try again later
            self.connect_failures += 1
            if self.connect_failures in (1, 10) or self.connect_failures % 100 == 0:
                log.warning("cannot reach Kafka at %s (%s); retrying", self.bootstrap, exc)
            return False
        try:
            from stepwatch.topics import create_topics

            create_topics(self.bootstrap, [self.topic], self.partitions, replication_factor=self.replication_factor,
                          timeout=10)
        except Exception as exc:  # the topic may exist, or be created by the operator
            log.info("could not create %s: %s", self.topic, exc)
        return True

    def _run(self) -> None:
        from stepwatch.models.events import encode_events

        backoff = 0.5
        while not self._stop.is_set() or not self._queue.empty():
            try:
                key, events = self._queue.get(timeout=0.2)
            except queue.Empty:
                continue
            while self._producer is None and not self._stop.is_set():
                if self._connect():
                    backoff = 0.5
                    break
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)
            if self._producer is None:
                self.failed += 1
                continue
            try:
                self._producer.send(self.topic, key=key.encode(), value=encode_events(events))
                self.sent += 1
            except Exception as exc:  # KafkaTimeoutError: buffer full or no metadata within max_block_ms
                self.failed += 1
                if self.failed in (1, 10, 100) or self.failed % 1000 == 0:
                    log.warning("telemetry batch not sent (%s): %d failed so far", exc, self.failed)

    def close(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        if self._producer is not None:
            try:
                self._producer.flush(timeout=timeout)
                self._producer.close(timeout=timeout)
            except Exception:
                pass


class NodeAgent:
    """Discovers what the node has, samples it, and hands batches to ``sink(key, events)``."""

    def __init__(self, *, node: str | None = None, settings: Settings | None = None, sysfs_root: str | None = None,
                 proc_root: str | None = None, nvml: Any = None, sink: Callable[[str, list[dict]], Any], report: TextIO | None = None,
                 clock: Callable[[], float] = time.time) -> None:
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
        self._stop = threading.Event()
        self.samples = 0

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
        if not (self.gpus.available and devices):
            self.skipped.append("topology (needs both GPUs and RDMA devices)")
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
        if now >= self._next_topology and self.gpus.available and self.ib.devices():
            bus = {i: normalize_bus_id(b) for i, b in enumerate(self.gpus.bus_ids) if b}
            gpus, nics = self.ib.topology(bus)
            events.append({"v": 1, "kind": "topology", "node": self.node, "ts": round(now, 6), "gpus": gpus,
                           "nics": nics})
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
        self.samples += 1
        return events

    def _watch_xids(self) -> None:
        while not self._stop.is_set():
            try:
                events = self.gpus.wait_xid(1000, self.clock)
            except Exception:
                log.exception("waiting for Xid events failed")
                self._stop.wait(5)
                continue
            if events:
                self.sink(self.node, events)

    def run(self, *, once: bool = False, max_samples: int | None = None) -> None:
        """Sample every ``interval`` seconds until :meth:`stop` (or once)."""
        if self.gpus.available and "Xid events" not in self.gpus.unsupported and not once:
            self._xid_thread = threading.Thread(target=self._watch_xids, name="stepwatch-agent-xid", daemon=True)
            self._xid_thread.start()
        next_at = time.monotonic()
        while not self._stop.is_set():
            events = self.sample()
            if events:
                self.sink(self.node, events)
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
