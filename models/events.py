"""The wire format: event records and their validation (see docs/events.md).

One Kafka message carries either one event (a JSON object) or a batch envelope
``{"v": 1, "kind": "batch", "events": [...]}`` whose events are validated one by one.
Validation is strict about what the detectors rely on (types, finite non-negative
durations, known phases) and lenient about the rest: unknown extra fields are kept.
Anything rejected comes back as a :class:`Rejected` with a reason, never as an exception
that could stop a worker.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Union

import orjson

WIRE_VERSION = 1
PHASES = frozenset({"warmup", "train", "eval", "checkpoint", "end"})
STEP_PHASES = PHASES - {"end"}
#: Longest duration accepted, seconds: a day. Longer values are clock or unit bugs.
MAX_DURATION = 86_400.0
#: Largest rank / step / sequence number accepted (beyond any real job, below float precision).
MAX_COUNTER = 2**53
MAX_NAME_LEN = 256
#: Messages larger than this are rejected before parsing.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
MAX_BATCH_EVENTS = 100_000


class InvalidEvent(ValueError):
    """An event that does not follow the wire format; ``str(exc)`` is the reason."""


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


Event = Union[StepEvent, CollectiveEvent, HeartbeatEvent, PhaseEvent]


@dataclass(frozen=True, slots=True)
class Rejected:
    """An event (or whole message) that failed validation, with why."""

    reason: str
    payload: Any


# -- field checks -------------------------------------------------------------------------


def _str(obj: dict, name: str, *, required: bool) -> str | None:
    value = obj.get(name)
    if value is None:
        if required:
            raise InvalidEvent(f"missing required field '{name}'")
        return None
    if not isinstance(value, str) or not value:
        raise InvalidEvent(f"'{name}' must be a non-empty string")
    if len(value) > MAX_NAME_LEN:
        raise InvalidEvent(f"'{name}' is longer than {MAX_NAME_LEN} characters")
    return value


def _int(obj: dict, name: str, *, required: bool) -> int | None:
    value = obj.get(name)
    if value is None:
        if required:
            raise InvalidEvent(f"missing required field '{name}'")
        return None
    # bool is an int subclass; a float like 3.0 is a sender bug worth accepting.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidEvent(f"'{name}' must be an integer")
    if isinstance(value, float):
        if not value.is_integer():
            raise InvalidEvent(f"'{name}' must be an integer")
        value = int(value)
    if value < 0 or value > MAX_COUNTER:
        raise InvalidEvent(f"'{name}' out of range: {value}")
    return value


def _num(obj: dict, name: str, *, required: bool, duration: bool = False) -> float | None:
    value = obj.get(name)
    if value is None:
        if required:
            raise InvalidEvent(f"missing required field '{name}'")
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidEvent(f"'{name}' must be a number")
    value = float(value)
    if not math.isfinite(value):
        raise InvalidEvent(f"'{name}' must be finite")
    if value < 0:
        raise InvalidEvent(f"'{name}' must not be negative")
    if duration and value > MAX_DURATION:
        raise InvalidEvent(f"'{name}' is absurd: {value} s")
    return value


def _phase(obj: dict, *, allowed: frozenset[str], required: bool, default: str | None) -> str | None:
    value = obj.get("phase")
    if value is None:
        if required:
            raise InvalidEvent("missing required field 'phase'")
        return default
    if value not in allowed:
        raise InvalidEvent(f"unknown phase {value!r} (expected one of {sorted(allowed)})")
    return value


def _extra(obj: dict, known: frozenset[str]) -> dict[str, Any]:
    if len(obj) <= len(known) and obj.keys() <= known:
        return {}
    return {k: v for k, v in obj.items() if k not in known}


_STEP_FIELDS = frozenset(
    "v kind job rank step ts step_time node gpu compute_time data_time comm_time group world_size "
    "tokens samples loss phase".split()
)
_COLLECTIVE_FIELDS = frozenset("v kind job rank seq op ts duration node step pg bytes start_ts".split())
_HEARTBEAT_FIELDS = frozenset("v kind job rank ts step node seq_started seq_completed phase".split())
_PHASE_FIELDS = frozenset("v kind job ts phase rank step".split())


def _parse_step(o: dict) -> StepEvent:
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
        extra=_extra(o, _STEP_FIELDS),
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
        extra=_extra(o, _HEARTBEAT_FIELDS),
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
    for item in items:
        try:
            events.append(parse_event(item))
        except InvalidEvent as exc:
            rejected.append(Rejected(str(exc), item))
    return events, rejected


def event_to_dict(event: Event) -> dict[str, Any]:
    """The wire form of an event (None fields left out, extra fields kept)."""
    out: dict[str, Any] = {"v": WIRE_VERSION, "kind": event.kind}
    for name in event.__dataclass_fields__:
        if name == "extra":
            continue
        value = getattr(event, name)
        if value is not None:
            out[name] = value
    out.update(event.extra)
    return out


def encode_events(events: list[dict[str, Any]]) -> bytes:
    """One message value for several wire-form events: a batch envelope (or the lone event)."""
    if len(events) == 1:
        return orjson.dumps(events[0])
    return orjson.dumps({"v": WIRE_VERSION, "kind": "batch", "events": events})
