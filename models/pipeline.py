"""The one road from "bytes arrived" to "publish these": ``Pipeline``.

Broker-free: it decodes and validates message values, dead-letters what does not decode (with
the reason), holds back events stamped too far in the future, feeds the rest to the
``DetectionEngine`` (column batches for runs of step messages), records status views, and
passes each alert through the record of what was already published (duplicates dropped,
re-derived ids aliased to the published ones). It returns ``Outputs``; publishing them is the
caller's job (a sink's, models/sinks.py). Every road is a source (models/sources.py) whose items
``Pipeline.take`` feeds: the aiokafka consumer and the Faust agent (streams/worker.py,
streams/events_consumer.py), the telemetry topic's feed (streams/telemetry_feed.py), restart
recovery (streams/recovery.py), ``stepwatch replay`` (:func:`run_recording`) and the tests.

Each message value is parsed once (``parse_value``). A ``Road`` says what its topic may carry: the
events topic every kind, the telemetry topic node telemetry only; an event that does not belong is
dead-lettered with the reason. Every rejected part of one message (undecodable, misplaced, stamped
too far ahead, or one a detector raised on) goes into that message's one dead letter, which
carries the original bytes once and the rejected events by index.

Live-only behaviour is explicit:

- ``arrival``: when a message reached the worker (live: the wall clock; replay: the
  recording's ``_arrival``; None: unknown). Only then are events checked against
  ``max_future_seconds`` and the job's clock offset learnt.
- ``speaks_for(alert)``: whether this worker publishes an alert (every worker sees every
  node; node alerts are the business of the owner of the node's events partition,
  ``streams.telemetry_feed``); None: all of them.
- ``metrics``: a ``streams.metrics.WorkerMetrics`` (or None) counting what passes.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import orjson

from .settings import PipelineSettings  # noqa: F401  (defined in a light module; re-exported here)
from .alerts import Alert
from .detection import CAPPED_MARK, DetectionEngine
from .wire.deadletter import Rejected, deadletter_message
from .wire.events import event_to_dict
from .wire.decode_plan import ReadPlan
from .wire.step_columns import (MAX_RUN_EVENTS, StepColumns, _step_columns, decode_value, parse_value,
                                 step_items_of, step_job_names)
from .wire.telemetry_columns import LinkColumns, link_columns, link_columns_of
from .wire.telemetry_events import TELEMETRY_KINDS
from .wire.wire import MAX_BATCH_EVENTS, MAX_MESSAGE_BYTES, WIRE_VERSION
from .published import PublishedAlerts
from .sources import Item, Message, Read, RecordingSource, Tick, _message, _pop_arrival  # noqa: F401  (Message: its former home)




log = logging.getLogger("stepwatch.pipeline")


@dataclass(frozen=True, slots=True)
class Road:
    """What one topic may carry: ``kinds`` of event (None: every kind). An event of another kind is
    dead-lettered with the reason, never dropped (e.g. a job's step event sent to the telemetry topic)."""

    topic: str
    kinds: frozenset[str] | None = None
    #: Why an event of another kind does not belong here (completed with its kind).
    elsewhere: str = ""

    def misplaced(self, kind: str) -> str | None:
        """The reason an event of ``kind`` is dead-lettered here, or None: it belongs."""
        if self.kinds is None or kind in self.kinds:
            return None
        return f"a {kind!r} event on the {self.topic} topic: {self.elsewhere}"


#: The events topic carries every kind: job events, and node telemetry a simulator sends with its job's
#: events (docs/events.md: processed too, by the worker that owns the partition).
EVENTS_ROAD = Road("events")
#: The telemetry topic carries node telemetry only (every worker reads all of it: job events there
#: would be processed by every worker).
TELEMETRY_ROAD = Road("telemetry", TELEMETRY_KINDS, "job events go to the events topic, keyed by job")


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One rejected message, or the rejected parts of one (``rejects``, in order; ``rejected``: the first),
    why (``cause`` of the first: decode, future, topic or detector) and its source."""

    rejected: Rejected
    cause: str
    message: Message
    rejects: tuple[Rejected, ...] = ()

    def record(self, max_bytes: int | None = None) -> bytes:
        """The dead-letter topic's message (docs/events.md): the original bytes once, each rejected part by index;
        truncated to ``max_bytes`` (models/wire/deadletter.py)."""
        m = self.message
        return deadletter_message(list(self.rejects or (self.rejected,)), cause=self.cause, topic=m.topic,
                                  partition=m.partition, offset=m.offset, key=m.key, raw=m.value, max_bytes=max_bytes)


@dataclass(slots=True)
class Outputs:
    """What to publish: alerts (already deduplicated and aliased) and dead letters."""

    alerts: list[Alert] = field(default_factory=list)
    deadletters: list[DeadLetter] = field(default_factory=list)

    def extend(self, other: "Outputs") -> "Outputs":
        self.alerts.extend(other.alerts)
        self.deadletters.extend(other.deadletters)
        return self

    def __bool__(self) -> bool:
        return bool(self.alerts or self.deadletters)


def step_items(raw) -> list | tuple | None:
    """The event dicts of a lone step event or a batch envelope, for merging into one column batch.

    None: not that kind of message (or not decodable): it goes alone through ``decode_message_columns``.
    Every item is still validated by the column decoder, all or nothing.
    """
    if type(raw) is not bytes or len(raw) > MAX_MESSAGE_BYTES or raw[:1] != b"{":
        return None
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return step_items_of(obj)


class _Rejects:
    """The rejected parts of one message, gathered into its one dead letter."""

    __slots__ = ("cause", "items")

    def __init__(self) -> None:
        self.cause = ""
        self.items: list[Rejected] = []

    def add(self, rejected: Rejected, cause: str) -> None:
        if not self.items:
            self.cause = cause
        self.items.append(rejected)


class Pipeline:
    """Messages in, alerts and dead letters out; see the module's docstring.

    engine: the detection core (a new one from ``settings`` if not given).
    recorder: a ``StatusRecorder`` to keep the status views (optional).
    published: what was already published (restart recovery fills it from the alerts topic).
    max_future_seconds: events stamped further ahead of their ``arrival`` are dead-lettered
        (default: ``settings.worker.max_future_seconds``); only checked when the arrival is known.
    speaks_for: ``alert -> bool``, whether this worker publishes the alert (None: all).
    metrics: counters to keep (``streams.metrics.WorkerMetrics``), or None.
    """

    def __init__(self, engine: DetectionEngine | None = None, *, settings=None, recorder=None,
                 published: PublishedAlerts | None = None, max_future_seconds: float | None = None,
                 speaks_for: Callable[[Alert], bool] | None = None, metrics=None) -> None:
        self.engine = engine or DetectionEngine(settings)
        self.recorder = recorder
        self.published = published if published is not None else PublishedAlerts()
        self.max_future_seconds = (self.engine.settings.worker.max_future_seconds if max_future_seconds is None
                                   else max_future_seconds)
        self.speaks_for = speaks_for
        self.metrics = metrics
        self.max_new_jobs = self.engine.settings.worker.max_new_jobs_per_message
        #: Whether node agents' envelopes of link samples go by columns (the engine's node rules take them so).
        self.link_columns = self.engine.telemetry.link_columns
        #: Which events partition each job came from, for ``forget``.
        self.job_partition: dict[str, int] = {}

    # -- input ----------------------------------------------------------------------------

    def feed(self, messages: Iterable, arrival: float | None = None, *, road: Road = EVENTS_ROAD,
             speaks_for: Callable[[Alert], bool] | None = None,
             reports: Callable[[Message], bool] | None = None) -> Outputs:
        """Messages of one read (e.g. one ``getmany`` of a partition), in order; each value is parsed once.

        Consecutive step messages of one partition are decoded as one column batch (up to
        ``MAX_RUN_EVENTS`` events); anything else goes one message at a time. Both give the
        same alerts and state (tests/models/steps/test_batch_path.py, tests/models/test_pipeline.py). ``messages``: ``Message``s
        (or records with the same attributes) or bare values.

        ``road``: what the messages' topic may carry (the events topic: everything; the telemetry topic:
        node telemetry). ``speaks_for``: for these messages' alerts, instead of the pipeline's own.
        ``reports(message)``: whether this worker publishes the message's dead letter (every worker reads
        the whole telemetry topic: one of them reports); None: yes.
        """
        msgs = list(map(_message, messages))
        values, rejected = _parsed_values(m.value for m in msgs)
        return self.feed_values(msgs, values, rejected, arrival, road=road, speaks_for=speaks_for, reports=reports)

    def feed_parsed(self, parsed: Iterable[tuple[Message, object, Rejected | None]], arrival: float | None = None,
                    *, road: Road = EVENTS_ROAD, speaks_for: Callable[[Alert], bool] | None = None,
                    reports: Callable[[Message], bool] | None = None,
                    arrivals: Sequence[float] | None = None) -> Outputs:
        """``feed_values`` for (message, its JSON value, or why it has none; ``models.wire.step_columns.parse_value``)
        triples."""
        msgs: list = []
        values: list = []
        rejected: list = []
        for msg, obj, bad in parsed:
            msgs.append(msg)
            values.append(obj)
            rejected.append(bad)
        return self.feed_values(msgs, values, rejected if rejected.count(None) != len(rejected) else None, arrival,
                                road=road, speaks_for=speaks_for, reports=reports, arrivals=arrivals)

    def feed_values(self, messages: Sequence, values: Sequence, rejected: Sequence[Rejected | None] | None = None,
                    arrival: float | None = None, *, road: Road = EVENTS_ROAD,
                    speaks_for: Callable[[Alert], bool] | None = None,
                    reports: Callable[[Message], bool] | None = None,
                    arrivals: Sequence[float] | None = None) -> Outputs:
        """``feed`` for messages whose values are parsed already: ``values[n]`` is ``messages[n]``'s JSON (a message
        ``Message``, a record with its attributes, or a bare value) and ``rejected[n]`` why it has none (None: every
        message has one). ``run_recording`` parses each line once, for its ``_arrival`` too, a block at a time.

        ``arrivals``: each message's own arrival instead of ``arrival`` (a recording's lines, each with its
        ``_arrival``): runs of step messages are still merged, each row keeping its message's arrival, so the
        same alerts and state as feeding each message alone at its arrival.

        A run is a slice of the messages; its per-message bookkeeping (shapes, rejects, ``Message``s of bare
        values) is made only when something in it must be dead-lettered."""
        out = Outputs()
        alerts: list[Alert] = []
        merge = road.kinds is None or "step" in road.kinds
        # A lone step event opens one job at most: merged without the new-jobs check while one may be opened.
        lone = merge and self.max_new_jobs >= 1
        partitions = _partitions(messages)  # None: all of one partition
        if lone and partitions is None and _all_lone_steps(values):  # (a replay's read of single-event lines)
            for start in range(0, len(values), MAX_RUN_EVENTS):  # (as the loop below cuts them)
                end = min(len(values), start + MAX_RUN_EVENTS)
                self._feed_slice(messages, values, start, end, values[start:end], False, arrival, arrivals, road,
                                 alerts, out)
            return self._outputs(out, alerts, speaks_for, reports)
        sizes = _envelope_sizes(values) if lone and partitions is None else None
        if sizes is not None and max(sizes) <= self.max_new_jobs:  # (a replay's read of batch envelopes)
            # Runs cut as the loop below cuts them (no envelope can open too many jobs); no step per message.
            start, count = 0, 0
            for n, size in enumerate(sizes):
                if count and count + size > MAX_RUN_EVENTS:
                    self._feed_slice(messages, values, start, n, None, True, arrival, arrivals, road, alerts, out,
                                     sizes=sizes)
                    start, count = n, 0
                count += size
            self._feed_slice(messages, values, start, len(values), None, True, arrival, arrivals, road, alerts, out,
                             sizes=sizes)
            return self._outputs(out, alerts, speaks_for, reports)
        items: list = []  # the current run's event dicts (a run: messages[start:n])
        start = 0
        batched = False  # the run has an envelope: its rows' arrivals repeat per event
        for n, obj in enumerate(values):
            if lone and type(obj) is dict and obj.get("kind") == "step":  # the common message: no other check
                if items and (len(items) >= MAX_RUN_EVENTS or (partitions is not None
                                                                 and partitions[n] != partitions[start])):
                    self._feed_slice(messages, values, start, n, items, batched, arrival, arrivals, road, alerts,
                                     out)
                    items = []
                if not items:
                    start, batched = n, False
                items.append(obj)
                continue
            bad = rejected[n] if rejected is not None else None
            found = step_items_of(obj) if merge and bad is None else None
            if found is not None and len(found) > self.max_new_jobs and self._opens_too_many(found):
                found = None  # one at a time: the events of jobs over the bound dead-lettered by index
            if found is None or (items and ((partitions is not None and partitions[n] != partitions[start])
                                            or len(items) + len(found) > MAX_RUN_EVENTS)):
                if items:
                    self._feed_slice(messages, values, start, n, items, batched, arrival, arrivals, road, alerts,
                                     out)
                    items = []
                if found is None:
                    self._feed_one(_message(messages[n]), obj, bad, arrival if arrivals is None else arrivals[n],
                                   road, alerts, out)
                    continue
            if not items:
                start, batched = n, False
            items.extend(found)
            batched = batched or type(found) is list
        if items:
            self._feed_slice(messages, values, start, len(values), items, batched, arrival, arrivals, road, alerts,
                             out)
        return self._outputs(out, alerts, speaks_for, reports)

    def _feed_slice(self, messages: Sequence, values: Sequence, start: int, end: int, items: list | None,
                    batched: bool, arrival: float | None, arrivals: Sequence[float] | None, road: Road,
                    alerts: list[Alert], out: Outputs, *, sizes: list[int] | None = None) -> None:
        """``feed_values``'s run ``messages[start:end]`` (``items``: their event dicts; ``batched``: some is an
        envelope) as one column batch, each row on its message's arrival if ``arrivals``, else on ``arrival``.
        ``sizes``: every message is a batch envelope of that many events (``items`` made here)."""
        run = values[start:end]
        if sizes is not None:
            items = list(itertools.chain.from_iterable(obj["events"] for obj in run))
            if arrivals is not None:
                arrival = list(itertools.chain.from_iterable(map(itertools.repeat, arrivals[start:end],
                                                                 sizes[start:end])))
        elif arrivals is not None:
            if batched:  # an envelope's events each on its arrival
                rows: list = []
                for at, obj in zip(arrivals[start:end], run):
                    rows += [at] * (1 if obj["kind"] == "step" else len(obj["events"]))
            else:
                rows = arrivals[start:end]
                if type(rows) is not list:
                    rows = list(rows)
            arrival = rows
        self._feed_run(messages[start:end], run, items, arrival, road, alerts, out)

    def feed_planned(self, messages: Sequence, plan: ReadPlan, arrival: float | None = None, *,
                     road: Road = EVENTS_ROAD, speaks_for: Callable[[Alert], bool] | None = None,
                     reports: Callable[[Message], bool] | None = None) -> Outputs:
        """``feed`` for a read whose decoding was planned already (``models.wire.decode_plan.plan_read``, in the
        live worker's decoder process): the same parts, columns and outputs as ``feed`` of the same messages.
        A part the plan left to the worker is parsed here: a message of other kinds (or one to dead-letter)
        when it comes, and a run's messages only when they must be taken apart one by one."""
        if road is not EVENTS_ROAD:
            raise ValueError("a decode plan is for the events topic's road")
        out = Outputs()
        alerts: list[Alert] = []
        messages = list(map(_message, messages))
        at = 0
        for part in plan.parts:
            msgs = messages[at:at + part.messages]
            at += part.messages
            if part.columns is None:
                if part.messages == 1:
                    self._feed_one(msgs[0], *parse_value(msgs[0].value), arrival, road, alerts, out)
                else:
                    self._feed_run(msgs, [parse_value(m.value)[0] for m in msgs], None, arrival, road, alerts, out)
                continue
            cols = part.unpack([m.value for m in msgs])
            if part.messages == 1:
                self._feed_decoded(msgs[0], part.shapes[0][1] is not None, cols, [], arrival, road,
                                   alerts, out)
            else:
                self._feed_run(msgs, [None] * len(msgs), None, arrival, road, alerts, out, cols=cols,
                               shapes=part.shapes)
        if at != len(messages):
            raise ValueError(f"a decode plan for {at} messages given {len(messages)}")
        return self._outputs(out, alerts, speaks_for, reports)

    def _outputs(self, out: Outputs, alerts: list[Alert], speaks_for, reports) -> Outputs:
        out.alerts = self.publishable(alerts, speaks_for=speaks_for)
        if reports is not None and out.deadletters:
            out.deadletters = [d for d in out.deadletters if reports(d.message)]
        if self.metrics is not None:
            for dead in out.deadletters:
                self.metrics.deadlettered.labels(dead.cause).inc()
        return out

    def take(self, item: Item) -> Outputs:
        """One item of a source (models/sources.py): a ``Read`` fed, a ``Tick`` run."""
        if type(item) is Tick:
            return self.tick(item.at)
        road = item.road or EVENTS_ROAD
        if item.plan is not None:
            return self.feed_planned(item.messages, item.plan, item.arrival, road=road, speaks_for=item.speaks_for,
                                     reports=item.reports)
        if item.values is not None:
            return self.feed_values(item.messages, item.values, item.rejected, item.arrival, road=road,
                                    speaks_for=item.speaks_for, reports=item.reports, arrivals=item.arrivals)
        if item.parsed:
            return self.feed_parsed(item.messages, item.arrival, road=road, speaks_for=item.speaks_for,
                                    reports=item.reports, arrivals=item.arrivals)
        return self.feed(item.messages, item.arrival, road=road, speaks_for=item.speaks_for, reports=item.reports)
    def _opens_too_many(self, items) -> bool:
        """Whether a message's event dicts name more new jobs than one message may open."""
        jobs = step_job_names(items)
        known = self.engine.jobs
        return len(jobs) > self.max_new_jobs and sum(1 for j in jobs if j not in known) > self.max_new_jobs

    def tick(self, now: float) -> Outputs:
        """Run the time-driven rules at ``now`` (live: the wall clock; replay: the recording's clock)."""
        started = time.perf_counter()
        try:
            alerts = self.engine.tick(now)
        except Exception as exc:  # counted and logged; the next tick runs the rules again
            log.exception("timer rules failed")
            self._failed("tick", exc)
            return Outputs()
        if self.metrics is not None:
            self.metrics.detection.labels("tick").observe(time.perf_counter() - started)
        if self.recorder is not None:
            self.recorder.prune(self.engine.jobs)  # the engine evicts idle and ended jobs
        return Outputs(self.publishable(alerts))

    def forget(self, partitions: set[int]) -> None:
        """Jobs of revoked partitions now belong to another worker: drop their state quietly."""
        for job in [j for j, p in self.job_partition.items() if p in partitions]:
            self.engine.jobs.pop(job, None)
            self.job_partition.pop(job, None)

    # -- output ---------------------------------------------------------------------------

    def publishable(self, alerts: Iterable[Alert], *, speaks_for: Callable[[Alert], bool] | None = None) -> list[Alert]:
        """The alerts to publish: under their published ids, without repeats, only those this worker speaks for.

        Each one returned is remembered as published.
        """
        out = []
        speaks = speaks_for or self.speaks_for
        for alert in alerts:
            if speaks is not None and not speaks(alert):
                continue
            alert = self.published.rewrite(alert)
            if self.published.is_duplicate(alert):
                continue  # already on the topic (e.g. re-derived after a restart)
            self.published.remember(alert)
            if self.metrics is not None:
                self.metrics.alert_published(alert)
            out.append(alert)
        return out

    # -- the two ways in ------------------------------------------------------------------

    def _feed_run(self, messages: Sequence, values: Sequence, items: list | None, arrival, road: Road,
                  alerts: list[Alert], out: Outputs, *, cols: StepColumns | None = None,
                  shapes: Sequence[tuple[int, int | None]] | None = None) -> None:
        """Consecutive step messages of one partition (``values``: their parsed values, None for one not parsed) as
        one column batch (``cols``/``shapes``: decoded already, by a decode plan; then the values are parsed here
        only if the batch must be taken apart). ``arrival``: a list is each row's own arrival."""
        if cols is None and items is not None:
            if len(messages) > 1 and self.link_columns and self._feed_link_run(messages, values, items, arrival, road,
                                                                                alerts, out):
                return  # node agents' envelopes of link samples: one column batch
            cols = _step_columns(items) if len(messages) > 1 else None
        rows = arrival if type(arrival) is list else None  # each row's arrival (``feed_values``'s ``arrivals``)
        if rows is not None:
            arrival = rows[0]
            if rows.count(arrival) == len(rows):  # one arrival after all: as any run (one C pass, mostly identities)
                rows = None
        if cols is None or (arrival is not None and (
                max(cols.ts) > arrival + self.max_future_seconds if rows is None
                else cols.ahead_of(rows, self.max_future_seconds))):
            # Something in it needs one message at a time (dead letters with coordinates); a lone message
            # too (its own decode keeps a lone step event on the events path). Each value is parsed already
            # (but for a planned run's).
            at = 0
            for msg, obj in zip(messages, values):
                msg = _message(msg)
                if obj is None:
                    obj, bad = parse_value(msg.value)
                else:
                    bad = None
                if rows is not None:  # the message's own arrival: its first row's
                    arrival = rows[at]
                    at += len(step_items_of(obj) or (None,))
                self._feed_one(msg, obj, bad, arrival, road, alerts, out)
            return
        m = self.metrics
        if m is not None:
            m.messages.inc(len(messages))
        started = time.perf_counter()
        alerts.extend(self._feed_columns(cols, _message(messages[0]).partition, arrival if rows is None else rows,
                                         messages, out, shapes if shapes is not None else values))
        if m is not None:
            m.detection.labels("events").observe(time.perf_counter() - started)

    def _feed_columns(self, cols: StepColumns, partition: int, arrival, messages: Sequence, out: Outputs,
                      shapes: Sequence, into: _Rejects | None = None) -> list[Alert]:
        """One column batch of ``messages``. What a state cap left out is dead-lettered by message: ``shapes``, each
        message's (events, index of its first event in its envelope or None for a lone event), or the messages'
        parsed values to work them out from (only then); ``into``: the one message's rejects to add to instead."""
        if self.metrics is not None:
            self.metrics.events.labels("step").inc(len(cols))
        for job in cols.jobs:
            self.job_partition[job] = partition
        try:
            if self.recorder is not None:
                self.recorder.observe_steps(cols, self.engine.layouts(cols))
            alerts = self.engine.process_batch(cols, arrival=arrival)
            refused = self.engine.take_refused()
            if refused:
                self._refused_rows(cols, refused, _shapes(shapes), messages, out, into)
            return alerts
        except Exception as exc:  # a bug must not stop the worker; keep the messages
            log.exception("processing a batch of %d events from %d messages failed", len(cols), len(messages))
            self._failed("events", exc)
            for msg in messages:
                self._deadletter(out, _message(msg), Rejected(f"detector error: {exc!r}", None), "detector")
            return []

    @staticmethod
    def _refused_rows(cols: StepColumns, refused: list[tuple[int, str]], shapes, messages: Sequence, out: Outputs,
                      into: _Rejects | None) -> None:
        """Rows of ``cols`` a state cap left out, dead-lettered by message (by index in the envelope), in message
        order (``into``: all into the one message's rejects)."""
        events = cols.events()
        starts = list(itertools.accumulate((n for n, _ in shapes), initial=0))
        found: dict[int, _Rejects] = {}
        for row, what in refused:
            k = bisect.bisect_right(starts, row) - 1
            first = shapes[k][1]
            index = None if first is None else first + row - starts[k]
            rejects = into if into is not None else found.setdefault(k, _Rejects())
            rejects.add(Rejected(_capped_reason(what), event_to_dict(events[row]), index), "capped")
        for k in sorted(found):
            rejects = found[k]
            out.deadletters.append(DeadLetter(rejects.items[0], rejects.cause, _message(messages[k]),
                                              tuple(rejects.items)))

    def _feed_one(self, msg: Message, obj, bad: Rejected | None, arrival: float | None, road: Road,
                  alerts: list[Alert], out: Outputs) -> None:
        """One message: decode, dead-letter what does not decode, does not belong on ``road`` or is stamped too
        far ahead (one dead letter for the message), detect the rest."""
        m = self.metrics
        if m is not None:
            m.messages.inc()
        if bad is not None:
            events, rejected = [], [bad]
        elif self.link_columns and (links := link_columns_of(obj)) is not None:
            events, rejected = links, []  # a node agent's usual envelope of link samples: by columns
        else:
            events, rejected = decode_value(obj, msg.value)
        is_batch = type(obj) is dict and obj.get("kind") == "batch"
        self._feed_decoded(msg, is_batch, events, rejected, arrival, road, alerts, out, counted=True)

    def _feed_decoded(self, msg: Message, is_batch: bool, events, rejected: list[Rejected],
                      arrival: float | None, road: Road, alerts: list[Alert], out: Outputs, *,
                      counted: bool = False) -> None:
        """``_feed_one`` once the message is decoded (``events``: its events or their columns; ``is_batch``: it
        is a batch envelope)."""
        m = self.metrics
        if m is not None and not counted:
            m.messages.inc()
        rejects = _Rejects()
        for r in rejected:
            if m is not None:
                m.decode_failures.inc()
            rejects.add(r, "decode")
        if rejected:
            log.warning("dead-lettered %d event(s) of %s[%s]@%s: %s", len(rejected), msg.topic, msg.partition,
                        msg.offset, rejected[0].reason)
        if events:
            started = time.perf_counter()
            too_far = arrival + self.max_future_seconds if arrival is not None else None
            if isinstance(events, StepColumns):
                if road.misplaced("step") is None and (too_far is None or max(events.ts) <= too_far) and not (
                        len(events.jobs) > self.max_new_jobs and self._opens_too_many(
                            [{"job": j} for j in events.jobs])):
                    first = 0 if is_batch else None
                    alerts.extend(self._feed_columns(events, msg.partition, arrival, [msg], out,
                                                     [(len(events), first)], into=rejects))
                    events = []
                else:
                    events = events.events()  # not all belong here: one by one, each index known
                    index = range(len(events))
            elif isinstance(events, LinkColumns):
                if road.misplaced("link") is None and (too_far is None or max(events.ts) <= too_far):
                    self._feed_links(events, [rejects], [0, len(events)], alerts)
                    events = []
                else:
                    events = events.events()  # not all belong here: one by one, each index known
                index = range(len(events)) if len(events) > 1 else (None,)
            elif rejected:  # the good events' places in the envelope, for the dead letter of any of them
                skip = {r.index for r in rejected}
                index = [i for i in range(len(events) + len(rejected)) if i not in skip]
            else:
                index = range(len(events)) if len(events) > 1 else (None,)
            engine = self.engine
            opened = 0  # new jobs this message opened
            for i, ev in enumerate(events):
                where = road.misplaced(ev.kind)
                if where is not None:
                    rejects.add(Rejected(where, event_to_dict(ev), index[i]), "topic")
                    continue
                if too_far is not None and ev.ts > too_far:
                    rejects.add(Rejected(f"timestamp {ev.ts:.0f} is {ev.ts - arrival:.0f} s ahead of the worker's "
                                         f"clock", event_to_dict(ev), index[i]), "future")
                    continue
                if m is not None:
                    m.events.labels(ev.kind).inc()
                job = getattr(ev, "job", None)  # node telemetry has none
                if job and job not in engine.jobs:
                    if opened >= self.max_new_jobs:
                        engine.capped_input["new_jobs_per_message"] += 1
                        rejects.add(Rejected(f"one message may open {self.max_new_jobs} new jobs at most "
                                             f"(STEPWATCH_WORKER_MAX_NEW_JOBS_PER_MESSAGE): job {job!r} left out",
                                             event_to_dict(ev), index[i]), "capped")
                        continue
                    opened += 1
                if job:
                    self.job_partition[job] = msg.partition
                try:  # the status views and the detectors alike: a bug in either is counted, the event kept
                    if self.recorder is not None:
                        self.recorder.observe(ev)
                    mark = engine.capped_mark(job)
                    alerts.extend(engine.process(ev, arrival=arrival))
                    after = engine.capped_mark(job)
                    if after != mark:  # a state cap left (part of) it out: dead-lettered as well as counted
                        what = ", ".join(w for w, a, b in zip(CAPPED_MARK, after, mark) if a > b)
                        rejects.add(Rejected(_capped_reason(what), event_to_dict(ev), index[i]), "capped")
                except Exception as exc:  # a bug must not stop the worker; keep the event
                    log.exception("processing a %s event failed", ev.kind)
                    self._failed("events", exc)
                    rejects.add(Rejected(f"detector error: {exc!r}", event_to_dict(ev), index[i]), "detector")
            if m is not None:
                m.detection.labels("events").observe(time.perf_counter() - started)
        if rejects.items:
            out.deadletters.append(DeadLetter(rejects.items[0], rejects.cause, msg, tuple(rejects.items)))

    def _feed_link_run(self, messages: Sequence, values: Sequence, items: list, arrival, road: Road,
                       alerts: list[Alert], out: Outputs) -> bool:
        """Consecutive envelopes of link samples (``messages``, their parsed ``values``, their samples ``items``) as one column batch, with the same
        alerts, state and dead letters as each envelope alone; False (nothing done): not all of them are plain link
        samples that belong on ``road`` and are not stamped too far ahead (each then goes alone, ``_feed_one``)."""
        if type(items[0]) is not dict or items[0].get("kind") != "link" or road.misplaced("link") is not None:
            return False
        cols = link_columns(items)
        if cols is None:
            return False
        slack = self.max_future_seconds
        if type(arrival) is list:  # each sample's own arrival (a replay's lines)
            if any(t > a + slack for t, a in zip(cols.ts, arrival)):
                return False
        elif arrival is not None and max(cols.ts) > arrival + slack:
            return False
        m = self.metrics
        if m is not None:
            m.messages.inc(len(messages))
        started = time.perf_counter()
        parts = [_Rejects() for _ in messages]
        starts = list(itertools.accumulate((len(obj["events"]) for obj in values), initial=0))
        self._feed_links(cols, parts, starts, alerts)
        for msg, rejects in zip(messages, parts):
            if rejects.items:
                out.deadletters.append(DeadLetter(rejects.items[0], rejects.cause, _message(msg),
                                                  tuple(rejects.items)))
        if m is not None:
            m.detection.labels("events").observe(time.perf_counter() - started)
        return True

    def _feed_links(self, cols: LinkColumns, parts: list[_Rejects], starts: list[int], alerts: list[Alert]) -> None:
        """Envelopes' link samples by columns (``DetectionEngine.process_batch``): the same alerts, state and dead
        letters (a sample a state cap left out, by its index in its envelope) as one sample at a time. ``parts``:
        each envelope's rejects; ``starts``: the row of each one's first sample (and the end)."""
        if self.metrics is not None:
            self.metrics.events.labels("link").inc(len(cols))
        try:
            alerts.extend(self.engine.process_batch(cols))
            refused = self.engine.take_refused_links()
        except Exception as exc:  # a bug must not stop the worker; keep the samples
            log.exception("processing %d link samples by columns failed", len(cols))
            self._failed("events", exc)
            refused = [(row, None) for row in range(len(cols))]
            reason = f"detector error: {exc!r}"
        for row, what in refused:
            k = bisect.bisect_right(starts, row) - 1
            first, size = starts[k], starts[k + 1] - starts[k]
            where = row - first if size > 1 else None
            if what is None:
                parts[k].add(Rejected(reason, event_to_dict(cols.event(row)), where), "detector")
            else:
                parts[k].add(Rejected(_capped_reason(what), event_to_dict(cols.event(row)), where), "capped")

    def _failed(self, stage: str, exc: BaseException) -> None:
        if self.metrics is not None:
            self.metrics.processing_failed(stage, exc)

    def _deadletter(self, out: Outputs, msg: Message, rejected: Rejected, cause: str) -> None:
        out.deadletters.append(DeadLetter(rejected, cause, msg, (rejected,)))


def _shapes(shapes: Sequence) -> Sequence[tuple[int, int | None]]:
    """Each message's (events, index of its first event in its envelope or None for a lone event): ``shapes`` as
    they are, or worked out from a run's parsed values (a lone step event or a batch envelope each)."""
    if not shapes or type(shapes[0]) is tuple:
        return shapes
    return [(1, None) if obj.get("kind") == "step" else (len(obj["events"]), 0) for obj in shapes]


def _all_lone_steps(values: Sequence) -> bool:
    """Whether every value is a lone step event (an object whose kind is ``step``), C-level."""
    try:
        kinds = list(map(dict.get, values, itertools.repeat("kind")))
    except TypeError:  # a value that is not an object
        return False
    return kinds.count("step") == len(kinds)


def _envelope_sizes(values: Sequence) -> list[int] | None:
    """Each value's events when every one is a batch envelope whose events are merged into a run (``step_items_of``:
    of the wire's version, a list of 1 to ``MAX_BATCH_EVENTS``), C-level; None: not all are."""
    if not values:
        return None
    try:
        kinds = list(map(dict.get, values, itertools.repeat("kind")))
        versions = list(map(dict.get, values, itertools.repeat("v")))
    except TypeError:  # a value that is not an object
        return None
    if kinds.count("batch") != len(kinds) or versions.count(WIRE_VERSION) != len(versions):
        return None
    events = list(map(dict.get, values, itertools.repeat("events")))
    if list(map(type, events)).count(list) != len(events):
        return None
    sizes = list(map(len, events))
    return sizes if min(sizes) > 0 and max(sizes) <= MAX_BATCH_EVENTS else None


def _partitions(messages: Sequence) -> list[int] | None:
    """Each message's partition, or None when all are of one (a recording's bare lines: the default's)."""
    if not messages or set(map(type, messages)) <= {bytes}:
        return None
    found = [0 if m is None or type(m) is bytes else m.partition for m in messages]
    return None if found.count(found[0]) == len(found) else found


def _parsed_values(raws: Iterable) -> tuple[list, list[Rejected | None] | None]:
    """Message values parsed (``parse_value``): each one's JSON, and why one has none (None: every one has)."""
    values: list = []
    rejected: list = []
    for raw in raws:
        obj, bad = parse_value(raw)
        values.append(obj)
        rejected.append(bad)
    return values, rejected if rejected.count(None) != len(rejected) else None


def _capped_reason(what: str) -> str:
    return f"over the state cap {what!r}: left out and counted (docs/security.md, Bounded state)"


def _message(msg) -> Message:
    """A bare value as a ``Message``; records with its attributes as they are."""
    return Message(msg) if msg is None or type(msg) is bytes else msg


# -- recordings -----------------------------------------------------------------------------------


def arrival_of(raw: bytes) -> tuple[bytes, float | None]:
    """A recording line without its ``"_arrival"`` (Unix seconds the message reached the broker), and that time."""
    if b'"_arrival"' not in raw:
        return raw, None
    obj, bad = parse_value(raw)
    if bad is not None or type(obj) is not dict:
        return raw, None
    arrival = _pop_arrival(obj)
    return orjson.dumps(obj), arrival


#: Recording lines fed to the pipeline in one call at most (it merges runs of step lines into column
#: batches of up to ``MAX_RUN_EVENTS`` events itself).
_GROUP_LINES = MAX_RUN_EVENTS


def run_recording(pipeline: Pipeline, messages: Iterable[Message | bytes], *, tick_interval: float | None = None,
                  drain: float = 0.0, until: float | None = None, across_arrivals: bool = True) -> Iterator[Outputs]:
    """Run a recording through ``pipeline`` on its own clock, yielding the outputs of each step.

    Each line is parsed once (its ``_arrival`` taken out of the parsed value). The clock is the latest
    arrival time seen (a line's ``_arrival``), else the latest event time; the timer rules run whenever
    it has moved on by ``tick_interval`` (default: the worker's), as the live worker's timer would.
    After the last message the clock goes on, a tick at a time, for ``drain`` more seconds or up to
    ``until``, so that time-driven rules (hangs) fire as they would have live. A recording keeps no topic
    (``stepwatch record`` merges the events and telemetry topics): every line takes the events topic's road,
    which carries every kind. A callable among ``messages`` is called where it stands, once every line
    before it is fed (replay's recorded runtime settings).

    Lines go to the pipeline in groups (its column batches for runs of step lines), cut wherever a tick
    could fall: the same alerts, dead letters and ticks as line by line. Lines of different ``_arrival`` go in
    one group, each on its own arrival (``across_arrivals``; False: a group per arrival, as before).

    It ends for any timestamp it accepts: the ticks are counted, not added up (at ``1e16`` a second is
    lost to float precision), and a clock where a tick would not move it on ends the drain.
    """
    return (pipeline.take(item) for item in RecordingSource(
        messages, clock=lambda: pipeline.engine.clock, drain=drain, until=until,
        tick_interval=tick_interval or pipeline.engine.settings.worker.tick_interval, group_lines=_GROUP_LINES,
        across_arrivals=across_arrivals))
