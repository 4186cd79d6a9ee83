"""``stepwatch agent``: the node agent, GPU, InfiniBand and host telemetry to Kafka."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys

import orjson

from stepwatch.commands.common import _add_kafka_args, _require_bootstrap, _settings


def _inspector_window(value: str) -> str:
    from stepwatch.producers.nccl_inspector import window_bounds

    try:
        window_bounds(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def run(args: argparse.Namespace) -> int:
    """The node agent: GPU (NVML) and InfiniBand (sysfs) telemetry to Kafka, keyed by node."""
    from stepwatch.producers.agent import KafkaSender, NodeAgent

    settings = _settings(args)
    t = settings.telemetry
    # Each option given overrides its STEPWATCH_TELEMETRY_* setting (the option's name but ``interval``).
    fields = {"interval": "agent_interval", "sysfs_root": "sysfs_root", "proc_root": "proc_root",
              "nccl_inspector_dir": "nccl_inspector_dir", "nccl_inspector_window": "nccl_inspector_window",
              "nccl_ras": "nccl_ras", "nccl_ras_interval": "nccl_ras_interval", "topology": "topology_file", "kmsg": "kmsg_path"}
    overrides = {field: getattr(args, option) for option, field in fields.items()
                 if getattr(args, option) is not None}
    if overrides:
        settings = dataclasses.replace(settings, telemetry=dataclasses.replace(t, **overrides))
    to_stdout = args.stdout or (args.once and not settings.kafka.bootstrap)
    sender = job_sender = None
    job_sink = None
    if not args.verbose:  # the transport says in one line what is wrong with Kafka; kafka-python's retries are noise
        for handler in logging.getLogger().handlers:
            handler.addFilter(lambda record: not record.name.startswith("kafka."))
    if to_stdout:
        def sink(key: str, events: list[dict]) -> None:
            for event in events:
                sys.stdout.write(orjson.dumps(event).decode() + "\n")
            sys.stdout.flush()
    else:
        _require_bootstrap(settings)
        sender = KafkaSender(bootstrap=settings.kafka.bootstrap, topic=settings.kafka.topic(settings.telemetry.topic),
                             queue_size=settings.telemetry.agent_queue_size,
                             max_block_ms=settings.telemetry.agent_max_block_ms,
                             partitions=settings.kafka.partitions,
                             replication_factor=settings.kafka.replication_factor, settings=settings).start()
        sink = sender.offer
        t = settings.telemetry
        if t.nccl_inspector_dir or t.nccl_ras:  # job events: keyed by job, to the events topic
            job_sender = KafkaSender(bootstrap=settings.kafka.bootstrap,
                                     topic=settings.kafka.topic(settings.kafka.events_topic),
                                     queue_size=settings.telemetry.agent_queue_size,
                                     max_block_ms=settings.telemetry.agent_max_block_ms,
                                     partitions=settings.kafka.partitions,
                                     replication_factor=settings.kafka.replication_factor, settings=settings).start()
            job_sink = job_sender.offer
    agent = NodeAgent(node=args.node, settings=settings, sink=sink, job_sink=job_sink)
    watcher = None
    if job_sender is not None and not args.once:  # Flight Recorder dumps for hang alerts' stack requests
        from stepwatch.producers.flight_recorder_fifo import ControlWatcher, FlightRecorderFifo
        from stepwatch.security import kafka_python_config

        watcher = ControlWatcher(FlightRecorderFifo(agent.procs, node=agent.node), bootstrap=settings.kafka.bootstrap,
                                 topic=settings.kafka.topic(settings.kafka.control_topic), sink=job_sink,
                                 client_config=kafka_python_config(settings.security)).start()
    try:
        agent.discover()
        agent.run(once=args.once, max_samples=args.samples)
    except KeyboardInterrupt:
        pass
    finally:
        agent.close()
        for name, source in (("NCCL Inspector", agent.inspector), ("NCCL RAS", agent.ras),
                             ("Flight Recorder", watcher.fifo if watcher is not None else None)):
            if source is not None and source.counts:  # what was read, skipped and why (nothing is dropped silently)
                print(f"stepwatch agent: {name}: " + ", ".join(f"{k} {v}" for k, v in sorted(source.counts.items())),
                      file=sys.stderr)
        if agent.kmsg is not None and agent.kmsg.counts:
            print("stepwatch agent: kernel log: " + ", ".join(f"{k} {v}" for k, v in sorted(agent.kmsg.counts.items())),
                  file=sys.stderr)
        if agent.queues.dropped:  # stepwatch_agent_events_dropped_total{kind}
            print("stepwatch agent: events dropped (queue full, oldest first): "
                  + ", ".join(f"{k} {v}" for k, v in sorted(agent.queues.dropped.items())), file=sys.stderr)
        if agent.refusals.counts:  # what no launcher vouched for, or no check let through (docs/security.md)
            refused = sorted(agent.refusals.counts.items())
            print("stepwatch agent: refused: " + ", ".join(f"{k} {v}" for k, v in refused), file=sys.stderr)
        if watcher is not None:
            watcher.stop()
        if job_sender is not None:
            job_sender.close()
        if sender is not None:
            sender.close()
            print(f"stepwatch agent: {agent.samples} samples, {sender.sent} batches sent, {sender.dropped} dropped "
                  f"(queue full), {sender.failed} not sent (Kafka unavailable)", file=sys.stderr)
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("agent", help="run the node agent: GPU, InfiniBand and host telemetry to Kafka",
                       description="Sample every GPU (NVML, pip install 'stepwatch[agent]'), InfiniBand/RoCE port "
                                   "(sysfs) and the host's CPU, memory, OOM and disk counters (procfs) of this node "
                                   "every --interval seconds and publish gpu, xid, link, topology and host events "
                                   "keyed by node to the telemetry topic. What the node lacks is reported once and "
                                   "skipped.")
    _add_kafka_args(p)
    p.add_argument("--node", help="node name (default: the host name)")
    p.add_argument("--interval", type=float, metavar="S", help="seconds between samples (default 1)")
    p.add_argument("--sysfs-root", metavar="DIR", help="root of sysfs (default /sys)")
    p.add_argument("--proc-root", metavar="DIR", help="root of procfs for host signals (default /proc)")
    p.add_argument("--topology", metavar="FILE",
                   help="name the switch at the other end of each port's cable in the topology events, from FILE: "
                        "the output of ibnetdiscover (InfiniBand), of lldpctl -f json (RoCE) or a JSON/YAML map "
                        "{\"nodes\": {NODE: {DEVICE[/PORT]: SWITCH}}}; re-read when it changes (docs/network.md). "
                        "Nodes erring together under one switch are then one fabric incident naming it")
    p.add_argument("--kmsg", metavar="FILE",
                   help="read the NVIDIA driver's Xid lines from this kernel log (/dev/kmsg, or a file written the "
                        "same way: for nodes where NVML cannot report Xid events); repeats are coalesced into one "
                        "event a second with a count")
    p.add_argument("--nccl-inspector-dir", metavar="DIR",
                   help="tail the NCCL Inspector logs (NCCL_INSPECTOR_DUMP_DIR) of every job on the node and publish "
                        "nccl_window events keyed by job to the events topic (docs/zero-code.md)")
    p.add_argument("--nccl-inspector-window", type=_inspector_window, metavar="auto|auto:CAP|N",
                   help="coll_sn per window: one event per rank, communicator, collective type and window; auto "
                        "(default): powers of two up to 64 (or CAP) fitting ~1 s of each communicator's collectives; "
                        "N: always N")
    p.add_argument("--nccl-ras", metavar="HOST:PORT",
                   help="query NCCL RAS (NCCL's is localhost:28028) for per-rank collective counts: heartbeats for "
                        "the hang rule (default off)")
    p.add_argument("--nccl-ras-interval", type=float, metavar="S",
                   help="seconds between two RAS queries (default 10, at least 5)")
    p.add_argument("--once", action="store_true",
                   help="take one sample and exit (printed as JSON Lines unless Kafka is configured)")
    p.add_argument("--samples", type=int, metavar="N", help="stop after N samples")
    p.add_argument("--stdout", action="store_true", help="print the events as JSON Lines instead of publishing")
    p.set_defaults(func=run)
