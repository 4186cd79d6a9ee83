"""The wire format (see docs/events.md): job events, and the decoder of a message of any kind.

One Kafka message carries either one event (a JSON object) or a batch envelope
``{"v": 1, "kind": "batch", "events": [...]}`` whose events are validated one by one.
Validation is strict about what the detectors rely on (types, finite non-negative
durations, known phases) and lenient about the rest: unknown extra fields are kept.
Anything rejected comes back as a :class:`Rejected` with a reason, never as an exception
that could stop a worker. Node telemetry events are in models/wire/telemetry_events.py, the shared
field checks and limits in models/wire/wire.py, the column-wise decoder in models/wire/step_columns.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

import orjson

from .deadletter import Rejected
from .nccl_events import NCCL_PARSERS, NcclWindowEvent  # noqa: F401  (node agent, models/steps/inspector.py)
# Re-exported: users of the wire API (parse_event, decode_message) get every event class from here.
from .telemetry_events import (_TELEMETRY_PARSERS, GpuEvent, HostEvent, LinkEvent,  # noqa: F401
                               TopologyEvent, XidEvent)
from .wire import (MAX_BATCH_EVENTS, MAX_COUNTER, MAX_MESSAGE_BYTES, MAX_NAME_LEN,
                   WIRE_VERSION, InvalidEvent, _extra, _int, _num, _phase, _str)

PHASES = frozenset({"warmup", "train", "eval", "checkpoint", "end"})
STEP_PHASES = PHASES - {"end"}
#: Job-wide phases in which no training step is due (a marked checkpoint or evaluation).
PAUSE_PHASES = frozenset({"eval", "checkpoint"})


@dataclass(frozen=True, slots=True)
class StepEvent:
    job: str
    rank: int
    step: int
    ts: float
    step_time: float
    node: str | None = None
    gpu: int | None = None
    compute_time: float | None = None
    data_time: float | None = None
    comm_time: float | None = None
    group: str | None = None
    world_size: int | None = None
    tokens: float | None = None
    samples: float | None = None
    loss: float | None = None
    phase: str = "train"
    #: The rank's process incarnation (the monitor's process start, ms since the epoch): a higher one is a new
    #: process of the rank (a restart). None: not told (older producers); the hang rule then infers restarts.
    incarnation: int | None = None
    #: The job's total steps, where its monitor knows them (``max_steps``): the escalation ladder's horizon
    #: (models/oncall/ladder.py). None: not told.
    total_steps: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    kind = "step"


@dataclass(frozen=True, slots=True)
class CollectiveEvent:
    job: str
    rank: int
    seq: int
    op: str
    ts: float
    duration: float
    node: str | None = None
    step: int | None = None
    pg: str | None = None
    bytes: int | None = None
    start_ts: float | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    kind = "collective"


@dataclass(frozen=True, slots=True)
class HeartbeatEvent:
    job: str
    rank: int
    ts: float
    step: int
    node: str | None = None
    seq_started: int | None = None
    seq_completed: int | None = None
    phase: str | None = None
    #: Per-process-group sequence numbers ``((name, started, completed, ranks or None), ...)``, from
    #: ``pgs`` (or the older ``seqs``); None when the heartbeat carries neither.
    pgs: tuple[tuple[str, int, int, tuple[int, ...] | None], ...] | None = None
    #: ``((name, description), ...)`` of the groups in ``pgs`` that carry a ``desc`` (what torch knows of
    #: the group, e.g. its role: ``"tp"``); None when none does.
    pg_desc: tuple[tuple[str, str], ...] | None = None
    #: As ``StepEvent.incarnation``.
    incarnation: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    kind = "heartbeat"


@dataclass(frozen=True, slots=True)
class PhaseEvent:
    job: str
    ts: float
    phase: str
    rank: int | None = None
    step: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    kind = "phase"


@dataclass(frozen=True, slots=True)
class StackEvent:
    """A rank's answer to a stack request: its Python threads, training thread first, frames outermost
    first (``threads``: ``((name, ((file, line, function), ...)), ...)``)."""

    job: str
    rank: int
    ts: float
    threads: tuple[tuple[str, tuple[tuple[str, int, str], ...]], ...]
    request_id: str | None = None
    node: str | None = None
    flight_recorder: str | None = None  # path of the Flight Recorder dump this request triggered
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    kind = "stack"


Event = Union[StepEvent, CollectiveEvent, HeartbeatEvent, PhaseEvent, StackEvent, NcclWindowEvent]


_STEP_FIELDS = frozenset(
    "v kind job rank step ts step_time node gpu compute_time data_time comm_time group world_size "
    "tokens samples loss phase".split()
)
_COLLECTIVE_FIELDS = frozenset("v kind job rank seq op ts duration node step pg bytes start_ts".split())
_HEARTBEAT_FIELDS = frozenset("v kind job rank ts step node seq_started seq_completed phase pgs seqs incarnation".split())
_STACK_FIELDS = frozenset("v kind job rank ts request_id threads node flight_recorder".split())
#: Bounds of a stack event (docs/events.md): longer lists are cut, not rejected.
MAX_STACK_THREADS = 8
MAX_STACK_FRAMES = 64
#: Most process groups read from one heartbeat.
MAX_HEARTBEAT_PGS = 1024
#: Most ranks one ``pgs[...].ranks`` list may name (a group spans at most the job's world): beyond, the
#: heartbeat is dead-lettered with the reason (40 heartbeats of 2M ranks each held 0.8 GiB; issue 27).
MAX_PG_RANKS = 65_536
_PHASE_FIELDS = frozenset("v kind job ts phase rank step".split())


def _parse_step(o: dict) -> StepEvent:
    """The one validator of a step event (a batch envelope of plain step events is checked by columns,
    ``_step_columns``; anything it does not take comes here for the per-event reasons)."""
    rank = _int(o, "rank", required=True)
    world_size = _int(o, "world_size", required=False)
    if world_size is not None and rank >= world_size:
        raise InvalidEvent(f"rank {rank} is not below world_size {world_size}")
    loss = o.get("loss")
    if loss is not None and (isinstance(loss, bool) or not isinstance(loss, (int, float))):
        raise InvalidEvent("'loss' must be a number")
    return StepEvent(
        job=_str(o, "job", required=True),
        rank=rank,
        step=_int(o, "step", required=True),
        ts=_num(o, "ts", required=True),
        step_time=_num(o, "step_time", required=True, duration=True),
        node=_str(o, "node", required=False),
        gpu=_int(o, "gpu", required=False),
        compute_time=_num(o, "compute_time", required=False, duration=True),
        data_time=_num(o, "data_time", required=False, duration=True),
        comm_time=_num(o, "comm_time", required=False, duration=True),
        group=_group(o),
        world_size=world_size,
        tokens=_num(o, "tokens", required=False),
        samples=_num(o, "samples", required=False),
        loss=float(loss) if loss is not None else None,  # NaN loss is a training fact, kept
        phase=_phase(o, allowed=STEP_PHASES, required=False, default="train"),
        incarnation=_int(o, "incarnation", required=False),
        total_steps=_int(o, "total_steps", required=False),
        extra=_extra(o, _STEP_FIELDS | {"incarnation", "total_steps"}),
    )


def _group(o: dict) -> str | None:
    value = o.get("group")
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)  # pipeline stage numbers are a natural group id
    return _str(o, "group", required=False)


def _parse_collective(o: dict) -> CollectiveEvent:
    return CollectiveEvent(
        job=_str(o, "job", required=True),
        rank=_int(o, "rank", required=True),
        seq=_int(o, "seq", required=True),
        op=_str(o, "op", required=True),
        ts=_num(o, "ts", required=True),
        duration=_num(o, "duration", required=True, duration=True),
        node=_str(o, "node", required=False),
        step=_int(o, "step", required=False),
        pg=_str(o, "pg", required=False),
        bytes=_int(o, "bytes", required=False),
        start_ts=_num(o, "start_ts", required=False),
        extra=_extra(o, _COLLECTIVE_FIELDS),
    )


def _parse_heartbeat(o: dict) -> HeartbeatEvent:
    return HeartbeatEvent(
        job=_str(o, "job", required=True),
        rank=_int(o, "rank", required=True),
        ts=_num(o, "ts", required=True),
        step=_int(o, "step", required=True),
        node=_str(o, "node", required=False),
        seq_started=_int(o, "seq_started", required=False),
        seq_completed=_int(o, "seq_completed", required=False),
        phase=_phase(o, allowed=PHASES, required=False, default=None),
        pgs=_pgs(o),
        pg_desc=_pg_desc(o),
        incarnation=_int(o, "incarnation", required=False),
        extra=_extra(o, _HEARTBEAT_FIELDS),
    )


def _counter(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and not value.is_integer()) or not 0 <= value <= MAX_COUNTER:
        raise InvalidEvent(f"{what} must be a non-negative integer")
    return int(value)


def _pgs(o: dict) -> tuple | None:
    """``pgs: {name: {started, completed, ranks?}}``, or the older ``seqs: {name: [started, completed]}``."""
    pgs = o.get("pgs")
    legacy = pgs is None
    if legacy:
        pgs = o.get("seqs")
        if pgs is None:
            return None
    field_name = "seqs" if legacy else "pgs"
    if not isinstance(pgs, dict):
        raise InvalidEvent(f"'{field_name}' must be an object keyed by process group")
    if len(pgs) > MAX_HEARTBEAT_PGS:
        raise InvalidEvent(f"'{field_name}' has more than {MAX_HEARTBEAT_PGS} process groups")
    out = []
    for name, value in pgs.items():
        if not name or len(name) > MAX_NAME_LEN:
            raise InvalidEvent(f"'{field_name}' has an empty or too long group name")
        what = f"{field_name}[{name!r}]"
        ranks = None
        if legacy:
            if not isinstance(value, list) or len(value) != 2:
                raise InvalidEvent(f"{what} must be [started, completed]")
            started, completed = _counter(value[0], what), _counter(value[1], what)
        else:
            if not isinstance(value, dict):
                raise InvalidEvent(f"{what} must be an object with started and completed")
            started = _counter(value.get("started"), f"{what}.started")
            completed = _counter(value.get("completed"), f"{what}.completed")
            raw = value.get("ranks")
            if raw is not None:
                if not isinstance(raw, list):
                    raise InvalidEvent(f"{what}.ranks must be a list of ranks")
                if len(raw) > MAX_PG_RANKS:
                    raise InvalidEvent(f"{what}.ranks lists more than {MAX_PG_RANKS} ranks")
                ranks = tuple(_counter(r, f"{what}.ranks") for r in raw)
        out.append((name, started, completed, ranks))
    return tuple(out)


def _pg_desc(o: dict) -> tuple | None:
    """The ``desc`` of each group in ``pgs`` that has one (checked by ``_pgs`` first)."""
    pgs = o.get("pgs")
    if not isinstance(pgs, dict):
        return None
    out = []
    for name, value in pgs.items():
        desc = value.get("desc") if isinstance(value, dict) else None
        if desc is None:
            continue
        if not isinstance(desc, str) or not desc or len(desc) > MAX_NAME_LEN:
            raise InvalidEvent(f"pgs[{name!r}].desc must be a non-empty string of at most {MAX_NAME_LEN} characters")
        out.append((name, desc))
    return tuple(out) or None


def _frames(value: Any, what: str) -> tuple[tuple[str, int, str], ...]:
    if not isinstance(value, list):
        raise InvalidEvent(f"{what} must be a list of frames")
    out = []
    for frame in value[-MAX_STACK_FRAMES:]:  # too deep: keep the innermost, where it is stuck
        if not isinstance(frame, dict):
            raise InvalidEvent(f"{what} must hold objects with file, line, function")
        file, line, function = frame.get("file"), frame.get("line"), frame.get("function")
        if not isinstance(file, str) or not isinstance(function, str):
            raise InvalidEvent(f"{what}: file and function must be strings")
        out.append((file[-1024:], _counter(line if line is not None else 0, f"{what}.line"), function[:MAX_NAME_LEN]))
    return tuple(out)


def _parse_stack(o: dict) -> StackEvent:
    threads = o.get("threads")
    if not isinstance(threads, list):
        raise InvalidEvent("'threads' must be a list")
    parsed = []
    for i, thread in enumerate(threads[:MAX_STACK_THREADS]):
        if not isinstance(thread, dict):
            raise InvalidEvent("'threads' must hold objects with name and frames")
        name = thread.get("name")
        parsed.append((name[:MAX_NAME_LEN] if isinstance(name, str) else f"thread-{i}",
                       _frames(thread.get("frames"), f"threads[{i}].frames")))
    request_id = o.get("request_id")
    if request_id is not None and not isinstance(request_id, str):
        raise InvalidEvent("'request_id' must be a string")
    path = o.get("flight_recorder")
    return StackEvent(
        job=_str(o, "job", required=True),
        rank=_int(o, "rank", required=True),
        ts=_num(o, "ts", required=True),
        threads=tuple(parsed),
        request_id=request_id[:MAX_NAME_LEN] if request_id else None,
        node=_str(o, "node", required=False),
        flight_recorder=path[:4096] if isinstance(path, str) and path else None,
        extra=_extra(o, _STACK_FIELDS),
    )


def _parse_phase(o: dict) -> PhaseEvent:
    return PhaseEvent(
        job=_str(o, "job", required=True),
        ts=_num(o, "ts", required=True),
        phase=_phase(o, allowed=PHASES, required=True, default=None),
        rank=_int(o, "rank", required=False),
        step=_int(o, "step", required=False),
        extra=_extra(o, _PHASE_FIELDS),
    )


_PARSERS = {
    "step": _parse_step,
    "collective": _parse_collective,
    "heartbeat": _parse_heartbeat,
    "phase": _parse_phase,
    "stack": _parse_stack,
    **_TELEMETRY_PARSERS,
    **NCCL_PARSERS,
}
EVENT_KINDS = frozenset(_PARSERS)


def parse_event(obj: Any) -> Event:
    """Validate one decoded JSON value as an event; raise :class:`InvalidEvent` if it is not."""
    if not isinstance(obj, dict):
        raise InvalidEvent(f"event must be a JSON object, got {type(obj).__name__}")
    v = obj.get("v")
    if v != WIRE_VERSION or isinstance(v, bool):
        raise InvalidEvent(f"unsupported wire version v={v!r} (expected {WIRE_VERSION})")
    kind = obj.get("kind")
    parser = _PARSERS.get(kind) if isinstance(kind, str) else None
    if parser is None:
        raise InvalidEvent(f"unknown kind {kind!r}")
    return parser(obj)


def decode_message(raw: bytes | str) -> tuple[list[Event], list[Rejected]]:
    """Decode one Kafka message value into valid events and rejected parts.

    Never raises: a message that is not JSON, too large, or not an event becomes one
    :class:`Rejected`; inside a batch envelope each bad event is rejected on its own and
    the good ones are kept.
    """
    if isinstance(raw, str):
        raw = raw.encode()
    if raw is None:
        return [], [Rejected("empty message (null value)", None)]
    if len(raw) > MAX_MESSAGE_BYTES:
        return [], [Rejected(f"message of {len(raw)} bytes exceeds {MAX_MESSAGE_BYTES}", raw[:256])]
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return [], [Rejected(f"malformed JSON: {exc}", raw)]
    if isinstance(obj, dict) and obj.get("kind") == "batch":
        return _decode_batch(obj, raw)
    try:
        return [parse_event(obj)], []
    except InvalidEvent as exc:
        return [], [Rejected(str(exc), obj)]


def _decode_batch(obj: dict, raw: bytes) -> tuple[list[Event], list[Rejected]]:
    if obj.get("v") != WIRE_VERSION:
        return [], [Rejected(f"unsupported wire version v={obj.get('v')!r} (expected {WIRE_VERSION})", raw)]
    items = obj.get("events")
    if not isinstance(items, list):
        return [], [Rejected("batch envelope needs an 'events' list", raw)]
    if len(items) > MAX_BATCH_EVENTS:
        return [], [Rejected(f"batch of {len(items)} events exceeds {MAX_BATCH_EVENTS}", raw[:256])]
    events: list[Event] = []
    rejected: list[Rejected] = []
    for i, item in enumerate(items):
        try:
            events.append(parse_event(item))
        except InvalidEvent as exc:
            rejected.append(Rejected(str(exc), item, i))
    return events, rejected


def event_to_dict(event: Event) -> dict[str, Any]:
    """The wire form of an event (None fields left out, extra fields kept)."""
    out: dict[str, Any] = {"v": WIRE_VERSION, "kind": event.kind}
    for name in event.__dataclass_fields__:
        if name in ("extra", "pg_desc"):
            continue
        value = getattr(event, name)
        if value is not None:
            out[name] = value
    if isinstance(event, HeartbeatEvent) and event.pgs is not None:
        desc = dict(event.pg_desc or ())
        out["pgs"] = {name: {"started": s, "completed": c, **({"ranks": list(r)} if r is not None else {}),
                             **({"desc": desc[name]} if name in desc else {})}
                      for name, s, c, r in event.pgs}
    elif isinstance(event, StackEvent):
        out["threads"] = [{"name": name, "frames": [{"file": f, "line": ln, "function": fn} for f, ln, fn in frames]}
                          for name, frames in event.threads]
    out.update(event.extra)
    return out


def encode_events(events: list[dict[str, Any]]) -> bytes:
    """One message value for several wire-form events: a batch envelope (or the lone event)."""
    if len(events) == 1:
        return orjson.dumps(events[0])
    return orjson.dumps({"v": WIRE_VERSION, "kind": "batch", "events": events})

