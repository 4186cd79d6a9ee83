"""One read's decoding, worked out where it is cheapest to do: :func:`plan_read` and :class:`ReadPlan`.

Decoding (parsing the JSON and checking every column) costs about as much as the detection itself.
A live worker under load gets reads of hundreds of messages; it hands each one's values to a decoder
process (streams/decoder.py), which runs :func:`plan_read`, and goes on detecting on the previous read
meanwhile: two cores instead of one. The plan says how ``Pipeline.feed`` would cut the read into runs,
with each run's :class:`~.step_columns.StepColumns` already made and packed for the trip back;
``Pipeline.feed_planned`` feeds the runs exactly as ``feed`` would have (tests/models/wire/test_decode_plan.py
compares both on clean, mixed and broken reads).

Pure and broker-free: the same function runs in the decoder process and in process. Whatever it cannot
settle without the engine is left to the worker: ``plan_read`` returns None for a read in which one
message could open more jobs than ``max_new_jobs`` (``Pipeline`` asks the engine which jobs are new),
and a message that is not plain step data is a one-message part (:data:`ONE`) the worker decodes itself
(heartbeats, collectives, anything to dead-letter: their own decoder gives the reasons and indexes).

Example:

    >>> import orjson
    >>> env = orjson.dumps({"v": 1, "kind": "batch", "events": [
    ...     {"v": 1, "kind": "step", "job": "j", "rank": r, "step": 1, "ts": 10.0, "step_time": 1.0}
    ...     for r in range(4)]})
    >>> plan = plan_read([env, b'{"v": 1, "kind": "heartbeat"}', env, env], max_new_jobs=256)
    >>> [(p.messages, p.columns is not None) for p in plan.parts]
    [(1, True), (1, False), (2, True)]
    >>> cols = plan.parts[2].unpack([env, env])
    >>> len(cols), cols.rank[:5], cols.ts[0]
    (8, [0, 1, 2, 3, 0], 10.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .step_columns import MAX_RUN_EVENTS, StepColumns, _step_columns, parse_value, step_items_of, step_job_names

#: A one-message part the worker decodes itself.
ONE = None

_FLOATS = ("ts", "step_time", "compute_time", "data_time", "comm_time", "tokens", "samples")
_OPTIONAL_FLOATS = _FLOATS[2:]
_NAMES = ("node", "group")  # optional names: None where absent


@dataclass(frozen=True, slots=True)
class Part:
    """``messages`` consecutive messages of the read: a run of step data and its packed columns
    (``columns``; None: the worker takes the messages apart itself, see ``Pipeline.feed_planned``), and
    each message's ``(events, index of its first event in its envelope or None for a lone event)``."""

    messages: int
    columns: tuple | None = None
    shapes: tuple[tuple[int, int | None], ...] = ()

    def unpack(self, values: list[bytes]) -> StepColumns:
        """The run's columns, as ``_step_columns`` made them in the decoder (``values``: the run's message
        values, parsed again only if a rare path needs the events one by one: ``StepColumns.events``)."""
        return _unpack(self.columns, values)


@dataclass(frozen=True, slots=True)
class ReadPlan:
    """How ``Pipeline.feed`` cuts one read (of one partition) into parts, in order."""

    parts: tuple[Part, ...]


def plan_read(values: list, max_new_jobs: int) -> ReadPlan | None:
    """The plan for one read's message values (``bytes`` or None), in order, on the events topic's road.

    None: a message could open more than ``max_new_jobs`` new jobs (whether they are new is the engine's
    to say: the worker feeds that read as it comes). Cuts as ``Pipeline.feed_parsed`` does: consecutive step
    messages, up to ``MAX_RUN_EVENTS`` events, are one run.
    """
    parts: list[Part] = []
    run: list[list | tuple] = []  # each message's step items
    items: list = []

    def close() -> None:
        if len(run) == 1:
            # A lone message goes its own way in the pipeline (``_feed_one``): an envelope decodes to
            # columns by itself; a lone step event is decoded one event at a time.
            found = run[0]
            cols = _step_columns(found) if type(found) is list else None
            parts.append(Part(1, _pack(cols), ((len(found), 0),)) if cols is not None else Part(1))
        else:
            cols = _step_columns(items)
            parts.append(Part(len(run), None if cols is None else _pack(cols),
                              tuple((1, None) if type(f) is tuple else (len(f), 0) for f in run)))

    for value in values:
        obj, bad = parse_value(value)
        found = step_items_of(obj) if bad is None else None
        if found is not None and len(found) > max_new_jobs and len(step_job_names(found)) > max_new_jobs:
            return None
        if found is None or (run and len(items) + len(found) > MAX_RUN_EVENTS):
            if run:
                close()
                run, items = [], []
            if found is None:
                parts.append(Part(1))
                continue
        run.append(found)
        items.extend(found)
    if run:
        close()
    return ReadPlan(tuple(parts))


def _pack(c: StepColumns | None) -> tuple | None:
    """A StepColumns as a small picklable tuple: numbers as arrays, names as (distinct names, codes)."""
    if c is None:
        return None
    import numpy as np

    arrays = c._arrays
    return (len(c.rank), list(c.jobs),
            _codes(c.job), np.array(c.rank, dtype=np.int64), np.array(c.step, dtype=np.int64),
            tuple(arrays.get(name) for name in _FLOATS),  # an optional column absent: None (NaN there)
            tuple(None if col.count(None) == len(col) else _codes(col) for col in (c.node, c.group)),
            c.gpu if any(g is not None for g in c.gpu) else None,
            c.world_size if any(w is not None for w in c.world_size) else None,
            _codes(c.phase))


def _codes(names: list) -> tuple:
    """(distinct values, each row's index into them): a column of a few distinct names, cheaply."""
    distinct: dict = {}
    codes = [distinct.setdefault(v, len(distinct)) for v in names]
    if len(distinct) == 1:
        return (list(distinct), len(names))
    import numpy as np

    return (list(distinct), np.array(codes, dtype=np.int32))


def _decode_names(packed: tuple) -> list:
    distinct, codes = packed
    if type(codes) is int:
        return [distinct[0]] * codes
    return list(map(distinct.__getitem__, codes.tolist()))


def _unpack(t: tuple, values: list) -> StepColumns:
    n, jobs, job, rank, step, floats, (node, group), gpu, world_size, phase = t
    c = StepColumns()
    c.items = None
    c._raw = values
    c._events = None
    c.extra = None
    c.jobs = set(jobs)
    c.job = _decode_names(job)
    c.rank = rank.tolist()
    c.step = step.tolist()
    c._arrays = {}
    nan_column = None
    for name, a in zip(_FLOATS, floats):
        if a is None:
            if nan_column is None:
                nan_column = [math.nan] * n
            setattr(c, name, nan_column)
        else:
            a.flags.writeable = False
            c._arrays[name] = a
            setattr(c, name, a.tolist())
    none_column = [None] * n
    c.node = none_column if node is None else _decode_names(node)
    c.group = none_column if group is None else _decode_names(group)
    c.gpu = none_column if gpu is None else gpu
    c.world_size = none_column if world_size is None else world_size
    c.phase = _decode_names(phase)
    return c
