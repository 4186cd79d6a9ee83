"""The ``stepwatch`` command line: worker, shard, simulate, replay, record, publish, alerts, status, config, demo,
broker."""

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
    from stepwatch.streams.worker import run_worker

    settings = _settings(args)
    _require_bootstrap(settings)
    overrides = {}
    if args.web_port is not None:
        overrides["web_port"] = args.web_port
    if overrides:
        settings = dataclasses.replace(settings, worker=dataclasses.replace(settings.worker, **overrides))
    _require_reachable(settings, "worker")
    run_worker(settings, loglevel=args.loglevel)
    return 0


def _require_reachable(settings: Settings, command: str, timeout: float = 5.0) -> None:
    """One clear line, at once, when no bootstrap server accepts a connection (not Kafka's retry logs)."""
    import socket

    errors = []
    for server in settings.kafka.bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            socket.create_connection((host.strip("[]") or "localhost", int(port)), timeout=timeout).close()
            return
        except (OSError, ValueError) as exc:
            errors.append(f"{server.strip()}: {exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}")
    raise SystemExit(f"stepwatch {command}: Kafka broker unreachable ({'; '.join(errors)}); check --bootstrap or "
                     "KAFKA_BOOTSTRAP (`stepwatch broker` starts a local one)")


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
    from stepwatch.producers.simulator import HangFault

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
        from stepwatch.producers.telemetry_sim import GPU_FAULTS, LINK_FAULTS, TelemetryFault

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
    from stepwatch.producers.host_sim import HOST_FAULT_KINDS, HostFault

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
    from stepwatch.producers.telemetry_sim import TelemetrySimulator, TelemetrySpec

    if comm:
        spec = dataclasses.replace(spec, collective_events=True)

    return TelemetrySimulator(spec, TelemetrySpec(faults=faults, seed=spec.seed + 1))


def build_spec(args: argparse.Namespace):
    from stepwatch.producers.simulator import SimulationSpec, StragglerFault

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
    )


def cmd_simulate(args: argparse.Namespace) -> int:
    from stepwatch.producers.simulator import ClusterSimulator

    try:
        spec = build_spec(args)
    except ValueError as exc:
        raise SystemExit(f"stepwatch simulate: {exc}") from None
    sim = _telemetry_simulator(spec, args) or ClusterSimulator(spec)
    if getattr(args, "host_fault", None) or (getattr(args, "telemetry", False) and sim is not None):
        from stepwatch.producers.host_sim import HostSimulator

        try:
            sim = HostSimulator(spec, tuple(args.host_fault or ()), seed=spec.seed + 2,
                                inner=lambda s: _telemetry_simulator(s, args) or ClusterSimulator(s))
        except ValueError as exc:
            raise SystemExit(f"stepwatch simulate: {exc}") from None
    speed = args.speed if args.speed is not None else (0.0 if args.out else 1.0)
    stream = sim.steps()
    skew = dict(getattr(args, "clock_skew", None) or ())
    if skew:  # the hosts' clocks are off, the order events arrive in is not
        from stepwatch.producers.simulator import apply_clock_skew

        stream = ((t, apply_clock_skew(batch, skew)) for t, batch in stream)
    if args.out:
        out = sys.stdout if args.out == "-" else open(args.out, "w", encoding="utf-8")
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
        for i, (_, batch) in enumerate(_paced(stream, speed)):
            publisher.send_job(spec.job, batch)
            if time.monotonic() - last_report > 5:
                print(f"stepwatch simulate: step {i}/{spec.steps}, {publisher.events_sent} events sent",
                      file=sys.stderr)
                last_report = time.monotonic()
    print(f"stepwatch simulate: sent {publisher.events_sent} events in {publisher.messages_sent} messages "
          f"to {topic}; delivered {publisher.events_delivered}, dropped {publisher.events_dropped}", file=sys.stderr)
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


#: Seconds between progress lines of long-running commands (on stderr).
PROGRESS_SECONDS = 5.0


