"""``stepwatch demo``: broker, worker and a simulated straggler (stepwatch/demo.py), alerts printed."""

from __future__ import annotations

import argparse

from stepwatch.commands.common import _add_kafka_args, _settings


def run(args: argparse.Namespace) -> int:
    from stepwatch.demo import run_demo

    return run_demo(_settings(args), ranks=args.ranks, steps=args.steps, speed=args.speed, timeout=args.timeout)


def add_parser(sub) -> None:
    p = sub.add_parser("demo", help="broker + worker + simulated straggler, alerts printed; ends by itself",
                       description="Start a local Kafka broker (unless KAFKA_BOOTSTRAP/--bootstrap is set), a "
                                   "worker and a simulated 64-rank job with one straggler, and print the alerts.")
    _add_kafka_args(p)
    p.add_argument("--ranks", type=int, default=64, help="ranks of the simulated job (default 64)")
    p.add_argument("--steps", type=int, default=220, help="training steps it runs (default 220)")
    p.add_argument("--speed", type=float, default=10.0, help="simulated seconds per wall second (default 10)")
    p.add_argument("--timeout", type=float, default=240.0, help="give up after this many seconds")
    p.set_defaults(func=run)
