"""``stepwatch worker``: run the detection worker until interrupted."""

from __future__ import annotations

import argparse
import dataclasses

from stepwatch.commands.common import _add_kafka_args, _require_bootstrap, _require_reachable, _settings


def run(args: argparse.Namespace) -> int:
    from stepwatch.streams.worker import run_worker

    settings = _settings(args)
    _require_bootstrap(settings)
    overrides = {}
    if args.web_port is not None:
        overrides["web_port"] = args.web_port
    if overrides:
        settings = dataclasses.replace(settings, worker=dataclasses.replace(settings.worker, **overrides))
    _require_reachable(settings, "worker")
    from stepwatch.recording import tune_gc

    # As replay: the default collector's scans of every rank's state grow with the job (BENCHMARKS.md,
    # "Replay and job size"); a larger youngest generation keeps the per-event cost flat.
    tune_gc()
    run_worker(settings, loglevel=args.loglevel)
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("worker", help="run the detection worker (Faust) until interrupted",
                       description="Consume the events topic, detect stragglers and hangs, publish alerts.")
    _add_kafka_args(p)
    p.add_argument("--web-port", type=int, help="port of the worker's web server, 0 to disable (default 6066)")
    p.add_argument("--loglevel", default="info", choices=["debug", "info", "warning", "error"],
                   help="log level of its own log (default info)")
    p.set_defaults(func=run)
