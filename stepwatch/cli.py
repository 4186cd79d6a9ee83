"""The ``stepwatch`` command line: the parser, assembled from one module per command in stepwatch/commands/, and
``main``."""

from __future__ import annotations

import argparse
import logging
import sys

from stepwatch import __version__
from stepwatch.commands.common import _require_bootstrap, _require_reachable, client_settings
from stepwatch.commands import (actions, agent, alerts, backtest, broker, config, demo, feedback, import_, publish,
                                record, replay, scenarios, shard, simulate, status, worker)

#: Commands that talk to Kafka (given these arguments): checked for a reachable bootstrap first.
KAFKA_CLIENTS = {"alerts": lambda a: True, "record": lambda a: True, "config": lambda a: True, "actions": lambda a: True,
                 "feedback": lambda a: True, "publish": lambda a: True, "simulate": lambda a: not a.out,
                 "report": lambda a: not (a.file or a.file_option)}

#: In the order ``stepwatch --help`` lists them.
COMMANDS = (worker, simulate, replay, backtest, record, publish, alerts, status, config, feedback, actions, demo, broker,
            shard, agent, import_, scenarios)


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


#: How long a command's Kafka client tries to reach a broker that accepts connections but does not answer as
#: Kafka (kafka-python's default is 30 s): the command fails within 10 s, in one line.
BOOTSTRAP_TIMEOUT_MS = 5000


def _short_lived_kafka_clients(*, quiet: bool) -> None:
    """A command (not a service): its kafka-python clients give up bootstrapping after 5 s, and, unless
    ``-v``, their retry log stays quiet: the command says what failed once, in a line of its own."""
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

    for client in (KafkaConsumer, KafkaProducer, KafkaAdminClient):
        if "bootstrap_timeout_ms" in client.DEFAULT_CONFIG:  # kafka-python 3; older ones have no such setting
            client.DEFAULT_CONFIG["bootstrap_timeout_ms"] = BOOTSTRAP_TIMEOUT_MS
    if quiet:
        logging.getLogger("kafka").setLevel(logging.CRITICAL)


#: The exit status of a command stopped by Ctrl-C (128 + SIGINT), as a shell reports it.
INTERRUPTED = 130


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # Ctrl-C: what the user asked for, not an error; no traceback
        return INTERRUPTED


def _main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command in KAFKA_CLIENTS or args.command == "demo":  # a command that ends, not a service
        _short_lived_kafka_clients(quiet=not args.verbose)
    try:
        precheck = getattr(args, "precheck", None)
        if precheck is not None:  # arguments wrong whatever the broker says: said first, without asking it
            precheck(args)
        if KAFKA_CLIENTS.get(args.command, lambda _a: False)(args):
            # Before the command loads anything heavy: a dead bootstrap is one line, at once.
            settings = client_settings(args)
            _require_bootstrap(settings)
            _require_reachable(settings, args.command, timeout=min(5.0, getattr(args, "timeout", None) or 5.0))
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
        from stepwatch.client_settings import ClientSettings

        bootstrap = getattr(args, "bootstrap", None) or ClientSettings.from_env().kafka.bootstrap
        print(f"stepwatch {args.command}: cannot talk to Kafka at {bootstrap}: {exc} "
              "(check the address and the STEPWATCH_SECURITY_* settings)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
