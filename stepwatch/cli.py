"""The ``stepwatch`` command line: the parser, assembled from one module per command in stepwatch/commands/, and
``main``."""

from __future__ import annotations

import argparse
import logging
import sys

from stepwatch import __version__
from stepwatch.commands import (agent, alerts, broker, config, demo, import_, publish, record, replay, scenarios,
                                shard, simulate, status, worker)
from stepwatch.config import Settings

#: Services that log on their own terms (the worker, the shard stage, the node agent, the broker).
LONG_RUNNING = frozenset({"worker", "shard", "agent", "broker"})

#: In the order ``stepwatch --help`` lists them.
COMMANDS = (worker, simulate, replay, record, publish, alerts, status, config, demo, broker, shard, agent, import_,
            scenarios)


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
    for command in COMMANDS:
        command.add_parser(sub)

    from stepwatch.report import add_parser as add_report_parser  # stepwatch/report.py

    add_report_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not args.verbose and args.command not in LONG_RUNNING:
        # kafka-python logs each retry of a dead broker; a command says it once, in one line of its own (-v shows it).
        logging.getLogger("kafka").setLevel(logging.CRITICAL)
    try:
        return args.func(args)
    except ValueError as exc:  # configuration errors, e.g. a bad STEPWATCH_* value
        print(f"stepwatch {args.command}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except OSError as exc:  # a path that cannot be read or written: one line, not a traceback
        if exc.filename is None:
            raise
        print(f"stepwatch {args.command}: {exc.filename}: {exc.strerror or exc}", file=sys.stderr)
        return 1
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
