"""``stepwatch broker``: a local single-node Apache Kafka broker in the foreground."""

from __future__ import annotations

import argparse


def run(args: argparse.Namespace) -> int:
    import sys

    from stepwatch.localkafka import LocalKafkaError, run_foreground

    try:
        run_foreground(port=args.port)
    except LocalKafkaError as exc:  # one line (the broker's log has the rest), not a traceback and a Java stack
        print(f"stepwatch broker: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("broker", help="run a local single-node Apache Kafka broker in the foreground",
                       description="Fetch Apache Kafka's jars with Maven (once), then run a KRaft broker on "
                                   "127.0.0.1 until interrupted.")
    p.add_argument("--port", type=int, default=9092, help="the port to listen on, on 127.0.0.1 (default 9092); "
                                                          "the broker says 'ready' once it serves there")
    p.set_defaults(func=run)
