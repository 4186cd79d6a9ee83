"""Column-wise decoding of batch envelopes (the worker's fast path): :class:`StepColumns`.

A batch envelope of a few hundred step events is the common message. Building and checking
one StepEvent per rank costs more than the detection itself, so the worker decodes such an
envelope field by field: one list per field (C-level ``map``), types checked per column and
ranges with numpy. Only envelopes whose every event is a plain, valid step event (no extra
fields, exact types) take this path; anything else goes through ``decode_message`` and
gets the same per-event results and rejection reasons as before.
"""

from __future__ import annotations

import itertools
import math
import operator

import orjson

from .deadletter import Rejected
from .events import _STEP_FIELDS, STEP_PHASES, Event, StepEvent, _decode_batch, _parse_step, parse_event
from .wire import InvalidEvent, MAX_BATCH_EVENTS, MAX_COUNTER, MAX_DURATION, MAX_MESSAGE_BYTES, MAX_NAME_LEN, WIRE_VERSION



class StepColumns:
    """The step events of one batch envelope, column by column (what ``DetectionEngine.process_batch`` reads).

    Lists, in message order; absent optional numbers are NaN (JSON has no NaN, so NaN means
    absent); ``phase`` is already defaulted to ``train``. ``events()`` gives the StepEvents
    ``decode_message`` returns for the same envelope.
    """

    __slots__ = ("items", "job", "rank", "step", "ts", "step_time", "compute_time", "data_time", "comm_time",
                 "tokens", "samples", "node", "gpu", "group", "world_size", "phase", "jobs", "extra", "_events",
                 "_arrays", "_raw")
    #: The per-row columns (``take`` gathers each: a column added to the slots is taken too).
    _COLUMNS = tuple(name for name in __slots__ if name not in ("items", "jobs", "extra", "_events", "_arrays", "_raw"))

    kind = "step"

    @classmethod
    def of(cls, events: list[StepEvent]) -> "StepColumns":
        """The columns of already validated step events (a lone event takes the batch road too).

        ``extra`` keeps each event's extra fields (None when no event has any).
        """
        c = cls()
        c.items = c._events = events
        c._arrays = {}
        c._raw = None
        if len(events) == 1:  # the common case (a message of one event): no loops
            e = events[0]
            c.job, c.rank, c.step, c.ts, c.step_time = [e.job], [e.rank], [e.step], [e.ts], [e.step_time]
            c.compute_time = [_nan(e.compute_time)]
            c.data_time = [_nan(e.data_time)]
            c.comm_time = [_nan(e.comm_time)]
            c.tokens = [_nan(e.tokens)]
            c.samples = [_nan(e.samples)]
            c.node, c.gpu, c.group, c.world_size, c.phase = [e.node], [e.gpu], [e.group], [e.world_size], [e.phase]
            c.jobs = {e.job}
            c.extra = [e.extra] if e.extra else None
            return c
        c.job = [e.job for e in events]
        c.jobs = set(c.job)
        c.rank = [e.rank for e in events]
        c.step = [e.step for e in events]
        c.ts = [e.ts for e in events]
        c.step_time = [e.step_time for e in events]
        for name in ("compute_time", "data_time", "comm_time", "tokens", "samples"):
            setattr(c, name, [_nan(getattr(e, name)) for e in events])
        c.node = [e.node for e in events]
        c.gpu = [e.gpu for e in events]
        c.group = [e.group for e in events]
        c.world_size = [e.world_size for e in events]
        c.phase = [e.phase for e in events]
        c.extra = [e.extra for e in events] if any(e.extra for e in events) else None
        return c

    def __len__(self) -> int:
        return len(self.rank)

    def take(self, rows: list[int]) -> "StepColumns":
        """Rows ``rows`` of this batch, in that order, as a batch of their own (each column gathered; the events
        too where they are made, or their parsed items)."""
        c = StepColumns()
        for name in self._COLUMNS:
            setattr(c, name, list(map(getattr(self, name).__getitem__, rows)))
        c.jobs = set(c.job)
        c.extra = None if self.extra is None else list(map(self.extra.__getitem__, rows))
        c._arrays, c._raw = {}, None
        c._events = None if self._events is None else list(map(self._events.__getitem__, rows))
        if self.items is not None:
            c.items = list(map(self.items.__getitem__, rows))
        else:  # (a decoder process's batch: its rows parsed here)
            c.items = c._events = list(map(self.events().__getitem__, rows))
        return c

    def array(self, name: str):
        """Number column ``name`` as a read-only float64 array (NaN: absent), made once per batch and shared by
        whoever needs it (the decoder keeps those it makes while checking ranges)."""
        a = self._arrays.get(name)
        if a is None:
            import numpy as np  # (as the decoder: numpy only where columns are used)

            a = self._arrays[name] = np.array(getattr(self, name), dtype=np.float64)
            a.flags.writeable = False
        return a

    def absent(self, name: str) -> bool:
        """Whether number column ``name`` is absent in every row (the decoder's column of ``math.nan`` itself; a
        reported value is never NaN: JSON has none), worked out once per batch."""
        key = ("absent", name)
        got = self._arrays.get(key)
        if got is None:
            values = getattr(self, name)
            # (list.count compares by identity first: only the absent marker's own NaN object counts)
            got = self._arrays[key] = type(values) is list and values.count(math.nan) == len(values)
        return got

    def ahead_of(self, arrivals, slack: float) -> bool:
        """Whether some row is stamped more than ``slack`` seconds after its own arrival (``arrivals``, one a row): the
        future-timestamp check of a replay's merged lines, one array comparison instead of a step per row."""
        if len(arrivals) < 16:
            return any(t > a + slack for t, a in zip(self.ts, arrivals))
        import numpy as np

        return bool((self.array("ts") > np.array(arrivals, dtype=np.float64) + slack).any())

    def events(self) -> list[StepEvent]:
        if self._events is None:
            if self.items is None:  # made in a decoder process (decode_plan.py): its messages parsed again
                self.items = [o for raw in self._raw for o in step_items_of(orjson.loads(raw))]
            self._events = [_parse_step(o) for o in self.items]
        return self._events

    def job_runs(self) -> list[tuple[str, int, int]]:
        """``(job, start, end)`` of each run of consecutive events of one job."""
        if len(self.jobs) == 1:
            return [(self.job[0], 0, len(self.job))]
        jobs = self.job
        # Where the job changes, found C-level (a fleet's merged lines change job every few rows); a loop per run only.
        starts = [0, *itertools.compress(range(1, len(jobs)), map(operator.ne, jobs, jobs[1:])), len(jobs)]
        return [(jobs[lo], lo, hi) for lo, hi in zip(starts, starts[1:])]


