"""``stepwatch simulate``: a simulated training job with injected faults, to Kafka or a JSON Lines file."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Iterator

import orjson

from stepwatch.commands.common import _add_kafka_args, _require_bootstrap, _settings


def _parse_straggler(text: str):
    from stepwatch.sim.simulator import StragglerFault

    parts = text.split(":")
    try:
        if not 2 <= len(parts) <= 4:
            raise ValueError
        rank, start = int(parts[0]), int(parts[1])
        factor = float(parts[2]) if len(parts) > 2 and parts[2] else 1.3
        end = int(parts[3]) if len(parts) > 3 and parts[3] else None
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected RANK:START_STEP[:FACTOR[:END_STEP]], got {text!r}") from None
    if factor <= 0:
        raise argparse.ArgumentTypeError("FACTOR must be positive")
    return StragglerFault(rank=rank, start_step=start, factor=factor, end_step=end)


def _parse_slowdown(text: str):
    from stepwatch.sim.simulator import JobSlowdown

    parts = text.split(":")
    try:
        if not 2 <= len(parts) <= 3:
            raise ValueError
        start, factor = int(parts[0]), float(parts[1])
        end = int(parts[2]) if len(parts) > 2 and parts[2] else None
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected START_STEP:FACTOR[:END_STEP], got {text!r}") from None
    return JobSlowdown(start_step=start, factor=factor, end_step=end)


def _hang_parser(kind: str):
    def parse(text: str):
        parts = text.split(":")
        try:
            if not 2 <= len(parts) <= 3:
                raise ValueError
            rank, step = int(parts[0]), int(parts[1])
            duration = float(parts[2]) if len(parts) > 2 and parts[2] else None
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected RANK:STEP[:DURATION], got {text!r}") from None
        if duration is not None and duration <= 0:
            raise argparse.ArgumentTypeError("DURATION must be positive")
        return kind, rank, step, duration

    return parse


#: Scenarios about hangs; they turn heartbeats on by default.
HANG_SCENARIOS = ("hang", "frozen", "dead", "slow-checkpoint")


def _hang_faults(args: argparse.Namespace) -> list:
    from stepwatch.sim.simulator import HangFault

    given = list(args.hang or []) + list(args.frozen or []) + list(args.dead or [])
    if args.scenario in ("hang", "frozen", "dead") and not any(kind == args.scenario for kind, *_ in given):
        # The scenario's default fault: rank 5 stops a third of the way in.
        given.append((args.scenario, min(5, args.ranks - 1), min(max(args.steps // 3, 10), max(args.steps - 1, 0)),
                      None))
    return [HangFault(kind=kind, rank=rank, step=step,
                      duration=duration if duration is not None else args.hang_duration,
                      recover=not args.no_recover) for kind, rank, step, duration in given]


def _telemetry_fault_parser(where: str):
    def parse(text: str):
        from stepwatch.sim.telemetry_sim import GPU_FAULTS, LINK_FAULTS, TelemetryFault

        kinds = GPU_FAULTS if where == "gpu" else LINK_FAULTS
        if where == "comm":
            kinds = LINK_FAULTS + ("nvlink_errors",)
        parts = text.split(":")
        try:
            if not 3 <= len(parts) <= 5 or parts[0] not in kinds:
                raise ValueError
            factor = float(parts[3]) if len(parts) > 3 and parts[3] else (1.5 if where == "comm" else 1.3)
            end = int(parts[4]) if len(parts) > 4 and parts[4] else None
            if where == "comm":  # every rank's collectives slow down, nobody computes slower
                return TelemetryFault(kind=parts[0], rank=int(parts[1]), start_step=int(parts[2]), factor=1.0,
                                      comm_factor=factor, end_step=end)
            return TelemetryFault(kind=parts[0], rank=int(parts[1]), start_step=int(parts[2]), factor=factor,
                                  end_step=end)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected KIND:RANK:START[:FACTOR[:END]] with KIND one of "
                                             f"{', '.join(kinds)}, got {text!r}") from None
    return parse


def _clock_skew(text: str) -> tuple[str, float]:
    node, _, seconds = text.rpartition(":")
    try:
        if not node:
            raise ValueError
        return node, float(seconds)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NODE:SECONDS, got {text!r}") from None


def _host_fault(text: str):
    from stepwatch.sim.host_sim import HOST_FAULT_KINDS, HostFault

    parts = text.split(":")
    try:
        if not 3 <= len(parts) <= 4 or parts[0] not in HOST_FAULT_KINDS:
            raise ValueError
        node: int | str = int(parts[1]) if parts[1].isdigit() else parts[1]
        if not node and node != 0:
            raise ValueError
        end = int(parts[3]) if len(parts) > 3 and parts[3] else None
        return HostFault(kind=parts[0], node=node, start_step=int(parts[2]), end_step=end)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected KIND:NODE:START[:END] with KIND one of "
                                         f"{', '.join(HOST_FAULT_KINDS)} "
                                         f"and NODE an index or a name (node-001), got {text!r}") from None


def _telemetry_simulator(spec, args: argparse.Namespace):
    comm = tuple(getattr(args, "comm_fault", None) or ())
    faults = tuple(getattr(args, "gpu_fault", None) or ()) + tuple(getattr(args, "link_fault", None) or ()) + comm
    if not faults and not getattr(args, "telemetry", False):
        return None
    from stepwatch.sim.telemetry_sim import TelemetrySimulator, TelemetrySpec

    if comm:
        spec = dataclasses.replace(spec, collective_events=True)

    return TelemetrySimulator(spec, TelemetrySpec(faults=faults, seed=spec.seed + 1))


def build_spec(args: argparse.Namespace):
    from stepwatch.sim.simulator import SimulationSpec, StragglerFault

    stragglers = list(args.straggler or [])
    if args.scenario == "straggler" and not stragglers:
        # The demo's problem: one rank 30% slower for 100 steps, then healthy again.
        start = min(60, max(args.steps // 4, 15))
        stragglers.append(StragglerFault(rank=min(17, args.ranks - 1), start_step=start, factor=1.3,
                                         end_step=start + max(args.steps // 3, 30)))
    hangs = _hang_faults(args)
    heartbeat_interval = args.heartbeat_interval
    if heartbeat_interval is None:
        heartbeat_interval = 5.0 if (args.scenario in HANG_SCENARIOS or hangs) else 0.0
    checkpoint_every, checkpoint_seconds = args.checkpoint_every, args.checkpoint_seconds
    if args.scenario == "slow-checkpoint":
        # One long but legitimate checkpoint half-way: past the hang timeout, within the checkpoint timeout.
        checkpoint_every = checkpoint_every or max(args.steps // 2, 1)
        checkpoint_seconds = checkpoint_seconds if checkpoint_seconds is not None else 900.0
    start_time = args.start_time if args.start_time is not None else (
        1_700_000_000.0 if args.out else time.time())
    return SimulationSpec(
        job=args.job, ranks=args.ranks, ranks_per_node=args.ranks_per_node, stages=args.stages,
        steps=args.steps, compute_time=args.compute_time, jitter=args.jitter,
        checkpoint_every=checkpoint_every, seed=args.seed, start_time=start_time,
        stragglers=tuple(stragglers), slowdowns=tuple(args.slowdown or []),
        checkpoint_seconds=checkpoint_seconds if checkpoint_seconds is not None else 20.0,
        heartbeat_interval=heartbeat_interval, collectives_per_step=args.collectives_per_step, hangs=tuple(hangs),
        node_prefix=_node_prefix(args), first_node=args.first_node,
    )


def _node_prefix(args: argparse.Namespace) -> str:
    """``--node-prefix``; ``job`` names the nodes after the job (``JOB-node-000``), so jobs never share nodes."""
    return f"{args.job}-node-" if args.node_prefix == "job" else args.node_prefix


#: --scenario names built from the flags here; any other name is one of ``stepwatch scenarios``.
FLAG_SCENARIOS = ("healthy", "straggler", *HANG_SCENARIOS)


def library_scenario(name: str):
    """The library's scenario ``name`` (stepwatch/sim/scenarios.py), or exit with the names there are."""
    from stepwatch.sim import scenarios

    try:
        return scenarios.get(name)
    except KeyError:
        raise SystemExit(f"stepwatch simulate: unknown scenario {name!r}: one of {', '.join(FLAG_SCENARIOS)} "
                         "or a name 'stepwatch scenarios' lists") from None


