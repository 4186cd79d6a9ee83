"""Where the pipeline's input comes from: one small source interface (as Bytewax's ``testing.py`` inputs).

A source is an iterable (``Source``) or an asynchronous iterable (``AsyncSource``) of items, each one
``Read`` (the messages of one read of a topic, in order, with when they arrived and the road of their
topic) or one ``Tick`` (run the time-driven rules at this time). ``Pipeline.take(item)`` turns each into
``Outputs`` (models/pipeline.py), which a sink publishes (models/sinks.py). The sources:

- the worker's events consumer (``streams.events_consumer``: one ``Read`` per ``getmany`` batch of a
  partition) or the Faust agent (``streams.worker.FaustSource``: one per ``take_events`` batch);
- the telemetry topic's feed (``streams.telemetry_feed.TelemetrySource``: one per drain of its thread's
  queue, on the telemetry topic's road);
- restart recovery's span of the events topic (``streams.recovery.SpanSource``);
- a recording (``RecordingSource``: ``stepwatch replay``, on the recording's own clock, ticks included);
- an in-memory list (``ListSource``: the tests).

So the worker, replay, recovery and the tests assemble the same pipeline from a source and a sink, and a
source is never read around the pipeline (``run`` and, for the live roads, ``drive`` are the loops).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, Union

from .wire.deadletter import Rejected
from .wire.step_columns import parse_value

if TYPE_CHECKING:
    from .pipeline import Outputs, Pipeline, Road


class Message(NamedTuple):
    """One message as read from a topic: its value and where it came from (for dead letters).

    Anything with these attributes will do (e.g. aiokafka's ``ConsumerRecord``: no copy on the hot path).
    """

    value: bytes | None
    key: bytes | None = None
    topic: str = ""
    partition: int = 0
    offset: int | None = None


@dataclass(frozen=True, slots=True)
class Read:
    """The messages of one read of a topic, in order (``Message``s, records with their attributes, or bare
    values), when they reached the worker (None: unknown, e.g. an old recording), and what their topic may
    carry (``road``; None: the events topic's). ``speaks_for``/``reports``: as ``Pipeline.feed``'s.
    ``parsed``: the messages are ``(message, value, rejected)`` triples parsed already (recordings).
    ``plan``: how the messages decode, worked out already (``models.wire.decode_plan``: the live worker's
    decoder process); None: the pipeline decodes them. ``arrivals``: each parsed message's own arrival (a
    recording's lines of different ``_arrival`` read as one: still merged into column batches, each row on its
    own arrival); ``arrival`` is then the latest."""

    messages: Sequence[Any]
    arrival: float | None = None
    road: Road | None = None
    speaks_for: Callable | None = None
    reports: Callable | None = None
    parsed: bool = False
    plan: Any = None
    arrivals: Sequence[float] | None = None


@dataclass(frozen=True, slots=True)
class Tick:
    """Run the time-driven rules at ``at`` (live: the wall clock; a recording: its own clock)."""

    at: float


Item = Union[Read, Tick]


class Source(Protocol):
    """The items of a road, in order; each is taken by the pipeline before the next is asked for (so a
    source may act on what the previous one did: a recording's clock, a consumer's offsets)."""

    def __iter__(self) -> Iterator[Item]: ...


class AsyncSource(Protocol):
    """``Source`` for the live roads (Kafka consumers): items come as they are read."""

    def __aiter__(self) -> AsyncIterator[Item]: ...


def run(source: Iterable[Item], pipeline: Pipeline) -> Iterator[Outputs]:
    """The outputs of each item of ``source`` through ``pipeline``, in order (``models.sinks.drain`` writes them)."""
    for item in source:
        yield pipeline.take(item)


async def drive(source: AsyncSource | Iterable[Item], pipeline: Pipeline, sink, *,
                on_error: Callable[[Item, Exception], None]) -> None:
    """The live road: each item of ``source`` through ``pipeline``, its outputs awaited into ``sink`` (an
    ``AsyncSink``), until the source ends or the task is cancelled. A failure of one item (the pipeline's or
    the sink's) goes to ``on_error`` (which logs and counts it) and the road goes on with the next item; the
    source is closed on the way out (a source holding a lock across its items releases it at once)."""
    items = aiter(source) if hasattr(source, "__aiter__") else _as_async(source)
    try:
        async for item in items:
            try:
                await sink.write(pipeline.take(item))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # never lose the road: on_error logs and counts it
                on_error(item, exc)
    finally:
        closing = getattr(items, "aclose", None)
        if closing is not None:
            await closing()


async def _as_async(items: Iterable[Item]) -> AsyncIterator[Item]:
    for item in items:
        yield item


@dataclass(frozen=True, slots=True)
class ListSource:
    """An in-memory list of messages (``Message``s or bare values), ``per_read`` of them a ``Read``, all arriving
    at ``arrival`` on ``road`` (tests); ``ticks``: times to tick at after the messages."""

    messages: Sequence[Any]
    arrival: float | None = None
    road: Road | None = None
    per_read: int = 1_000
    ticks: Sequence[float] = ()

    def __iter__(self) -> Iterator[Item]:
        for lo in range(0, len(self.messages), max(1, self.per_read)):
            yield Read(self.messages[lo:lo + self.per_read], self.arrival, self.road)
        for at in self.ticks:
            yield Tick(at)


# -- recordings -----------------------------------------------------------------------------------


def _message(msg) -> Message:
    """A bare value as a ``Message``; records with its attributes as they are."""
    return Message(msg) if msg is None or type(msg) is bytes else msg


def _pop_arrival(obj: dict) -> float | None:
    arrival = obj.pop("_arrival", None)
    if type(arrival) not in (int, float) or not 0 < arrival < 1e11:
        return None
    return arrival


#: ``Message(value)`` without the keyword defaults' Python-level ``__new__`` (once per recording line).
_bare_message = functools.partial(tuple.__new__, Message)


class RecordedLine(NamedTuple):
    """A recording line, parsed once (``recorded``): ``RecordingSource`` takes it as it is, so a line parsed
    before it reaches the pipeline (``stepwatch replay`` of several files, merged by time) is not parsed again."""

    message: Message
    #: The line's JSON less ``_arrival`` (None: not JSON; ``rejected`` says why).
    value: object
    rejected: Rejected | None
    #: Its ``_arrival`` (broker time), None when absent or not a Unix time.
    arrival: float | None


def _recorded(msg) -> tuple[Message, object, Rejected | None, float | None]:
    """A recording line, parsed once: the message, its value less ``_arrival``, why it has none, and the arrival
    (a ``RecordedLine`` as it is)."""
    if type(msg) is RecordedLine:
        return msg
    msg = _bare_message((msg, None, "", 0, None)) if type(msg) is bytes else _message(msg)
    obj, bad = parse_value(msg.value)
    arrival = _pop_arrival(obj) if type(obj) is dict and "_arrival" in obj else None
    return msg, obj, bad, arrival  # (a plain tuple: one a line, on replay's hot path)


def recorded(msg) -> RecordedLine:
    """A recording line (bytes, a ``Message``, or a ``RecordedLine`` already), parsed once."""
    return _recorded_line(_recorded(msg))


_recorded_line = functools.partial(tuple.__new__, RecordedLine)


def _latest_ts(obj) -> float | None:
    """The latest event time a parsed line states (a lone event's ``ts``, or the greatest of a batch's), an
    upper bound of where it can move the engine's clock; None: not known (the line is fed alone)."""
    if type(obj) is not dict:
        return None
    if obj.get("kind") != "batch":  # the common case: a lone event
        ts = obj.get("ts")
        return ts if type(ts) is float or type(ts) is int else None
    items = obj.get("events")
    if type(items) is not list and type(items) is not tuple:
        return None
    latest = None
    for item in items:
        ts = item.get("ts") if type(item) is dict else None
        if type(ts) is not float and type(ts) is not int:
            return None
        if latest is None or ts > latest:
            latest = ts
    return latest


class Elsewhere(NamedTuple):
    """A recording line another process feeds (``stepwatch replay --jobs``: the recording split by job): only its
    time, its ``_arrival`` (``arrival``) or else its latest event time (None: it states none), so that this
    process's clock, and so its ticks, move as one process's would."""

    at: float | None
    arrival: bool


@dataclass(slots=True)
class RecordingSource:
    """A recording's lines on its own clock: ``Read``s of its lines and the ``Tick``s the live worker's timer
    would have made (``models.pipeline.run_recording`` documents the clock, the drain and the grouping).

    ``clock()``: the pipeline's event clock (``engine.clock``), read after each read was taken: a line without
    ``_arrival`` moves the clock to its latest event time. A callable among ``lines`` is called where it
    stands, once every line before it is taken (replay's recorded runtime settings).
    """

    lines: Iterable[Any]
    clock: Callable[[], float]
    tick_interval: float
    drain: float = 0.0
    until: float | None = None
    #: Lines in one read at most (the pipeline merges runs of step lines into column batches itself).
    group_lines: int = 1_024
    #: Lines of different ``_arrival`` in one read (each keeps its own: ``Read.arrivals``); False: a read per
    #: arrival, as before (one line a read, and a call chain per event, for a recording of single-event lines).
    across_arrivals: bool = True

    def __iter__(self) -> Iterator[Item]:
        interval = self.tick_interval
        next_tick: float | None = None
        clock: float | None = None
        group: list[tuple[Message, object, Rejected | None]] = []
        group_arrival: float | None = None
        arrivals: list[float] = []  # each grouped line's (lines with an arrival: never mixed with lines without)
        across = self.across_arrivals

        def read() -> Read:
            many = arrivals and arrivals[0] != group_arrival or len(set(arrivals)) > 1
            return Read(group, max(arrivals) if many else group_arrival, parsed=True,
                        arrivals=tuple(arrivals) if many else None)

        marks: list[float] = []  # arrivals of other processes' lines since the last read (``Elsewhere``)
        elsewhere = float("-inf")  # the latest event time of other processes' lines: their part of the engine's clock

        def seen(arrival: float | None) -> None:
            nonlocal clock
            if marks:
                arrival = max(marks) if arrival is None else max(arrival, *marks)
                marks.clear()
            now = arrival if arrival is not None else max(self.clock(), elsewhere)
            clock = now if clock is None else max(clock, now)

        for msg in self.lines:
            if type(msg) is Elsewhere:  # another process's line: the clock moves (and ticks fall) as with it here
                if msg.arrival:
                    marks.append(msg.at)
                elif msg.at is not None:
                    elsewhere = max(elsewhere, msg.at)
                if next_tick is not None and msg.at is not None and msg.at < next_tick:
                    continue
                own = None
                if group:
                    yield read()
                    own = max(arrivals) if arrivals else group_arrival
                    group, arrivals = [], []
                seen(own)
                if next_tick is None:
                    next_tick = clock + interval
                elif clock >= next_tick:
                    yield Tick(clock)
                    next_tick = clock + interval
                continue
            if callable(msg):  # e.g. recorded runtime settings: applied after every line before it
                if group:
                    yield read()
                    seen(max(arrivals) if arrivals else group_arrival)
                    group, arrivals = [], []
                msg()
                continue
            line = _recorded(msg)
            arrival = line[3]
            if group and arrival != group_arrival and (not across or arrival is None or group_arrival is None):
                yield read()
                seen(max(arrivals) if arrivals else group_arrival)
                group, arrivals = [], []
            group.append(line[:3])
            if arrival is not None:
                arrivals.append(arrival)
            group_arrival = arrival
            # Lines are read in groups (the worker's column batches for runs of step lines: a recording of
            # single-event lines is otherwise a call chain per event), cut wherever the clock could reach the
            # next tick, so that the ticks fall where they would line by line: the clock only moves on to a
            # line's arrival, or to one of its event times, so a line under the bound cannot have moved it there.
            bound = arrival if arrival is not None else _latest_ts(line[1])
            if (next_tick is not None and bound is not None and bound < next_tick
                    and len(group) < self.group_lines):
                continue
            yield read()
            seen(max(arrivals) if arrivals else arrival)
            group, arrivals = [], []
            if next_tick is None:
                next_tick = clock + interval
            elif clock >= next_tick:
                yield Tick(clock)
                next_tick = clock + interval
        if group:  # under the bound: no tick was due after any of them
            yield read()
            seen(max(arrivals) if arrivals else group_arrival)
        if clock is None or next_tick is None:
            return
        end = max(clock + max(self.drain, 0.0), self.until if self.until is not None else clock)
        first, previous = next_tick, None
        for n in itertools.count():
            at = first + n * interval
            if at > end or (previous is not None and at <= previous):  # past the end, or too coarse to move on
                break
            yield Tick(at)
            previous = at