#: Step events merged into one column batch at most (``Pipeline.feed``). Merging amortises the per-call cost for
#: small messages; beyond about a thousand events a batch only gets slower (the decoded dicts of many
#: messages are alive at once: measured 1.5x slower per event at 36k than at 1k).
MAX_RUN_EVENTS = 1_024


def step_items_of(obj) -> list | tuple | None:
    """The event dicts of a parsed lone step event (a tuple of one) or batch envelope (its list), for merging
    into one column batch; None: not that kind of message. Every item is still validated by the column
    decoder, all or nothing."""
    if type(obj) is not dict:
        return None
    kind = obj.get("kind")
    if kind == "step":
        return (obj,)
    if kind == "batch" and obj.get("v") == WIRE_VERSION:
        items = obj.get("events")
        if type(items) is list and 0 < len(items) <= MAX_BATCH_EVENTS:
            return items
    return None


def step_job_names(items) -> set[str]:
    """The job names of a message's event dicts (what may open new jobs; anything else is not a name)."""
    return {j for i in items if type(i) is dict and type(j := i.get("job")) is str}


def _nan(value: float | None) -> float:
    return math.nan if value is None else value


_NONE = type(None)
_NUM_TYPES = frozenset({float, int})
_OPT_NUM_TYPES = frozenset({float, int, _NONE})
_OPT_INT_TYPES = frozenset({int, _NONE})
_FLOAT = frozenset({float})
_INT = frozenset({int})