def run_library(args: argparse.Namespace) -> int:
    """``--scenario NAME`` of the labelled library (stepwatch/sim/scenarios.py): its own jobs, ranks and faults."""
    from stepwatch.sim import scenarios

    scenario = library_scenario(args.scenario)
    start = args.start_time if args.start_time is not None else (None if args.out else time.time())
    if start is not None:  # to Kafka: the scenario happens now (its recording starts at a fixed time)
        shift = start - min(s.start_time for s in scenario.specs)
        scenario = dataclasses.replace(scenario, specs=tuple(
            dataclasses.replace(s, start_time=s.start_time + shift) for s in scenario.specs))
    stream = scenarios.batches(scenario)
    speed = args.speed if args.speed is not None else (0.0 if args.out else 1.0)
    if args.out:
        n = _write_events(stream, speed, args.out)
        print(f"stepwatch simulate: wrote {n} events of scenario {scenario.name}"
              + ("" if args.out == "-" else f" to {args.out}"), file=sys.stderr)
        return 0
    from stepwatch.recording import publish

    settings = _settings(args)
    _require_bootstrap(settings)
    # Job events keyed by job and telemetry by node, as 'stepwatch publish' sends a recording.
    lines = (orjson.dumps({"v": 1, "kind": "batch", "events": batch}) for _, batch in stream)
    stats = publish(lines, settings, speed=speed)
    print(f"stepwatch simulate: scenario {scenario.name}: sent {stats['events_sent']} events in "
          f"{stats['messages_sent']} messages, dropped {stats['events_dropped']}", file=sys.stderr)
    return 1 if stats["events_dropped"] else 0


