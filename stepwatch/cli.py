"""The ``stepwatch`` command line: worker, simulate, replay, alerts, demo, broker."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import time
from collections.abc import Iterator
from typing import TextIO

import orjson

from stepwatch import __version__
from stepwatch.config import Settings


def _settings(args: argparse.Namespace) -> Settings:
    settings = Settings.from_env()
    kafka = settings.kafka
    overrides = {}
    if getattr(args, "bootstrap", None):
        overrides["bootstrap"] = args.bootstrap
    if getattr(args, "topic_prefix", None) is not None:
        overrides["topic_prefix"] = args.topic_prefix
    if overrides:
        settings = dataclasses.replace(settings, kafka=dataclasses.replace(kafka, **overrides))
    return settings


def _require_bootstrap(settings: Settings) -> None:
    if not settings.kafka.bootstrap:
        raise SystemExit("stepwatch: no Kafka configured: pass --bootstrap HOST:PORT or set KAFKA_BOOTSTRAP "
                         "(`stepwatch broker` starts a local one)")


def _add_kafka_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap", metavar="HOST:PORT[,...]",
                   help="Kafka bootstrap servers (default: $KAFKA_BOOTSTRAP)")
    p.add_argument("--topic-prefix", metavar="PREFIX",
                   help="prefix of the events/alerts/deadletter topics (default: $STEPWATCH_KAFKA_TOPIC_PREFIX "
                        "or 'stepwatch.')")


# -- worker ---------------------------------------------------------------------------------


def cmd_worker(args: argparse.Namespace) -> int:
    from stepwatch.streams.app import run_worker

    settings = _settings(args)
    _require_bootstrap(settings)
    overrides = {}
    if args.web_port is not None:
        overrides["web_port"] = args.web_port
    if overrides:
        settings = dataclasses.replace(settings, worker=dataclasses.replace(settings.worker, **overrides))
    run_worker(settings, loglevel=args.loglevel)
    return 0


# -- simulate -------------------------------------------------------------------------------


def _parse_straggler(text: str):
    from stepwatch.producers.simulator import StragglerFault

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
    from stepwatch.producers.simulator import JobSlowdown

    parts = text.split(":")
    try:
        if not 2 <= len(parts) <= 3:
            raise ValueError
        start, factor = int(parts[0]), float(parts[1])
        end = int(parts[2]) if len(parts) > 2 and parts[2] else None
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected START_STEP:FACTOR[:END_STEP], got {text!r}") from None
    return JobSlowdown(start_step=start, factor=factor, end_step=end)


def build_spec(args: argparse.Namespace):
    from stepwatch.producers.simulator import SimulationSpec, StragglerFault

    stragglers = list(args.straggler or [])
    if args.scenario == "straggler" and not stragglers:
        # The demo's problem: one rank 30% slower for 100 steps, then healthy again.
        start = min(60, max(args.steps // 4, 15))
        stragglers.append(StragglerFault(rank=min(17, args.ranks - 1), start_step=start, factor=1.3,
                                         end_step=start + max(args.steps // 3, 30)))
    start_time = args.start_time if args.start_time is not None else (
        1_700_000_000.0 if args.out else time.time())
    return SimulationSpec(
        job=args.job, ranks=args.ranks, ranks_per_node=args.ranks_per_node, stages=args.stages,
        steps=args.steps, compute_time=args.compute_time, jitter=args.jitter,
        checkpoint_every=args.checkpoint_every, seed=args.seed, start_time=start_time,
        stragglers=tuple(stragglers), slowdowns=tuple(args.slowdown or []),
    )


def cmd_simulate(args: argparse.Namespace) -> int:
    from stepwatch.producers.simulator import ClusterSimulator

    try:
        spec = build_spec(args)
    except ValueError as exc:
        raise SystemExit(f"stepwatch simulate: {exc}") from None
    sim = ClusterSimulator(spec)
    speed = args.speed if args.speed is not None else (0.0 if args.out else 1.0)
    if args.out:
        out = sys.stdout if args.out == "-" else open(args.out, "w", encoding="utf-8")
        n = 0
        try:
            for _, batch in _paced(sim.steps(), speed):
                for event in batch:
                    out.write(orjson.dumps(event).decode())
                    out.write("\n")
                    n += 1
        finally:
            if out is not sys.stdout:
                out.close()
        print(f"stepwatch simulate: wrote {n} events of {spec.ranks} ranks x {spec.steps} steps"
              + ("" if args.out == "-" else f" to {args.out}"), file=sys.stderr)
        return 0

    from stepwatch.producers.publisher import EventPublisher
    from stepwatch.topics import ensure_topics

    settings = _settings(args)
    _require_bootstrap(settings)
    ensure_topics(settings.kafka)
    topic = settings.kafka.topic(settings.kafka.events_topic)
    with EventPublisher(bootstrap=settings.kafka.bootstrap, topic=topic) as publisher:
        last_report = time.monotonic()
        for i, (_, batch) in enumerate(_paced(sim.steps(), speed)):
            publisher.send(spec.job, batch)
            if time.monotonic() - last_report > 5:
                print(f"stepwatch simulate: step {i}/{spec.steps}, {publisher.events_sent} events sent",
                      file=sys.stderr)
                last_report = time.monotonic()
    print(f"stepwatch simulate: sent {publisher.events_sent} events in {publisher.messages_sent} messages "
          f"to {topic}", file=sys.stderr)
    return 0


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


# -- replay ---------------------------------------------------------------------------------


def _read_events(paths: list[str], stats: dict) -> Iterator:
    from stepwatch.models.events import decode_message

    for path in paths:
        stream: TextIO = sys.stdin if path == "-" else open(path, encoding="utf-8")
        try:
            for lineno, line in enumerate(stream, 1):
                if not line.strip():
                    continue
                events, rejected = decode_message(line.encode())
                for bad in rejected:
                    stats["rejected"] += 1
                    if stats["rejected"] <= 10:
                        print(f"stepwatch replay: {path}:{lineno}: skipped: {bad.reason}", file=sys.stderr)
                stats["events"] += len(events)
                yield from events
        finally:
            if stream is not sys.stdin:
                stream.close()


def cmd_replay(args: argparse.Namespace) -> int:
    from stepwatch.models.engine import replay

    settings = Settings.from_env()
    stats = {"events": 0, "rejected": 0, "alerts": 0}
    started = time.monotonic()
    try:
        for alert in replay(_read_events(args.files, stats), settings=settings):
            stats["alerts"] += 1
            sys.stdout.write(orjson.dumps(alert.to_dict()).decode() + "\n")
    except FileNotFoundError as exc:
        raise SystemExit(f"stepwatch replay: {exc.filename}: no such file") from None
    sys.stdout.flush()
    print(f"stepwatch replay: {stats['events']} events, {stats['rejected']} rejected, {stats['alerts']} alerts "
          f"in {time.monotonic() - started:.2f} s", file=sys.stderr)
    return 0


# -- alerts ---------------------------------------------------------------------------------


def follow_alerts(settings: Settings, *, from_beginning: bool, timeout: float | None) -> Iterator[dict]:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        settings.kafka.topic(settings.kafka.alerts_topic),
        bootstrap_servers=settings.kafka.bootstrap,
        auto_offset_reset="earliest" if from_beginning else "latest",
        enable_auto_commit=False,
        group_id=None,
        consumer_timeout_ms=int(timeout * 1000) if timeout else float("inf"),
    )
    try:
        for record in consumer:
            try:
                yield orjson.loads(record.value)
            except orjson.JSONDecodeError:
                print(f"stepwatch alerts: skipped a message that is not JSON at offset {record.offset}",
                      file=sys.stderr)
    finally:
        consumer.close()


def cmd_alerts(args: argparse.Namespace) -> int:
    from stepwatch.models.alerts import format_alert

    settings = _settings(args)
    _require_bootstrap(settings)
    try:
        for alert in follow_alerts(settings, from_beginning=args.from_beginning, timeout=args.timeout):
            print(orjson.dumps(alert).decode() if args.json else format_alert(alert), flush=True)
    except KeyboardInterrupt:
        pass
    return 0


# -- demo and broker --------------------------------------------------------------------------


def cmd_demo(args: argparse.Namespace) -> int:
    from stepwatch.demo import run_demo

    return run_demo(_settings(args), ranks=args.ranks, steps=args.steps, speed=args.speed, timeout=args.timeout)


def cmd_broker(args: argparse.Namespace) -> int:
    from stepwatch.localkafka import run_foreground

    run_foreground(port=args.port)
    return 0


# -- parser ---------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stepwatch",
        description="Real-time straggler and hang detection for GPU training jobs, on Kafka.",
        epilog="Settings come from STEPWATCH_* environment variables (see README). "
               "Run 'stepwatch COMMAND --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"stepwatch {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug detail to stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("worker", help="run the detection worker (Faust) until interrupted",
                       description="Consume the events topic, detect stragglers and hangs, publish alerts.")
    _add_kafka_args(p)
    p.add_argument("--web-port", type=int, help="port of the worker's web server, 0 to disable (default 6066)")
    p.add_argument("--loglevel", default="info", choices=["debug", "info", "warning", "error"])
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("simulate", help="simulate a synchronous training job (to Kafka or a JSON Lines file)",
                       description="Generate the events of a simulated training job with realistic noise and "
                                   "injected faults. Deterministic for a given --seed.")
    _add_kafka_args(p)
    p.add_argument("--scenario", choices=["healthy", "straggler"], default="healthy",
                   help="'straggler' adds one rank 30%% slower for a third of the run unless --straggler is given; "
                        "faults given by flags are injected whatever the scenario")
    p.add_argument("--job", default="sim-job", help="job id (default: sim-job)")
    p.add_argument("--ranks", type=int, default=64, help="number of ranks (default 64)")
    p.add_argument("--ranks-per-node", type=int, default=8, help="GPUs per node (default 8)")
    p.add_argument("--stages", type=int, default=1, help="pipeline stages, i.e. peer groups (default 1)")
    p.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    p.add_argument("--compute-time", type=float, default=0.8, help="per-step compute seconds (default 0.8)")
    p.add_argument("--jitter", type=float, default=0.01, help="per-rank compute noise, CoV (default 0.01)")
    p.add_argument("--checkpoint-every", type=int, default=0, metavar="N", help="checkpoint pause every N steps")
    p.add_argument("--straggler", type=_parse_straggler, action="append", metavar="RANK:START[:FACTOR[:END]]",
                   help="make RANK compute FACTOR (default 1.3) times slower from step START until END; repeatable")
    p.add_argument("--slowdown", type=_parse_slowdown, action="append", metavar="START:FACTOR[:END]",
                   help="slow every rank down together (not a straggler); repeatable")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--start-time", type=float, help="Unix time of the first step (default: now, or a fixed "
                                                    "time with --out so that files are reproducible)")
    p.add_argument("--speed", type=float, help="simulated seconds per wall second; 0 = as fast as possible "
                                               "(default: 1 to Kafka, 0 with --out)")
    p.add_argument("--out", metavar="FILE", help="write JSON Lines to FILE ('-' for stdout) instead of Kafka")
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser("replay", help="run the detectors offline over recorded events, print alerts",
                       description="Replay JSON Lines recordings (one event or batch envelope per line) through "
                                   "the same detection core as the worker, on the events' own clock. Alerts go "
                                   "to stdout as JSON Lines, progress to stderr. Same input, same alerts.")
    p.add_argument("files", nargs="+", metavar="FILE", help="recording(s) in the wire format; '-' reads stdin")
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("alerts", help="follow the alerts topic and print alerts")
    _add_kafka_args(p)
    p.add_argument("--json", action="store_true", help="print raw JSON, one alert per line")
    p.add_argument("--from-beginning", action="store_true", help="start at the oldest alert kept")
    p.add_argument("--timeout", type=float, help="stop after this many seconds without a new alert")
    p.set_defaults(func=cmd_alerts)

    p = sub.add_parser("demo", help="broker + worker + simulated straggler, alerts printed; ends by itself",
                       description="Start a local Kafka broker (unless KAFKA_BOOTSTRAP/--bootstrap is set), a "
                                   "worker and a simulated 64-rank job with one straggler, and print the alerts.")
    _add_kafka_args(p)
    p.add_argument("--ranks", type=int, default=64)
    p.add_argument("--steps", type=int, default=220)
    p.add_argument("--speed", type=float, default=10.0, help="simulated seconds per wall second (default 10)")
    p.add_argument("--timeout", type=float, default=240.0, help="give up after this many seconds")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("broker", help="run a local single-node Apache Kafka broker in the foreground",
                       description="Fetch Apache Kafka's jars with Maven (once), then run a KRaft broker on "
                                   "127.0.0.1 until interrupted.")
    p.add_argument("--port", type=int, default=9092)
    p.set_defaults(func=cmd_broker)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except ValueError as exc:  # configuration errors, e.g. a bad STEPWATCH_* value
        print(f"stepwatch {args.command}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
