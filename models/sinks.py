"""Where the pipeline's ``Outputs`` go: one small sink interface (as Bytewax's ``testing.py`` sinks).

A road is a source (models/sources.py: a topic's reads, a recording's lines and ticks, a list), the one
``Pipeline`` (``Pipeline.take`` of each item), and a sink:

- the worker's: ``streams.kafka_sink.KafkaSink``, an ``AsyncSink`` (it awaits the Kafka producer): the
  alerts topic (then the Alertmanager and action sinks), then the dead-letter topic;
- ``stepwatch replay``'s: alerts as JSON Lines, dead letters summed up (stepwatch/recording.py);
- restart recovery's: ``HeldBack``, which keeps nothing (what the rebuilt engine re-derives is
  reconciled with the alerts topic instead; rejects were dead-lettered the first time);
- the tests': ``CapturingSink``, which keeps everything in order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import IO, Any, Protocol

from .pipeline import DeadLetter, Outputs


class Sink(Protocol):
    """Takes each ``Outputs`` of a road, in order."""

    def write(self, out: Outputs) -> None: ...


class AsyncSink(Protocol):
    """``Sink`` for the live roads: ``write`` returns once the outputs are handed to the broker's client."""

    async def write(self, out: Outputs) -> None: ...


@dataclass(slots=True)
class CapturingSink:
    """Every alert and dead letter written, in order (tests)."""

    alerts: list = field(default_factory=list)
    deadletters: list[DeadLetter] = field(default_factory=list)

    def write(self, out: Outputs) -> None:
        self.alerts.extend(out.alerts)
        self.deadletters.extend(out.deadletters)


@dataclass(slots=True)
class HeldBack:
    """Outputs held back and dropped, counted (restart recovery)."""

    alerts: int = 0
    deadletters: int = 0

    def write(self, out: Outputs) -> None:
        self.alerts += len(out.alerts)
        self.deadletters += len(out.deadletters)


@dataclass(slots=True)
class JsonLinesSink:
    """Alerts as JSON Lines on ``stream`` (``Alert.to_json``); dead letters counted by rejected event, the
    first ``show`` of them reported on ``report`` (``stepwatch replay``)."""

    stream: IO[str]
    report: IO[str] | None = None
    show: int = 10
    #: An alert's line (default ``Alert.to_json``) and the report's text filter (default as is): the CLI
    #: passes terminal-safe ones (stepwatch/commands/common.py).
    line: Callable[[Any], str] | None = None
    text: Callable[[str], str] | None = None
    alerts: int = 0
    rejected: int = 0

    def write(self, out: Outputs) -> None:
        for alert in out.alerts:  # alerts first, as the worker sends them
            self.alerts += 1
            self.stream.write((self.line(alert) if self.line else alert.to_json().decode()) + "\n")
        for dead in out.deadletters:  # one per bad message; count its rejected events
            self.rejected += len(dead.rejects) or 1
            if self.report is not None and self.rejected <= self.show:
                msg = f"stepwatch replay: skipped ({dead.cause}): {dead.rejected.reason}"
                print(self.text(msg) if self.text else msg, file=self.report)


def drain(outputs: Iterable[Outputs], sink: Sink) -> Sink:
    """Write every ``Outputs`` of a run (e.g. ``run_recording``'s) to ``sink``; returns the sink."""
    for out in outputs:
        sink.write(out)
    return sink