def run(args: argparse.Namespace) -> int:
    from stepwatch.sim.simulator import ClusterSimulator

    if args.scenario not in FLAG_SCENARIOS:
        return run_library(args)

    try:
        spec = build_spec(args)
    except ValueError as exc:
        raise SystemExit(f"stepwatch simulate: {exc}") from None
    sim = _telemetry_simulator(spec, args) or ClusterSimulator(spec)
    if getattr(args, "host_fault", None) or (getattr(args, "telemetry", False) and sim is not None):
        from stepwatch.sim.host_sim import HostSimulator

        try:
            sim = HostSimulator(spec, tuple(args.host_fault or ()), seed=spec.seed + 2,
                                inner=lambda s: _telemetry_simulator(s, args) or ClusterSimulator(s))
        except ValueError as exc:
            raise SystemExit(f"stepwatch simulate: {exc}") from None
    speed = args.speed if args.speed is not None else (0.0 if args.out else 1.0)
    stream = sim.steps()
    skew = dict(getattr(args, "clock_skew", None) or ())
    if skew:  # the hosts' clocks are off, the order events arrive in is not
        from stepwatch.sim.simulator import apply_clock_skew

        stream = ((t, apply_clock_skew(batch, skew)) for t, batch in stream)
    if args.out:
        n = _write_events(stream, speed, args.out)
        print(f"stepwatch simulate: wrote {n} events of {spec.ranks} ranks x {spec.steps} steps"
              + ("" if args.out == "-" else f" to {args.out}"), file=sys.stderr)
        return 0

    from stepwatch.producers.publisher import EventPublisher
    from stepwatch.topics import ensure_topics

    settings = _settings(args)
    _require_bootstrap(settings)
    from stepwatch.security import client_config

    ensure_topics(settings.kafka, client_config=client_config(settings))
    topic = settings.kafka.topic(settings.kafka.events_topic)
    with EventPublisher(bootstrap=settings.kafka.bootstrap, topic=topic, shard_ranks=args.shard_ranks or 0,
                        **client_config(settings)) as publisher:
        last_report = time.monotonic()
        step = 0
        for _, batch in _paced(stream, speed):
            publisher.send_job(spec.job, batch)
            # A batch is one instant (steps, heartbeats, collectives), not one step: count the steps themselves.
            step = max([step, *(e["step"] + 1 for e in batch if e.get("kind") == "step" and "step" in e)])
            if time.monotonic() - last_report > 5:
                print(f"stepwatch simulate: step {min(step, spec.steps)}/{spec.steps}, {publisher.events_sent} "
                      "events sent",
                      file=sys.stderr)
                last_report = time.monotonic()
    print(f"stepwatch simulate: sent {publisher.events_sent} events in {publisher.messages_sent} messages "
          f"to {topic}; delivered {publisher.events_delivered}, dropped {publisher.events_dropped}", file=sys.stderr)
    return 0