def _read_events(paths: list[str], stats: dict) -> Iterator:
    from stepwatch.models.events import decode_message

    next_report = time.monotonic() + PROGRESS_SECONDS
    for path in paths:
        stream: TextIO = sys.stdin if path == "-" else open(path, encoding="utf-8")
        try:
            for lineno, line in enumerate(stream, 1):
                if not line.strip():
                    continue
                if lineno % 4096 == 0 and time.monotonic() > next_report:  # progress for long recordings
                    print(f"stepwatch replay: {path}: line {lineno}, {stats['events']} events, "
                          f"{stats['alerts']} alerts so far", file=sys.stderr, flush=True)
                    next_report = time.monotonic() + PROGRESS_SECONDS
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
    from stepwatch.recording import parse_time, read_lines, replay

    settings = Settings.from_env()
    stats: dict = {"events": 0, "rejected": 0, "alerts": 0}
    started = time.monotonic()
    until = parse_time(args.until) if args.until else None
    try:  # the worker's own pipeline (models/pipeline.py), on the recording's clock
        replay(read_lines(args.files), settings, drain=args.drain, until=until, stats=stats)
    except FileNotFoundError as exc:
        raise SystemExit(f"stepwatch replay: {exc.filename}: no such file") from None
    sys.stdout.flush()
    print(f"stepwatch replay: {stats['events']} events, {stats['rejected']} rejected, {stats['alerts']} alerts "
          f"in {time.monotonic() - started:.2f} s", file=sys.stderr)
    return 0


def cmd_record(args: argparse.Namespace) -> int:
    from stepwatch.recording import parse_time, record

    settings = _settings(args)
    _require_bootstrap(settings)
    since = parse_time(args.since) if args.since else None
    until = parse_time(args.until) if args.until else None
    out = sys.stdout.buffer if args.out == "-" else open(args.out, "wb")
    try:
        stats = record(settings, out, jobs=args.job, since=since, until=until, arrival=not args.no_arrival)
    finally:
        if out is not sys.stdout.buffer:
            out.close()
        else:
            out.flush()
    print(f"stepwatch record: {stats['written']} messages written of {stats['messages']} read "
          f"({stats['skipped']} not events)" + ("" if args.out == "-" else f" to {args.out}"), file=sys.stderr)
    return 0


def cmd_publish(args: argparse.Namespace) -> int:
    from stepwatch.recording import publish, read_lines

    settings = _settings(args)
    _require_bootstrap(settings)
    started = time.monotonic()
    try:
        stats = publish(read_lines(args.files, what="publish"), settings, speed=args.speed)
    except FileNotFoundError as exc:
        raise SystemExit(f"stepwatch publish: {exc.filename}: no such file") from None
    print(f"stepwatch publish: {stats['events_sent']} events in {stats['messages_sent']} messages from "
          f"{stats['lines']} lines ({stats['skipped']} not events, {stats['events_dropped']} dropped) in "
          f"{time.monotonic() - started:.2f} s", file=sys.stderr)
    return 1 if stats["events_dropped"] else 0


# -- alerts ---------------------------------------------------------------------------------


