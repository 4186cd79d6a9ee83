"""``stepwatch broker``: a local single-node Apache Kafka broker in the foreground."""

from __future__ import annotations

import argparse


def run(args: argparse.Namespace) -> int:
    from stepwatch.localkafka import run_foreground

    run_foreground(port=args.port)
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("broker", help="run a local single-node Apache Kafka broker in the foreground",
                       description="Fetch Apache Kafka's jars with Maven (once), then run a KRaft broker on "
                                   "127.0.0.1 until interrupted.")
    p.add_argument("--port", type=int, default=9092)
    p.set_defaults(func=run)