def _write_events(stream: Iterator[tuple[float, list[dict]]], speed: float, path: str) -> int:
    """Every event of ``stream`` as a JSON line to ``path`` ('-': stdout), paced by ``speed``; how many."""
    out = sys.stdout if path == "-" else open(path, "w", encoding="utf-8")
    n = 0
    try:
        for _, batch in _paced(stream, speed):
            for event in batch:
                out.write(orjson.dumps(event).decode())
                out.write("\n")
                n += 1
    finally:
        if out is not sys.stdout:
            out.close()
    return n


def _paced(steps: Iterator[tuple[float, list[dict]]], speed: float) -> Iterator[tuple[float, list[dict]]]:
    """Release each step when its simulated time has come (``speed`` x real time; 0 = no wait)."""
    origin_wall = time.monotonic()
    origin_sim = None
    for sim_time, batch in steps:
        if speed > 0:
            origin_sim = sim_time if origin_sim is None else origin_sim
            due = origin_wall + (sim_time - origin_sim) / speed
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        yield sim_time, batch


def add_parser(sub) -> None:
    p = sub.add_parser("simulate", help="simulate a synchronous training job (to Kafka or a JSON Lines file)",
                       description="Generate the events of a simulated training job with realistic noise and "
                                   "injected faults. Deterministic for a given --seed.")
    _add_kafka_args(p)
    p.add_argument("--scenario", default="healthy", metavar="NAME",
                   help="healthy (default), straggler, hang, frozen, dead, slow-checkpoint, or any name "
                        "'stepwatch scenarios' lists (that scenario's own jobs and faults; the job and fault "
                        "flags do not apply). 'straggler' adds one rank 30%% slower for a third of the run unless --straggler is given; "
                        "'hang' (a rank stops before a collective, its heartbeats go on), 'frozen' (a rank stops "
                        "sending anything, like SIGSTOP) and 'dead' (a rank's process exits) stop rank 5 a third "
                        "of the way in unless --hang/--frozen/--dead is given; 'slow-checkpoint' adds one long but "
                        "legitimate checkpoint pause half-way (about 1.2 x --checkpoint-seconds, default 900); "
                        "faults given by flags are injected whatever the scenario")
    p.add_argument("--job", default="sim-job", help="job id (default: sim-job)")
    p.add_argument("--ranks", type=int, default=64, help="number of ranks (default 64)")
    p.add_argument("--ranks-per-node", type=int, default=8, help="GPUs per node (default 8)")
    p.add_argument("--node-prefix", default="node-", metavar="PREFIX",
                   help="node names are PREFIX000, PREFIX001, ... (default 'node-'); 'job' names them after the "
                        "job (JOB-node-000), so two simulated jobs never share a node")
    p.add_argument("--first-node", type=int, default=0, metavar="N",
                   help="number the job's nodes from N (default 0): another way to keep two jobs' nodes apart")
    p.add_argument("--stages", type=int, default=1, help="pipeline stages, i.e. peer groups (default 1)")
    p.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    p.add_argument("--compute-time", type=float, default=0.8, help="per-step compute seconds (default 0.8)")
    p.add_argument("--jitter", type=float, default=0.01, help="per-rank compute noise, CoV (default 0.01)")
    p.add_argument("--checkpoint-every", type=int, default=0, metavar="N", help="checkpoint pause every N steps")
    p.add_argument("--straggler", type=_parse_straggler, action="append", metavar="RANK:START[:FACTOR[:END]]",
                   help="make RANK compute FACTOR (default 1.3) times slower from step START until END; repeatable")
    p.add_argument("--slowdown", type=_parse_slowdown, action="append", metavar="START:FACTOR[:END]",
                   help="slow every rank down together (not a straggler); repeatable")
    p.add_argument("--checkpoint-seconds", type=float, metavar="S",
                   help="length of a checkpoint pause (default 20; 900 with --scenario slow-checkpoint)")
    p.add_argument("--hang", type=_hang_parser("hang"), action="append", metavar="RANK:STEP[:DURATION]",
                   help="RANK stops before the first collective of STEP for DURATION simulated seconds while its "
                        "heartbeats go on; repeatable")
    p.add_argument("--frozen", type=_hang_parser("frozen"), action="append", metavar="RANK:STEP[:DURATION]",
                   help="RANK's process is frozen (SIGSTOP) at STEP for DURATION: it sends nothing; repeatable")
    p.add_argument("--dead", type=_hang_parser("dead"), action="append", metavar="RANK:STEP[:DURATION]",
                   help="RANK's process exits at STEP; the others wait DURATION, then the run stops; repeatable")
    p.add_argument("--hang-duration", type=float, default=660.0, metavar="S",
                   help="default DURATION of --hang/--frozen/--dead (default 660, past the 600 s hang timeout)")
    p.add_argument("--no-recover", action="store_true",
                   help="a hung or frozen rank does not resume after DURATION: the run stops there (job killed)")
    p.add_argument("--heartbeat-interval", type=float, metavar="S",
                   help="simulated seconds between heartbeats of each rank, 0 for none "
                        "(default 5 with a hang scenario or fault, else 0)")
    p.add_argument("--collectives-per-step", type=int, default=2, metavar="N",
                   help="collectives (all-reduce buckets) per step, for the heartbeats' sequence numbers (default 2)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--start-time", type=float, help="Unix time of the first step (default: now, or a fixed "
                                                    "time with --out so that files are reproducible)")
    p.add_argument("--speed", type=float, help="simulated seconds per wall second; 0 = as fast as possible "
                                               "(default: 1 to Kafka, 0 with --out)")
    p.add_argument("--out", metavar="FILE", help="write JSON Lines to FILE ('-' for stdout) instead of Kafka")
    p.add_argument("--telemetry", action="store_true",
                   help="also emit node telemetry (gpu, link, topology and host events per node per second); implied by "
                        "--gpu-fault/--link-fault (--host-fault: host events only). It goes with the job's events (keyed by job)")
    p.add_argument("--gpu-fault", type=_telemetry_fault_parser("gpu"), action="append",
                   metavar="KIND:RANK:START[:FACTOR[:END]]",
                   help="GPU fault on RANK's GPU from step START: thermal, power, ecc, xid, nvlink; the rank computes "
                        "FACTOR (default 1.3) times slower; repeatable")
    p.add_argument("--link-fault", type=_telemetry_fault_parser("link"), action="append",
                   metavar="KIND:RANK:START[:FACTOR[:END]]",
                   help="fault on the IB port nearest to RANK's GPU from step START: ib_errors, congestion, "
                        "link_down; the rank computes FACTOR (default 1.3) times slower; repeatable")
    p.add_argument("--comm-fault", type=_telemetry_fault_parser("comm"), action="append",
                   metavar="KIND:RANK:START[:FACTOR[:END]]",
                   help="network fault behind RANK's node that slows EVERY rank's collectives FACTOR (default 1.5) "
                        "times (a ring runs at its slowest link); KIND: ib_errors (symbol errors + transmit wait on "
                        "the NIC nearest RANK's GPU), rate_down (that port at 200 of 400 Gb/s, no errors), "
                        "nvlink_errors (CRC/replay errors on RANK's GPU's NVLink 0), congestion, link_down; turns "
                        "on collective events; repeatable")
    p.add_argument("--clock-skew", type=_clock_skew, action="append", metavar="NODE:SECONDS",
                   help="every timestamp written on NODE is SECONDS off (broken NTP; negative: behind); repeatable")
    p.add_argument("--host-fault", type=_host_fault, action="append", metavar="KIND:NODE:START[:END]",
                   help="host fault on NODE (index or name) from step START to END: io (IO pressure, slow disk), "
                        "cpu (CPUs saturated), memory (memory pressure) starve the node's data loaders; oom (the "
                        "OOM killer ends the node's first rank); adds host events of every node; repeatable")
    p.add_argument("--shard-ranks", type=int, default=0, metavar="N",
                   help="key each rank's events by rank shard 'JOB/<rank // N>' instead of by job, for the shard "
                        "stage ('stepwatch shard'); events without a rank keep the job id (default 0: by job)")
    p.set_defaults(func=run)