def _types(values: list) -> set:
    kinds = list(map(type, values))
    if kinds and kinds.count(kinds[0]) == len(kinds):  # the common column, of one type: a third of a set's cost
        return {kinds[0]}
    return set(kinds)


def _names_ok(values) -> bool:
    return all(0 < len(v) <= MAX_NAME_LEN for v in values)


def _all_str(values) -> bool:
    return all(type(v) is str for v in values)


class _Ragged(Exception):
    """Some event lacks a key of the first one (``_columns``' exact mode): its keys are looked at after all."""


def _step_columns(items: list) -> StepColumns | None:
    """Columns of a batch's events when all are plain valid step events, else None (use the per-event path)."""
    n = len(items)
    if not n or _types(items) != {dict}:
        return None
    first = items[0]
    if list(map(len, items)).count(len(first)) == n and first.keys() <= _STEP_FIELDS:
        # Every event has as many keys as the first: the same ones if each of those is found in each event (a miss
        # raises _Ragged), without the union of every event's keys.
        try:
            return _columns(items, first.keys(), exact=True)
        except _Ragged:
            pass
    keys = set().union(*items)
    if not keys <= _STEP_FIELDS:
        return None  # extra fields are kept per event: the per-event path does that
    return _columns(items, keys, exact=False)


def _columns(items: list, keys, *, exact: bool) -> StepColumns | None:
    """``_step_columns`` of events whose keys are ``keys`` (``exact``: each event has them all, else _Ragged)."""
    from operator import itemgetter

    import numpy as np

    n = len(items)
    # The first event's own key objects: a parser's keys are one object each (orjson's key cache), so a lookup by
    # them is a pointer comparison, not a string comparison (about half the cost of a column).
    own = {k: k for k in items[0]}

    def col(name: str) -> list:
        key = own.get(name, name)
        try:
            return list(map(itemgetter(key), items))
        except KeyError:
            if exact:
                raise _Ragged from None
            return [o.get(key) for o in items]

    def optional(name: str) -> list | None:
        return col(name) if name in keys else None

    def floats(name: str, values: list, types: set, *, maximum: float) -> list[float] | None:
        """As floats (None -> NaN), or None if some value is out of [0, maximum] or infinite; the array is kept
        (``StepColumns.array``). A column of floats only is kept as it is (the same floats, not made again)."""
        a = np.array(values, dtype=np.float64)
        if (a < 0).any() or (a > maximum).any() or (maximum == math.inf and (a == math.inf).any()):
            return None
        a.flags.writeable = False
        c._arrays[name] = a
        return values if types == _FLOAT else a.tolist()

    def counters(values: list, types: set) -> bool:
        # (ints only, checked before: Python's min and max compare them exactly, without an int64 array)
        first = values[0]
        if values.count(first) == len(values):  # one value throughout (a run's step, its world size): ~10x less
            return first is None or 0 <= first <= MAX_COUNTER
        # (``types``: the column's, so a column of ints is not searched for a None)
        present = [v for v in values if v is not None] if _NONE in types else values
        return not present or (min(present) >= 0 and max(present) <= MAX_COUNTER)

    try:
        v, kind = col("v"), col("kind")
        if _types(v) != {int} or v.count(1) != n or kind.count("step") != n:
            return None
        c = StepColumns()
        c.items = items
        c._events = None
        c._arrays = {}
        c._raw = None
        c.extra = None  # events with extra fields take the per-event decoder
        c.job = col("job")
        # (the types of the distinct values are those of all: only equal values are merged; one job throughout, the
        # usual run, counted without hashing each row's own string object)
        c.jobs = {c.job[0]} if c.job.count(c.job[0]) == n else set(c.job)
        if not _all_str(c.jobs):
            return None
        c.rank, c.step = col("rank"), col("step")
        if (_types(c.rank) != {int} or _types(c.step) != {int} or not counters(c.rank, _INT)
                or not counters(c.step, _INT)):
            return None
        c.ts, c.step_time = col("ts"), col("step_time")
        ts_types, took_types = _types(c.ts), _types(c.step_time)
        if not ts_types <= _NUM_TYPES or not took_types <= _NUM_TYPES:
            return None
        c.ts = floats("ts", c.ts, ts_types, maximum=math.inf)
        c.step_time = floats("step_time", c.step_time, took_types, maximum=MAX_DURATION)
        if c.ts is None or c.step_time is None or not _names_ok(c.jobs):
            return None
        nan_column = [math.nan] * n
        for name, maximum in (("compute_time", MAX_DURATION), ("data_time", MAX_DURATION),
                              ("comm_time", MAX_DURATION), ("tokens", math.inf), ("samples", math.inf)):
            values = optional(name)
            if values is None:
                setattr(c, name, nan_column)
                continue
            types = _types(values)
            if not types <= _OPT_NUM_TYPES:
                return None
            values = floats(name, values, types, maximum=maximum)
            if values is None:
                return None
            setattr(c, name, values)
        none_column = [None] * n
        sizes_types = _OPT_INT_TYPES
        for name in ("gpu", "world_size"):
            values = optional(name)
            if values is not None:
                types = _types(values)
                if not types <= _OPT_INT_TYPES or not counters(values, types):
                    return None
                if name == "world_size":
                    sizes_types = types
            setattr(c, name, values or none_column)
        if c.world_size is not none_column and (
                any(map(operator.ge, c.rank, c.world_size)) if _NONE not in sizes_types
                else any(w is not None and r >= w for r, w in zip(c.rank, c.world_size))):
            return None
        c.node = optional("node") or none_column
        if c.node is not none_column:
            nodes = set(c.node)
            nodes.discard(None)
            if not _all_str(nodes) or not _names_ok(nodes):
                return None
        c.group = optional("group") or none_column
        if c.group is not none_column:
            types = _types(c.group)
            if not types <= {str, int, _NONE}:
                return None
            if int in types:
                c.group = [str(g) if type(g) is int else g for g in c.group]
            if not _names_ok(set(c.group) - {None}):
                return None
        loss = optional("loss")
        if loss is not None and not _types(loss) <= _OPT_NUM_TYPES:
            return None
        phase = optional("phase")
        if phase is None:
            c.phase = ["train"] * n
        else:
            if not set(phase) - {None} <= STEP_PHASES:  # (only strings equal a phase's name)
                return None
            c.phase = ["train" if p is None else p for p in phase] if None in phase else phase
        return c
    except (TypeError, ValueError, OverflowError):
        return None