def follow_alerts(settings: Settings, *, from_beginning: bool, timeout: float | None) -> Iterator[dict]:
    from kafka import KafkaConsumer

    from stepwatch.security import client_config

    consumer = KafkaConsumer(
        settings.kafka.topic(settings.kafka.alerts_topic),
        bootstrap_servers=settings.kafka.bootstrap,
        auto_offset_reset="earliest" if from_beginning else "latest",
        enable_auto_commit=False,
        group_id=None,
        consumer_timeout_ms=int(timeout * 1000) if timeout else float("inf"),
        **client_config(settings),
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


def alert_matches(alert: dict, *, jobs: list[str] | None = None, types: list[str] | None = None,
                  statuses: list[str] | None = None) -> bool:
    """The ``stepwatch alerts`` filters; each given list matches any of its values."""
    return ((not jobs or alert.get("job") in jobs) and (not types or alert.get("type") in types)
            and (not statuses or alert.get("status") in statuses))


ALERT_COLUMNS = (("TIME (UTC)", 20), ("STATUS", 8), ("SEVERITY", 8), ("TYPE", 9), ("JOB", 18), ("RANKS", 12))


def alert_table_header() -> str:
    return "  ".join(f"{name:<{width}}" for name, width in ALERT_COLUMNS) + "  SUMMARY"


def alert_table_row(alert: dict, *, width: int | None = None) -> str:
    """One fixed-width row of the readable alerts table (the summary is cut to the terminal width)."""
    from stepwatch.models.alerts import _iso

    when = alert.get("ends_at") if alert.get("status") == "resolved" else alert.get("starts_at")
    ranks = ",".join(str(r) for r in alert.get("ranks") or [])
    cells = [_iso(when) if isinstance(when, (int, float)) else "?", str(alert.get("status", "?")).upper(),
             str(alert.get("severity", "?")), str(alert.get("type", "?")), str(alert.get("job", "?")),
             ranks if len(ranks) <= 12 else ranks[:11] + "+"]
    row = "  ".join(f"{_cut(c, w):<{w}}" for c, (_, w) in zip(cells, ALERT_COLUMNS))
    summary = str(alert.get("summary", ""))
    if width:
        summary = _cut(summary, max(20, width - len(row) - 2))
    return f"{row}  {summary}"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "~"


def cmd_alerts(args: argparse.Namespace) -> int:
    import shutil

    settings = _settings(args)
    _require_bootstrap(settings)
    width = shutil.get_terminal_size((160, 24)).columns if sys.stdout.isatty() else None
    header = False
    try:
        for alert in follow_alerts(settings, from_beginning=args.from_beginning, timeout=args.timeout):
            if not alert_matches(alert, jobs=args.job, types=args.type, statuses=args.status):
                continue
            if args.json:
                print(orjson.dumps(alert).decode(), flush=True)
                continue
            if not header:
                print(alert_table_header(), flush=True)
                header = True
            print(alert_table_row(alert, width=width), flush=True)
    except KeyboardInterrupt:
        pass
    return 0


# -- status ---------------------------------------------------------------------------------


def fetch_json(url: str, *, timeout: float = 10.0) -> tuple[int, object]:
    """GET a JSON document; (HTTP status, body). Raises OSError when nothing answers."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, orjson.loads(response.read())
    except urllib.error.HTTPError as exc:
        body = exc.read()
        try:
            return exc.code, orjson.loads(body)
        except orjson.JSONDecodeError:
            return exc.code, {"error": body.decode("utf-8", "replace")[:500]}


def _num(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_jobs(body: dict) -> str:
    lines = [f"worker {body.get('worker')}  partitions {body.get('partitions')}",
             f"{'JOB':<24} {'RANKS':>6} {'STEP':>8} {'PHASE':<10} {'STEPS/S':>8} {'TOKENS/S':>10} {'AGE S':>7} "
             f"{'ALERTS':>6}"]
    for j in body.get("jobs", []):
        lines.append(f"{_cut(j['job'], 24):<24} {j['ranks']:>6} {j['latest_step']:>8} "
                     f"{j['phase'] + (' (end)' if j.get('ended') else ''):<10} {_num(j.get('step_rate')):>8} "
                     f"{_num(j.get('tokens_per_second'), 0):>10} {_num(j.get('last_event_age'), 1):>7} "
                     f"{j['open_alerts']:>6}")
        for a in j.get("alerts", []):
            lines.append(f"    {a['severity'].upper():<8} {a['type']:<9} {_cut(a['summary'], 110)}")
    if not body.get("jobs"):
        lines.append("(no jobs on this worker)")
    return "\n".join(lines)


def _hang_forensics(ev: dict) -> list[str]:
    """A hang alert's process group and the culprit's stack (docs/hang.md), indented under the alert."""
    from stepwatch.models.stacks import culprit_stack

    out = []
    if ev.get("process_group"):
        members = ev.get("process_group_ranks")
        out.append(f"           process group {ev['process_group']} "
                   f"({'ranks ' + ','.join(map(str, members)) if members else 'all ranks'}), "
                   f"collective {ev.get('collective_seq')}")
    stack = culprit_stack(ev)
    if stack is not None:
        rank, frames = stack
        out.append(f"           stack of rank {rank} (innermost last):")
        out.extend(f"             {frame}" for frame in frames)
    if ev.get("stack_missing"):
        out.append(f"           no stack from rank(s): {', '.join(map(str, ev['stack_missing']))}")
    return out


def format_job(body: dict, *, all_ranks: bool = False, limit: int = 20) -> str:
    s = body.get("settings") or {}
    straggler = s.get("straggler") or {}
    lines = [f"job {body['job']}: {body.get('rank_count')} ranks, step {body['latest_step']}, phase {body['phase']}"
             f"{' (ended)' if body.get('ended') else ''}, {_num(body.get('step_rate'))} steps/s, "
             f"tokens/s {_num(body.get('tokens_per_second'), 0)}, last event {_num(body.get('last_event_age'), 1)} s ago",
             f"settings ({s.get('source', '?')}): ratio_threshold {straggler.get('ratio_threshold')}, "
             f"z_threshold {straggler.get('z_threshold')}, min_flagged {straggler.get('min_flagged')}/"
             f"{straggler.get('window')}, clear_after {straggler.get('clear_after')}"]
    alerts = body.get("alerts", [])
    lines.append(f"open alerts: {len(alerts)}")
    for a in alerts:
        lines.append(f"  {a['severity'].upper():<8} {a['type']:<9} ranks {a['ranks']}  {a['summary']}")
        ev = a.get("evidence") or {}
        brief = {k: v for k, v in ev.items() if not isinstance(v, (dict, list)) and v is not None}
        if brief:
            lines.append("           evidence: " + ", ".join(f"{k}={v}" for k, v in list(brief.items())[:10]))
        lines.extend(_hang_forensics(ev))
    ranks = body.get("ranks", [])
    shown = ranks if all_ranks else sorted(
        ranks, key=lambda r: (r.get("alert") is None, -(r.get("ratio") or 0)))[:limit]
    lines.append(f"{'RANK':>6} {'NODE':<14} {'STEP':>8} {'AGE S':>7} {'RATIO':>7} {'ROBUST Z':>9} {'PHASE':<10} ALERT")
    for r in shown:
        lines.append(f"{r['rank']:>6} {_cut(str(r.get('node') or '-'), 14):<14} "
                     f"{r['step'] if r.get('step') is not None else '-':>8} {_num(r.get('last_event_age'), 1):>7} "
                     f"{_num(r.get('ratio'), 3):>7} {_num(r.get('robust_z'), 1):>9} {str(r.get('phase')):<10} "
                     f"{r.get('alert') or ''}")
    if len(shown) < len(ranks):
        lines.append(f"... {len(ranks) - len(shown)} more ranks (most suspicious first; --all shows every rank)")
    return "\n".join(lines)


def cmd_status(args: argparse.Namespace) -> int:
    from urllib.parse import quote

    base = args.url.rstrip("/")
    url = f"{base}/jobs/{quote(args.job, safe='')}" if args.job else f"{base}/jobs"
    try:
        status, body = fetch_json(url, timeout=args.timeout)
    except OSError as exc:
        print(f"stepwatch status: cannot reach the worker at {base}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(orjson.dumps(body, option=orjson.OPT_INDENT_2).decode())
    elif status != 200:
        print(f"stepwatch status: HTTP {status}: {body.get('error') if isinstance(body, dict) else body}",
              file=sys.stderr)
        if isinstance(body, dict) and body.get("owner"):
            print(f"the job's partition ({body.get('partition')}) is on {body['owner']}", file=sys.stderr)
    else:
        print(format_job(body, all_ranks=args.all) if args.job else format_jobs(body))
    return 0 if status == 200 else 1


# -- config ---------------------------------------------------------------------------------


def cmd_config(args: argparse.Namespace) -> int:
    from stepwatch.runtime_config import GLOBAL, parse_assignments, read_topic, validate, write_topic

    settings = _settings(args)
    _require_bootstrap(settings)
    key = args.job or GLOBAL
    if args.config_command == "show":
        scopes = read_topic(settings)
        if args.job:
            scopes = {k: v for k, v in scopes.items() if k == args.job}
        if args.json:
            print(orjson.dumps(scopes, option=orjson.OPT_INDENT_2).decode())
            return 0
        if not scopes:
            print("no runtime settings: every job uses the worker's own settings")
        for scope in sorted(scopes, key=lambda k: (k != GLOBAL, k)):
            name = "all jobs (*)" if scope == GLOBAL else f"job {scope}"
            values = ", ".join(f"{sec}.{k}={v}" for sec, kv in scopes[scope].items() for k, v in sorted(kv.items()))
            print(f"{name}: {values}")
        return 0
    changes = parse_assignments(args.assignments) if args.config_command == "set" else {}
    current = read_topic(settings).get(key, {})
    if args.config_command == "set":
        merged = {sec: dict(current.get(sec, {})) for sec in set(current) | set(changes)}
        for sec, kv in changes.items():
            merged[sec].update(kv)
        validate(merged, settings.straggler)
    else:  # unset
        merged = {sec: dict(kv) for sec, kv in current.items()}
        for name in args.names:
            sec, dot, field = name.rpartition(".")
            merged.get(sec if dot else "straggler", {}).pop(field, None)
        if not args.names:
            merged = {}
    merged = {sec: kv for sec, kv in merged.items() if kv}
    write_topic(settings, key, merged or None)
    scope = "all jobs" if key == GLOBAL else f"job {key}"
    if merged:
        values = ", ".join(f"{sec}.{k}={v}" for sec, kv in merged.items() for k, v in sorted(kv.items()))
        print(f"stepwatch config: {scope}: {values} (workers apply it within seconds)")
    else:
        print(f"stepwatch config: {scope}: no runtime settings (back to the defaults)")
    return 0


# -- demo and broker --------------------------------------------------------------------------


def cmd_demo(args: argparse.Namespace) -> int:
    from stepwatch.demo import run_demo

    return run_demo(_settings(args), ranks=args.ranks, steps=args.steps, speed=args.speed, timeout=args.timeout)


SHARD_DESCRIPTION = """\
Optional first stage for jobs too large for one worker (thousands of ranks sending
single-event messages). It reads the raw events topic (<prefix>events,
STEPWATCH_KAFKA_EVENTS_TOPIC) in the consumer group <app_id>-shard, validates every
message (bad input goes to <prefix>deadletter, as with the worker), buffers the valid
events per job and publishes them as batch envelopes of up to 256 events, sorted by
step and keyed by job, to <prefix>job-events (STEPWATCH_KAFKA_JOB_EVENTS_TOPIC) after
at most --flush-interval seconds.

Run several with the same settings: they split the raw topic's partitions. Producers
key by rank shard (stepwatch simulate --shard-ranks N, STEPWATCH_MONITOR_SHARD_RANKS=N);
workers read the output with STEPWATCH_KAFKA_EVENTS_TOPIC=job-events. Offsets are
committed once the envelopes made from them are acknowledged (at least once).
SIGTERM/SIGINT flushes, commits and stops."""

SHARD_EPILOG = """\
settings (environment): STEPWATCH_SHARD_FLUSH_INTERVAL (0.1 s), STEPWATCH_SHARD_MAX_EVENTS
(256), STEPWATCH_SHARD_MAX_BUFFERED (100000), STEPWATCH_SHARD_COMMIT_INTERVAL (1.0 s),
STEPWATCH_SHARD_METRICS_PORT (0: off). See docs/operations.md."""


def cmd_shard(args: argparse.Namespace) -> int:
    from stepwatch.streams.shard import run_shard

    settings = _settings(args)
    _require_bootstrap(settings)
    overrides = {}
    if args.flush_interval is not None:
        overrides["flush_interval"] = args.flush_interval
    if args.metrics_port is not None:
        overrides["metrics_port"] = args.metrics_port
    if overrides:
        settings = dataclasses.replace(settings, shard=dataclasses.replace(settings.shard, **overrides))
    logging.getLogger("stepwatch.shard").setLevel(args.loglevel.upper())
    run_shard(settings)
    return 0


def cmd_broker(args: argparse.Namespace) -> int:
    from stepwatch.localkafka import run_foreground

    run_foreground(port=args.port)
    return 0


# -- import and scenarios --------------------------------------------------------------------


def _parse_col(text: str) -> tuple[str, str]:
    field, sep, column = text.partition("=")
    if not sep or not field.strip() or not column.strip():
        raise argparse.ArgumentTypeError(f"expected FIELD=COLUMN, got {text!r}")
    return field.strip(), column.strip()


def cmd_import(args: argparse.Namespace) -> int:
    from stepwatch import importer

    columns = dict(args.col or [])
    extra = dict(args.extra or [])
    try:
        mapping = importer.mapping_from_args(args.preset, columns, time_scale=args.time_scale,
                                             step_period=args.step_period)
        if extra:
            mapping = dataclasses.replace(mapping, extra={**mapping.extra, **extra})
        events = importer.convert(args.files, mapping, job=args.job, t0=args.start_time)
        importer.validate(events)
    except ValueError as exc:  # TraceImportError, or InvalidEvent naming the bad field
        raise SystemExit(f"stepwatch import: {exc}") from None
    out = sys.stdout.buffer if args.out == "-" else open(args.out, "wb")
    try:
        n, lines = importer.write_jsonl(events, out, batch=not args.single)
    finally:
        if out is not sys.stdout.buffer:
            out.close()
    steps = sum(1 for e in events if e["kind"] == "step")
    print(f"stepwatch import: {n} events ({steps} step events) in {lines} lines"
          + ("" if args.out == "-" else f" to {args.out}"), file=sys.stderr)
    return 0


def cmd_scenarios(args: argparse.Namespace) -> int:
    from stepwatch.producers import scenarios

    if args.write is None:
        for row in scenarios.describe():
            problems = ", ".join(row["problems"]) or "healthy"
            print(f"{row['name']:32} {row['ranks']:>6} ranks  {problems:40} {row['description']}")
        return 0
    names = args.name or scenarios.names()
    for name in names:
        try:
            recording, labels = scenarios.write(scenarios.get(name), args.write)
        except KeyError as exc:
            raise SystemExit(f"stepwatch scenarios: {exc.args[0]}") from None
        print(f"stepwatch scenarios: wrote {recording} and {labels.name}", file=sys.stderr)
    return 0


# -- agent ----------------------------------------------------------------------------------


def cmd_agent(args: argparse.Namespace) -> int:
    """The node agent: GPU (NVML) and InfiniBand (sysfs) telemetry to Kafka, keyed by node."""
    from stepwatch.producers.agent import KafkaSender, NodeAgent

    settings = _settings(args)
    t = settings.telemetry
    overrides = {}
    if args.interval is not None:
        overrides["agent_interval"] = args.interval
    if args.sysfs_root is not None:
        overrides["sysfs_root"] = args.sysfs_root
    if args.proc_root is not None:
        overrides["proc_root"] = args.proc_root
    if overrides:
        settings = dataclasses.replace(settings, telemetry=dataclasses.replace(t, **overrides))
    to_stdout = args.stdout or (args.once and not settings.kafka.bootstrap)
    sender = None
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
    agent = NodeAgent(node=args.node, settings=settings, sink=sink)
    try:
        agent.discover()
        agent.run(once=args.once, max_samples=args.samples)
    except KeyboardInterrupt:
        pass
    finally:
        agent.close()
        if sender is not None:
            sender.close()
            print(f"stepwatch agent: {agent.samples} samples, {sender.sent} batches sent, {sender.dropped} dropped "
                  f"(queue full), {sender.failed} not sent (Kafka unavailable)", file=sys.stderr)
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
    p.add_argument("--scenario", choices=["healthy", "straggler", *HANG_SCENARIOS], default="healthy",
                   help="'straggler' adds one rank 30%% slower for a third of the run unless --straggler is given; "
                        "'hang' (a rank stops before a collective, its heartbeats go on), 'frozen' (a rank stops "
                        "sending anything, like SIGSTOP) and 'dead' (a rank's process exits) stop rank 5 a third "
                        "of the way in unless --hang/--frozen/--dead is given; 'slow-checkpoint' adds one long but "
                        "legitimate checkpoint pause half-way (about 1.2 x --checkpoint-seconds, default 900); "
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
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser("replay", help="run the detectors offline over recorded events, print alerts",
                       description="Replay JSON Lines recordings (one event or batch envelope per line) through "
                                   "the same detection core as the worker, on the events' own clock. Alerts go "
                                   "to stdout as JSON Lines, progress to stderr. Same input, same alerts.")
    p.add_argument("files", nargs="+", metavar="FILE", help="recording(s) in the wire format; '-' reads stdin")
    p.add_argument("--drain", type=float, default=0.0, metavar="SECONDS",
                   help="after the last event, run the timer rules this many seconds on (hangs at the end fire)")
    p.add_argument("--until", metavar="TIME", help="after the last event, run the timer rules up to this time "
                   "(Unix seconds or ISO 8601, UTC)")
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("record", help="copy the events and telemetry topics to a JSON Lines recording",
                       description="Write what the events and telemetry topics hold now (one message per line, "
                                   "in arrival order) for `stepwatch replay` or `stepwatch publish`. Each line "
                                   "keeps its broker time as \"_arrival\" (Unix seconds).")
    _add_kafka_args(p)
    p.add_argument("-o", "--out", default="-", metavar="FILE", help="where to write ('-': stdout, the default)")
    p.add_argument("--job", action="append", metavar="JOB",
                   help="only this job's events (node telemetry is kept whole); repeatable")
    p.add_argument("--since", metavar="TIME", help="from this broker time (Unix seconds or ISO 8601, UTC)")
    p.add_argument("--until", metavar="TIME", help="up to this broker time")
    p.add_argument("--no-arrival", action="store_true", help="leave out \"_arrival\"")
    p.set_defaults(func=cmd_record)

    p = sub.add_parser("publish", help="send a recording to the events and telemetry topics",
                       description="Publish a JSON Lines recording: job events keyed by job, node telemetry "
                                   "by node, in batch envelopes; as fast as possible, or paced with --speed.")
    _add_kafka_args(p)
    p.add_argument("files", nargs="+", metavar="FILE", help="recording(s); '-' reads stdin")
    p.add_argument("--speed", type=float, default=0.0,
                   help="x real time by each line's \"_arrival\" (else its event time); 0: as fast as possible")
    p.set_defaults(func=cmd_publish)

    p = sub.add_parser("alerts", help="follow the alerts topic and print alerts (a table, or JSON)")
    _add_kafka_args(p)
    p.add_argument("--json", action="store_true", help="print raw JSON, one alert per line")
    p.add_argument("--from-beginning", action="store_true", help="start at the oldest alert kept")
    p.add_argument("--timeout", type=float, help="stop after this many seconds without a new alert")
    p.add_argument("--job", action="append", metavar="JOB", help="only this job's alerts; repeatable")
    p.add_argument("--type", action="append", help="only alerts of this type (straggler, hang, throughput_drop, "
                                                   "comm_slowdown, checkpoint_stale, gpu_fault, link_errors); "
                                                   "repeatable")
    p.add_argument("--status", action="append", choices=["firing", "resolved"], help="only firing or resolved")
    p.set_defaults(func=cmd_alerts)

    p = sub.add_parser("status", help="print a worker's status API view (jobs, or one job's ranks and alerts)",
                       description="Ask a running worker's web server (GET /jobs or /jobs/JOB) and print it.")
    p.add_argument("job", nargs="?", metavar="JOB", help="one job in detail (default: every job of the worker)")
    p.add_argument("--url", default="http://127.0.0.1:6066", help="the worker's web server "
                                                                  "(default http://127.0.0.1:6066)")
    p.add_argument("--json", action="store_true", help="print the API's JSON")
    p.add_argument("--all", action="store_true", help="list every rank (default: the 20 most suspicious)")
    p.add_argument("--timeout", type=float, default=10.0, help="HTTP timeout, seconds")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("config", help="change detector settings of running workers (config topic)",
                       description="Runtime settings live in the compacted <prefix>config topic, keyed by job "
                                   "id or '*' (all jobs); workers apply them within seconds, no restart.")
    csub = p.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    c = csub.add_parser("set", help="set settings, e.g. straggler.ratio_threshold=1.2")
    _add_kafka_args(c)
    c.add_argument("--job", help="only this job (default: every job, '*')")
    c.add_argument("assignments", nargs="+", metavar="SECTION.FIELD=VALUE")
    c.set_defaults(func=cmd_config)
    c = csub.add_parser("unset", help="drop settings (all of the scope's without names)")
    _add_kafka_args(c)
    c.add_argument("--job", help="only this job (default: every job, '*')")
    c.add_argument("names", nargs="*", metavar="SECTION.FIELD")
    c.set_defaults(func=cmd_config)
    c = csub.add_parser("show", help="print the settings in the config topic")
    _add_kafka_args(c)
    c.add_argument("--job", help="only this job's")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=cmd_config)

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

    p = sub.add_parser(
        "shard", help="run the shard stage: one large job's raw events re-batched per job for the workers",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=SHARD_DESCRIPTION, epilog=SHARD_EPILOG)
    _add_kafka_args(p)
    p.add_argument("--flush-interval", type=float, metavar="S",
                   help="seconds a job's events wait at most before they go out (default 0.1)")
    p.add_argument("--metrics-port", type=int, metavar="PORT",
                   help="serve Prometheus metrics (stepwatch_shard_*) on this port (default: none)")
    p.add_argument("--loglevel", default="info", choices=["debug", "info", "warning", "error"])
    p.set_defaults(func=cmd_shard)

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
    p.add_argument("--once", action="store_true",
                   help="take one sample and exit (printed as JSON Lines unless Kafka is configured)")
    p.add_argument("--samples", type=int, metavar="N", help="stop after N samples")
    p.add_argument("--stdout", action="store_true", help="print the events as JSON Lines instead of publishing")
    p.set_defaults(func=cmd_agent)

    p = sub.add_parser("import", help="convert CSV/Parquet step timings (e.g. public traces) to wire-format JSON Lines",
                       description="Map the columns of a CSV or Parquet file (one row per rank and step, or one row "
                                   "per operation with a preset) to step events, validated, in time order. "
                                   "Presets: alibaba-pai, bytedance-straggler. Parquet needs pyarrow "
                                   "(pip install 'stepwatch[import]').")
    p.add_argument("files", nargs="+", metavar="FILE", help="input .csv or .parquet file(s)")
    p.add_argument("--preset", choices=["alibaba-pai", "bytedance-straggler"], help="column mapping of a known trace")
    p.add_argument("--col", type=_parse_col, action="append", metavar="FIELD=COLUMN",
                   help="map a wire field (job, rank, step, ts, step_time, compute_time, data_time, comm_time, "
                        "group, node) to an input column; repeatable; overrides the preset's")
    p.add_argument("--extra", type=_parse_col, action="append", metavar="NAME=COLUMN",
                   help="copy a column into the events as an extra field; repeatable")
    p.add_argument("--job", help="job id (default: the job column, else the file name)")
    p.add_argument("--time-scale", type=float, metavar="X", help="multiply durations by X (e.g. 0.001 for ms)")
    p.add_argument("--step-period", type=float, metavar="S",
                   help="without a ts column: step N ends at start + N*S (default: cumulated median step time)")
    p.add_argument("--start-time", type=float, default=1_700_000_000.0,
                   help="Unix time of the synthesized clock's start (default 1700000000)")
    p.add_argument("--single", action="store_true", help="one event per line instead of one envelope per step")
    p.add_argument("-o", "--out", default="-", metavar="FILE", help="output JSON Lines file (default: stdout)")
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("scenarios", help="list the labelled scenario suite, or write recordings with their labels",
                       description="The scenario library of producers/scenarios.py (used by bench/quality.py). "
                                   "Without --write: list it. With --write DIR: write NAME.jsonl and "
                                   "NAME.labels.json (ground truth: problem type, ranks, nodes, onset, end).")
    p.add_argument("name", nargs="*", help="scenario name(s) to write (default: all)")
    p.add_argument("--write", metavar="DIR", help="write recordings and labels into DIR")
    p.set_defaults(func=cmd_scenarios)

    from stepwatch.report import add_parser as add_report_parser  # stepwatch/report.py

    add_report_parser(sub)
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
    except Exception as exc:  # a Kafka client error: one clear line, not a traceback
        from kafka.errors import KafkaError

        if not isinstance(exc, KafkaError):
            raise
        bootstrap = getattr(args, "bootstrap", None) or Settings.from_env().kafka.bootstrap
        print(f"stepwatch {args.command}: cannot talk to Kafka at {bootstrap}: {exc} "
              "(check the address and the STEPWATCH_SECURITY_* settings)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
