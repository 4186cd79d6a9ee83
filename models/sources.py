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
import operator
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, Union

import orjson

from .wire.deadletter import Rejected
from .wire.step_columns import parse_value
from .wire.wire import MAX_MESSAGE_BYTES

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
    own arrival); ``arrival`` is then the latest. ``values``: the messages' parsed values, in step with
    ``messages`` (bare values or ``Message``s; a recording's reads), and ``rejected`` why a message has none (None:
    every one has): ``Pipeline.feed_values``."""

    messages: Sequence[Any]
    arrival: float | None = None
    road: Road | None = None
    speaks_for: Callable | None = None
    reports: Callable | None = None
    parsed: bool = False
    plan: Any = None
    arrivals: Sequence[float] | None = None
    values: Sequence[Any] | None = None
    rejected: Sequence[Rejected | None] | None = None


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


def _unix_time(arrival) -> float | None:
    """A recorded ``_arrival`` if it is a Unix time (seconds), else None."""
    if type(arrival) not in (int, float) or not 0 < arrival < 1e11:
        return None
    return arrival


def _pop_arrival(obj: dict) -> float | None:
    return _unix_time(obj.pop("_arrival", None))


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


class RecordedBlock(NamedTuple):
    """Consecutive lines of one recording, parsed at once (``recorded_blocks``): each one JSON within the message size
    limit, with a float ``_arrival`` that is a Unix time, and not a config line. ``RecordingSource`` cuts its reads
    out of it by slices (a replay's common line costs no per-line object)."""

    #: The lines as read (each one its message's value, ``_arrival`` and all, as a ``RecordedLine``'s).
    lines: list[bytes]
    #: Each line's JSON less ``_arrival``.
    values: list
    arrivals: list[float]


def recorded_blocks(lines: list[bytes]) -> Iterator[RecordedBlock | RecordedLine]:
    """A block of recording lines (``stepwatch.recording.read_blocks``), parsed at once: runs of plain lines as
    ``RecordedBlock``s, any other line alone as its ``RecordedLine`` (``recorded``), in order: one that is not JSON or
    is over the message size limit (dead-lettered with its reason), has no Unix-time ``_arrival`` (or an int one), or
    may be a config line (replay applies those where they stand)."""
    if not lines:
        return
    try:
        if max(map(len, lines)) > MAX_MESSAGE_BYTES:
            raise ValueError
        values = list(map(orjson.loads, lines))  # (C-level: no Python frame per line)
        broken: dict[int, Rejected] = {}
    except ValueError:  # (orjson's JSONDecodeError too) a line to reject: each parsed alone, the others as usual
        values, broken = [], {}
        for n, raw in enumerate(lines):
            obj, bad = parse_value(raw)
            values.append(obj)
            if bad is not None:
                broken[n] = bad
    # (a value that is not an object has no arrival: it is odd, as a line whose arrival is not a float Unix time)
    arrivals = [v.pop("_arrival", None) if type(v) is dict else None for v in values]
    if (list(map(type, arrivals)).count(float) == len(arrivals) and 0.0 < min(arrivals) and max(arrivals) < 1e11
            and "config" not in map(dict.get, values, itertools.repeat("kind"))):
        odd = []  # the usual block (C-level checks: every value an object, as its arrival is a float)
    else:
        odd = [n for n, v, a in zip(range(len(values)), values, arrivals)
               if type(a) is not float or not 0.0 < a < 1e11 or v.get("kind") == "config"]
    start = 0
    for n in odd:
        if n > start:
            yield RecordedBlock(lines[start:n], values[start:n], arrivals[start:n])
        yield _recorded_line((_bare_message((lines[n], None, "", 0, None)), values[n], broken.get(n),
                              _unix_time(arrivals[n])))
        start = n + 1
    if start == 0:
        yield RecordedBlock(lines, values, arrivals)
    elif start < len(lines):
        yield RecordedBlock(lines[start:], values[start:], arrivals[start:])


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


#: The live timer ticks through a silence (no line arrives: every rank of a job torn down, a node lost, before the
#: relaunch); replay ticks through one of at most this long (seconds) as it would, then on the next line only (a
#: capture's gap of days would otherwise cost a tick a second of it).
GAP_TICK_SECONDS = 3_600.0


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
        # The group read next: its messages (``Message``s, or a block's lines as they are), their values and, once one
        # of them has none, why (``bads``, in step; None while every one has a value).
        msgs: list = []
        vals: list = []
        bads: list | None = None
        group_arrival: float | None = None
        arrivals: list[float] = []  # each grouped line's (lines with an arrival: never mixed with lines without)
        across = self.across_arrivals
        limit = self.group_lines

        def read() -> Read:
            many = arrivals and arrivals[0] != group_arrival or len(set(arrivals)) > 1
            return Read(msgs, max(arrivals) if many else group_arrival, parsed=True, values=vals, rejected=bads,
                        arrivals=arrivals if many else None)

        def reset() -> None:
            nonlocal msgs, vals, bads, arrivals
            msgs, vals, bads, arrivals = [], [], None, []

        marks: list[float] = []  # arrivals of other processes' lines since the last read (``Elsewhere``)
        elsewhere = float("-inf")  # the latest event time of other processes' lines: their part of the engine's clock

        def seen(arrival: float | None) -> None:
            nonlocal clock
            if marks:
                arrival = max(marks) if arrival is None else max(arrival, *marks)
                marks.clear()
            now = arrival if arrival is not None else max(self.clock(), elsewhere)
            clock = now if clock is None else max(clock, now)

        def tick_due() -> Tick | None:
            """The tick the clock has reached since the last one (the first read sets the first), or None."""
            nonlocal next_tick
            if next_tick is None:
                next_tick = clock + interval
            elif clock >= next_tick:
                next_tick = clock + interval
                return Tick(clock)
            return None

        def gap(bound: float | None) -> bool:
            """Whether a line (or another process's) that may move the clock to ``bound`` comes a whole interval or
            more past the next tick: the live timer ticked in the silence before it (``gap_ticks``)."""
            return next_tick is not None and bound is not None and bound >= next_tick + interval

        def gap_ticks(bound: float) -> Iterator[Tick]:
            """The ticks the live timer made in a silence before a line that moves the clock to ``bound`` (one an
            interval from the next tick on, for ``GAP_TICK_SECONDS`` at most): a job whose every rank fell silent is
            judged in it, not only once the next line (a relaunch's) is in. The line itself ticks as before."""
            nonlocal next_tick, clock
            stop = next_tick + GAP_TICK_SECONDS
            while bound >= next_tick + interval and next_tick < stop:
                clock = next_tick if clock is None else max(clock, next_tick)
                yield Tick(next_tick)
                next_tick += interval
            if bound >= next_tick + interval:  # past the cap: the line ticks at its own time, as before
                next_tick = bound

        def take(lines: list, values: list, stamps: list[float], lo: int, hi: int) -> None:
            """A block's lines ``lo:hi`` into the group read next."""
            nonlocal msgs, vals, arrivals, bads, group_arrival
            msgs += lines[lo:hi]
            vals += values[lo:hi]
            arrivals += stamps[lo:hi]
            if bads is not None:
                bads += [None] * (hi - lo)
            group_arrival = stamps[hi - 1]

        for msg in self.lines if across else _line_by_line(self.lines):
            if type(msg) is RecordedBlock:  # plain lines parsed at once: the reads cut out of it by slices, as below
                lines, values, stamps = msg
                if msgs and group_arrival is None:  # (lines without an arrival are never read with lines with one)
                    yield read()
                    seen(max(arrivals) if arrivals else group_arrival)
                    reset()
                i, n = 0, len(lines)
                while i < n:
                    room = max(1, limit - len(msgs))
                    end = min(n, i + room)
                    # The first line whose arrival reaches the next tick (each line's arrival is its bound, below).
                    cut = i if next_tick is None else next(itertools.compress(
                        range(i, end), map(functools.partial(operator.le, next_tick), stamps[i:end])), None)
                    if cut is not None and gap(stamps[cut]):  # a silence before that line: the lines before it, its ticks
                        if cut > i:
                            take(lines, values, stamps, i, cut)
                            i = cut
                        if msgs:
                            yield read()
                            seen(max(arrivals) if arrivals else group_arrival)
                            reset()
                        yield from gap_ticks(stamps[cut])
                        continue
                    if cut is None:
                        if end < i + room:  # the block ends before the group is full: no read yet
                            cut = n
                        else:
                            cut = end - 1  # the group is full at that line
                    taken = min(cut + 1, n)
                    take(lines, values, stamps, i, taken)
                    i = taken
                    if cut == n:
                        break
                    yield read()
                    seen(max(arrivals))
                    reset()
                    if (tick := tick_due()) is not None:
                        yield tick
                continue
            if type(msg) is Elsewhere:  # another process's line: the clock moves (and ticks fall) as with it here
                if gap(msg.at):  # a silence before it, as before a line of this process's (below)
                    if msgs:
                        yield read()
                        seen(max(arrivals) if arrivals else group_arrival)
                        reset()
                    yield from gap_ticks(msg.at)
                if msg.arrival:
                    marks.append(msg.at)
                elif msg.at is not None:
                    elsewhere = max(elsewhere, msg.at)
                if next_tick is not None and msg.at is not None and msg.at < next_tick:
                    continue
                own = None
                if msgs:
                    yield read()
                    own = max(arrivals) if arrivals else group_arrival
                    reset()
                seen(own)
                if (tick := tick_due()) is not None:
                    yield tick
                continue
            if callable(msg):  # e.g. recorded runtime settings: applied after every line before it
                if msgs:
                    yield read()
                    seen(max(arrivals) if arrivals else group_arrival)
                    reset()
                msg()
                continue
            message, value, bad, arrival = _recorded(msg)
            bound = arrival if arrival is not None else _latest_ts(value)
            if gap(bound):  # a silence before this line: the lines before it, then the live timer's ticks in it
                if msgs:
                    yield read()
                    seen(max(arrivals) if arrivals else group_arrival)
                    reset()
                yield from gap_ticks(bound)
            if msgs and arrival != group_arrival and (not across or arrival is None or group_arrival is None):
                yield read()
                seen(max(arrivals) if arrivals else group_arrival)
                reset()
            if bad is not None and bads is None:
                bads = [None] * len(msgs)
            msgs.append(message)
            vals.append(value)
            if bads is not None:
                bads.append(bad)
            if arrival is not None:
                arrivals.append(arrival)
            group_arrival = arrival
            # Lines are read in groups (the worker's column batches for runs of step lines: a recording of
            # single-event lines is otherwise a call chain per event), cut wherever the clock could reach the
            # next tick, so that the ticks fall where they would line by line: the clock only moves on to a
            # line's arrival, or to one of its event times, so a line under the bound cannot have moved it there.
            if next_tick is not None and bound is not None and bound < next_tick and len(msgs) < limit:
                continue
            yield read()
            seen(max(arrivals) if arrivals else arrival)
            reset()
            if (tick := tick_due()) is not None:
                yield tick
        if msgs:  # under the bound: no tick was due after any of them
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


def _line_by_line(lines: Iterable[Any]) -> Iterator[Any]:
    """The lines with each ``RecordedBlock`` taken apart into its lines (a read per arrival: ``across_arrivals``
    False)."""
    for line in lines:
        if type(line) is RecordedBlock:
            for raw, value, arrival in zip(*line):
                yield _recorded_line((_bare_message((raw, None, "", 0, None)), value, None, arrival))
        else:
            yield line