def parse_value(raw) -> tuple[object, Rejected | None]:
    """A message value's JSON, parsed once: (the value, None), or (None, why it cannot be an event)."""
    if isinstance(raw, str):
        raw = raw.encode()
    if raw is None:
        return None, Rejected("empty message (null value)", None)
    if len(raw) > MAX_MESSAGE_BYTES:
        return None, Rejected(f"message of {len(raw)} bytes exceeds {MAX_MESSAGE_BYTES}", raw[:256])
    try:
        return orjson.loads(raw), None
    except orjson.JSONDecodeError as exc:
        return None, Rejected(f"malformed JSON: {exc}", raw)


def decode_value(obj, raw: bytes | None) -> tuple[list[Event] | StepColumns, list[Rejected]]:
    """``decode_message`` for an already parsed value (``raw``: its bytes, for the rejects of a bad envelope);
    a batch envelope of plain valid step events comes back as :class:`StepColumns`."""
    if type(obj) is dict and obj.get("kind") == "batch":
        if obj.get("v") == WIRE_VERSION and type(obj.get("events")) is list and len(obj["events"]) <= MAX_BATCH_EVENTS:
            cols = _step_columns(obj["events"])
            if cols is not None:
                return cols, []
        return _decode_batch(obj, raw)
    try:
        return [parse_event(obj)], []
    except InvalidEvent as exc:
        return [], [Rejected(str(exc), obj)]


def decode_message_columns(raw: bytes | str) -> tuple[list[Event] | StepColumns, list[Rejected]]:
    """``decode_message``, but a batch envelope of plain valid step events comes back as :class:`StepColumns`."""
    obj, bad = parse_value(raw)
    if bad is not None:
        return [], [bad]
    return decode_value(obj, raw.encode() if isinstance(raw, str) else raw)
