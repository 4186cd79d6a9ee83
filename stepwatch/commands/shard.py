"""``stepwatch shard``: the shard stage, one large job's raw events re-batched per job."""

from __future__ import annotations

import argparse
import dataclasses
import logging

from stepwatch.commands.common import _add_kafka_args, _require_bootstrap, _settings


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


def run(args: argparse.Namespace) -> int:
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


def add_parser(sub) -> None:
    p = sub.add_parser(
        "shard", help="run the shard stage: one large job's raw events re-batched per job for the workers",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=SHARD_DESCRIPTION, epilog=SHARD_EPILOG)
    _add_kafka_args(p)
    p.add_argument("--flush-interval", type=float, metavar="S",
                   help="seconds a job's events wait at most before they go out (default 0.1)")
    p.add_argument("--metrics-port", type=int, metavar="PORT",
                   help="serve Prometheus metrics (stepwatch_shard_*) on this port (default: none)")
    p.add_argument("--loglevel", default="info", choices=["debug", "info", "warning", "error"],
                   help="log level of its own log (default info)")
    p.set_defaults(func=run)
