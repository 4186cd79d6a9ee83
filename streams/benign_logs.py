"""Faust's and aiokafka's benign start and rebalance messages, logged as what they are.

A healthy worker start logged ``[ERROR] Group Coordinator Request failed: [Error 15]
CoordinatorNotAvailableError`` (the broker is still electing the group's coordinator; aiokafka retries)
and a clean rebalance ``[ERROR] Aiokafka has not sent fetch request for TP(...) since start (started 12.00
minutes ago)`` (Faust measures from the consumer's start, not from when the partition arrived). Neither needs
anyone: the first goes to debug, the second to info with what it means. A real stall (``stopped fetching``,
``Broker stopped responding``) keeps its level; the worker's /health and lag metrics tell one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Demotion:
    logger: str
    #: Matched inside the record's message template (Faust's prefixes it with its service's name).
    text: str
    level: int
    note: str = ""
    #: An exception class name one of the record's arguments must have (empty: any).
    error: str = ""


DEMOTIONS = (
    Demotion("aiokafka.consumer.group_coordinator", "Group Coordinator Request failed", logging.DEBUG,
             error="GroupCoordinatorNotAvailableError"),
    Demotion("aiokafka.consumer.group_coordinator", "due to group error (%s), will rejoin", logging.INFO),
    # Every member is told so once per rebalance; it rejoins.
    Demotion("aiokafka.consumer.group_coordinator", "because it is rebalancing", logging.INFO),
    # A topic the worker just made has no leader for a moment; aiokafka asks again.
    Demotion("aiokafka.consumer.fetcher", "Failed fetch offsets from", logging.DEBUG,
             error="NotLeaderForPartitionError"),
    # A short-lived kafka-python client (the topic check at start) closing while its refresh is in flight.
    Demotion("kafka.cluster", "Metadata refresh: failed", logging.DEBUG, error="Cancelled"),
    Demotion("faust.transport.drivers.aiokafka", "has not sent fetch request for %r since start", logging.INFO,
             note=" [benign after a rebalance: counted from the consumer's start, not the partition's]"),
    Demotion("faust.transport.drivers.aiokafka", "has not received fetch response for %r since start",
             logging.INFO, note=" [benign after a rebalance: counted from the consumer's start, not the partition's]"),
)


class BenignLogs(logging.Filter):
    """On a logger: its records that match a demotion get the demotion's level (and note); a record below the
    logger's level is dropped, as it would not have been made at that level."""

    def __init__(self, demotions: tuple[Demotion, ...]) -> None:
        super().__init__()
        self.demotions = demotions

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.msg if isinstance(record.msg, str) else ""
        for d in self.demotions:
            if d.text not in msg or record.levelno <= d.level:
                continue
            if d.error and not any(d.error in {c.__name__ for c in type(arg).__mro__}
                                   for arg in (record.args if isinstance(record.args, tuple) else ())):
                continue
            record.levelno, record.levelname = d.level, logging.getLevelName(d.level)
            if d.note and d.note not in msg:
                head, sep, rest = msg.partition("\n")  # after the first line: Faust's message goes on for lines
                record.msg = head + d.note.replace("%", "%%") + sep + rest
            return logging.getLogger(record.name).isEnabledFor(d.level)
        return True


def install(demotions: tuple[Demotion, ...] = DEMOTIONS) -> BenignLogs:
    """Put the filter on each logger a demotion names (a logger's filters see its own records only)."""
    benign = BenignLogs(demotions)
    for name in sorted({d.logger for d in demotions}):
        logging.getLogger(name).addFilter(benign)
    return benign
