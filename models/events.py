"""The wire format: event records and their validation (see docs/events.md).

One Kafka message carries either one event (a JSON object) or a batch envelope
``{"v": 1, "kind": "batch", "events": [...]}`` whose events are validated one by one.
Validation is strict about what the detectors rely on (types, finite non-negative
durations, known phases) and lenient about the rest: unknown extra fields are kept.
Anything rejected comes back as a :class:`Rejected` with a reason, never as an exception
that could stop a worker.
"""

from __future__ import annotations

import base64
import math
import operator
import time
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
    #: Per-process-group sequence numbers ``((name, started, completed, ranks or None), ...)``, from
    #: ``pgs`` (or the older ``seqs``); None when the heartbeat carries neither.
    pgs: tuple[tuple[str, int, int, tuple[int, ...] | None], ...] | None = None
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


Event = Union[StepEvent, CollectiveEvent, HeartbeatEvent, PhaseEvent, StackEvent]


@dataclass(frozen=True, slots=True)
class Rejected:
    """An event (or whole message) that failed validation, with why."""

    reason: str
    payload: Any


def deadletter_record(rejected: Rejected, *, topic: str, partition: int | None, offset: int | None,
                      key: bytes | None, raw: bytes | None) -> bytes:
    """The dead-letter message (docs/events.md): the reason, where it came from, and the original bytes.

    Written by the worker and by the shard stage alike."""
    original = rejected.payload if rejected.payload is not None and not isinstance(rejected.payload, bytes) else None
    record = {
        "v": 1,
        "kind": "deadletter",
        "reason": rejected.reason,
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "key": key.decode("utf-8", "replace") if key else None,
        "ts": time.time(),
        # The whole message as sent, base64 so that invalid UTF-8 survives too.
        "value_b64": base64.b64encode(raw).decode() if raw is not None else None,
        # For a bad event inside a good batch: that event alone.
        "event": original,
    }
    return orjson.dumps(record, option=orjson.OPT_PASSTHROUGH_DATACLASS, default=str)


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
_HEARTBEAT_FIELDS = frozenset("v kind job rank ts step node seq_started seq_completed phase pgs seqs".split())
_STACK_FIELDS = frozenset("v kind job rank ts request_id threads node flight_recorder".split())
#: Bounds of a stack event (docs/events.md): longer lists are cut, not rejected.
MAX_STACK_THREADS = 8
MAX_STACK_FRAMES = 64
#: Most process groups read from one heartbeat.
MAX_HEARTBEAT_PGS = 1024
_PHASE_FIELDS = frozenset("v kind job ts phase rank step".split())


class _Slow(Exception):
    """The fast path met something it does not handle; the checked path decides (and says why)."""


_INF = math.inf


def _fast_duration(value: Any) -> float | None:
    if value is None:
        return None
    t = type(value)
    if t is float:
        if 0.0 <= value <= MAX_DURATION:
            return value
    elif t is int and 0 <= value <= MAX_DURATION:
        return float(value)
    raise _Slow


def _fast_number(value: Any) -> float | None:
    if value is None:
        return None
    t = type(value)
    if (t is float or t is int) and 0 <= value < _INF:
        return float(value)
    raise _Slow


def _fast_name(value: Any) -> str | None:
    if value is None or (type(value) is str and 0 < len(value) <= MAX_NAME_LEN):
        return value
    raise _Slow


def _fast_int(value: Any) -> int | None:
    if value is None or (type(value) is int and 0 <= value <= MAX_COUNTER):
        return value
    raise _Slow


def _parse_step_fast(o: dict) -> StepEvent:
    """The common, well-typed step event without per-field error reporting (same result as the
    checked path; anything unusual, e.g. ``3.0`` for an integer or a bad value, raises ``_Slow``)."""
    get = o.get
    job = get("job")
    rank = get("rank")
    step = get("step")
    ts = get("ts")
    if not (type(job) is str and 0 < len(job) <= MAX_NAME_LEN and type(rank) is int and 0 <= rank <= MAX_COUNTER
            and type(step) is int and 0 <= step <= MAX_COUNTER):
        raise _Slow
    if type(ts) is not float or not 0.0 <= ts < _INF:
        ts = _fast_number(ts)
        if ts is None:
            raise _Slow
    step_time = _fast_duration(get("step_time"))
    if step_time is None:
        raise _Slow
    world_size = _fast_int(get("world_size"))
    if world_size is not None and rank >= world_size:
        raise _Slow
    group = get("group")
    if group is not None:
        if type(group) is int:
            group = str(group)
        elif not (type(group) is str and 0 < len(group) <= MAX_NAME_LEN):
            raise _Slow
    loss = get("loss")
    if loss is not None:
        if type(loss) is not float and type(loss) is not int:
            raise _Slow
        loss = float(loss)
    phase = get("phase")
    if phase is None:
        phase = "train"
    elif type(phase) is not str or phase not in STEP_PHASES:
        raise _Slow
    return StepEvent(
        job=job, rank=rank, step=step, ts=ts, step_time=step_time,
        node=_fast_name(get("node")), gpu=_fast_int(get("gpu")),
        compute_time=_fast_duration(get("compute_time")), data_time=_fast_duration(get("data_time")),
        comm_time=_fast_duration(get("comm_time")), group=group, world_size=world_size,
        tokens=_fast_number(get("tokens")), samples=_fast_number(get("samples")), loss=loss, phase=phase,
        extra=_extra(o, _STEP_FIELDS),
    )


def _parse_step(o: dict) -> StepEvent:
    try:
        return _parse_step_fast(o)
    except _Slow:
        return _parse_step_checked(o)


def _parse_step_checked(o: dict) -> StepEvent:
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
        pgs=_pgs(o),
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
                ranks = tuple(_counter(r, f"{what}.ranks") for r in raw)
        out.append((name, started, completed, ranks))
    return tuple(out)


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
    if isinstance(event, HeartbeatEvent) and event.pgs is not None:
        out["pgs"] = {name: {"started": s, "completed": c, **({"ranks": list(r)} if r is not None else {})}
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


# -- node telemetry (issue 4) ---------------------------------------------------------------
#
# Keyed by ``node``, not by job: the node agent (producers/agent.py) samples every GPU
# (NVML) and every InfiniBand/RoCE port (sysfs) of its host. Counters are the raw
# cumulative values as read; the worker turns them into deltas and rates
# (models/telemetry.py), so a lost message loses no increments.


@dataclass(frozen=True, slots=True)
class GpuEvent:
    node: str
    ts: float
    gpu: int
    uuid: str | None = None
    pci_bus_id: str | None = None
    util: float | None = None  # percent of time a kernel ran
    mem_util: float | None = None
    sm_active: float | None = None  # percent, where the driver reports it
    mem_used: int | None = None  # bytes
    mem_total: int | None = None
    temp: float | None = None  # degrees C
    power: float | None = None  # watts
    power_limit: float | None = None
    sm_clock: float | None = None  # MHz
    sm_clock_max: float | None = None
    throttle: int | None = None  # NVML clock event (throttle) reason bitmask
    ecc_sbe: int | None = None  # cumulative corrected (single-bit) ECC errors
    ecc_dbe: int | None = None  # cumulative uncorrected (double-bit) ECC errors
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    nvlinks: tuple[dict[str, Any], ...] = ()
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    kind = "gpu"


@dataclass(frozen=True, slots=True)
class XidEvent:
    node: str
    ts: float
    gpu: int
    xid: int
    uuid: str | None = None
    message: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    kind = "xid"


@dataclass(frozen=True, slots=True)
class LinkEvent:
    node: str
    ts: float
    device: str  # e.g. mlx5_2
    port: int
    state: str | None = None  # ACTIVE, DOWN, INIT, ARMED, ...
    phys_state: str | None = None  # LinkUp, Polling, Disabled, ...
    rate: float | None = None  # Gb/s
    link_layer: str | None = None  # InfiniBand or Ethernet (RoCE)
    netdev: str | None = None
    counters: dict[str, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    kind = "link"


@dataclass(frozen=True, slots=True)
class TopologyEvent:
    node: str
    ts: float
    gpus: tuple[dict[str, Any], ...] = ()  # {"gpu": 0, "pci_bus_id": ..., "nics": ["mlx5_0"]}
    nics: tuple[dict[str, Any], ...] = ()  # {"device": "mlx5_0", "pci_bus_id": ..., "ports": [1]}
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    kind = "topology"


TelemetryEvent = Union[GpuEvent, XidEvent, LinkEvent, TopologyEvent, "HostEvent"]
TELEMETRY_KINDS = frozenset({"gpu", "xid", "link", "topology", "host"})
#: Most NVLinks per GPU, counters per port, and GPUs/NICs per topology event accepted.
MAX_NVLINKS = 64
MAX_COUNTERS = 256
MAX_TOPOLOGY_ITEMS = 1024

_GPU_FIELDS = frozenset(
    "v kind node ts gpu uuid pci_bus_id util mem_util sm_active mem_used mem_total temp power power_limit "
    "sm_clock sm_clock_max throttle ecc_sbe ecc_dbe pcie_gen pcie_gen_max pcie_width pcie_width_max "
    "nvlinks".split()
)
_XID_FIELDS = frozenset("v kind node ts gpu xid uuid message".split())
_LINK_FIELDS = frozenset("v kind node ts device port state phys_state rate link_layer netdev counters".split())
_TOPOLOGY_FIELDS = frozenset("v kind node ts gpus nics".split())
_NVLINK_INTS = ("tx_bytes", "rx_bytes", "crc_errors", "replay_errors", "recovery_errors")


def _list(obj: dict, name: str, limit: int) -> list:
    value = obj.get(name)
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidEvent(f"'{name}' must be a list")
    if len(value) > limit:
        raise InvalidEvent(f"'{name}' has more than {limit} items")
    for item in value:
        if not isinstance(item, dict):
            raise InvalidEvent(f"'{name}' items must be objects")
    return value


def _nvlink(item: dict) -> dict[str, Any]:
    out: dict[str, Any] = {"link": _int(item, "link", required=True)}
    up = item.get("up")
    if up is not None:
        if not isinstance(up, bool):
            raise InvalidEvent("nvlink 'up' must be true or false")
        out["up"] = up
    for name in _NVLINK_INTS:
        value = _int(item, name, required=False)
        if value is not None:
            out[name] = value
    return out


def _parse_gpu(o: dict) -> GpuEvent:
    return GpuEvent(
        node=_str(o, "node", required=True),
        ts=_num(o, "ts", required=True),
        gpu=_int(o, "gpu", required=True),
        uuid=_str(o, "uuid", required=False),
        pci_bus_id=_str(o, "pci_bus_id", required=False),
        util=_num(o, "util", required=False),
        mem_util=_num(o, "mem_util", required=False),
        sm_active=_num(o, "sm_active", required=False),
        mem_used=_int(o, "mem_used", required=False),
        mem_total=_int(o, "mem_total", required=False),
        temp=_num(o, "temp", required=False),
        power=_num(o, "power", required=False),
        power_limit=_num(o, "power_limit", required=False),
        sm_clock=_num(o, "sm_clock", required=False),
        sm_clock_max=_num(o, "sm_clock_max", required=False),
        throttle=_int(o, "throttle", required=False),
        ecc_sbe=_int(o, "ecc_sbe", required=False),
        ecc_dbe=_int(o, "ecc_dbe", required=False),
        pcie_gen=_int(o, "pcie_gen", required=False),
        pcie_gen_max=_int(o, "pcie_gen_max", required=False),
        pcie_width=_int(o, "pcie_width", required=False),
        pcie_width_max=_int(o, "pcie_width_max", required=False),
        nvlinks=tuple(_nvlink(item) for item in _list(o, "nvlinks", MAX_NVLINKS)),
        extra=_extra(o, _GPU_FIELDS),
    )


def _parse_xid(o: dict) -> XidEvent:
    message = o.get("message")
    if message is not None and not isinstance(message, str):
        raise InvalidEvent("'message' must be a string")
    return XidEvent(
        node=_str(o, "node", required=True),
        ts=_num(o, "ts", required=True),
        gpu=_int(o, "gpu", required=True),
        xid=_int(o, "xid", required=True),
        uuid=_str(o, "uuid", required=False),
        message=message[:1024] if message else None,
        extra=_extra(o, _XID_FIELDS),
    )


def _counters(o: dict) -> dict[str, int]:
    value = o.get("counters")
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidEvent("'counters' must be an object of name -> integer")
    if len(value) > MAX_COUNTERS:
        raise InvalidEvent(f"'counters' has more than {MAX_COUNTERS} entries")
    out: dict[str, int] = {}
    for name in value:
        if not isinstance(name, str) or not name or len(name) > MAX_NAME_LEN:
            raise InvalidEvent("counter names must be non-empty strings")
        count = value[name]
        # Counters are raw cumulative values: unsigned, up to 64 bits.
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count < 2**64:
            raise InvalidEvent(f"counter {name!r} must be a non-negative 64-bit integer")
        out[name] = count
    return out


def _parse_link(o: dict) -> LinkEvent:
    return LinkEvent(
        node=_str(o, "node", required=True),
        ts=_num(o, "ts", required=True),
        device=_str(o, "device", required=True),
        port=_int(o, "port", required=True),
        state=_str(o, "state", required=False),
        phys_state=_str(o, "phys_state", required=False),
        rate=_num(o, "rate", required=False),
        link_layer=_str(o, "link_layer", required=False),
        netdev=_str(o, "netdev", required=False),
        counters=_counters(o),
        extra=_extra(o, _LINK_FIELDS),
    )


def _topology_gpu(item: dict) -> dict[str, Any]:
    out: dict[str, Any] = {"gpu": _int(item, "gpu", required=True)}
    bus = _str(item, "pci_bus_id", required=False)
    if bus:
        out["pci_bus_id"] = bus
    nics = item.get("nics", [])
    if not isinstance(nics, list) or not all(isinstance(n, str) and n for n in nics):
        raise InvalidEvent("topology gpu 'nics' must be a list of device names")
    out["nics"] = nics[:64]
    return out


def _topology_nic(item: dict) -> dict[str, Any]:
    out: dict[str, Any] = {"device": _str(item, "device", required=True)}
    bus = _str(item, "pci_bus_id", required=False)
    if bus:
        out["pci_bus_id"] = bus
    ports = item.get("ports", [])
    if not isinstance(ports, list) or not all(isinstance(p, int) and not isinstance(p, bool) and p >= 0
                                              for p in ports):
        raise InvalidEvent("topology nic 'ports' must be a list of port numbers")
    out["ports"] = ports[:64]
    return out


def _parse_topology(o: dict) -> TopologyEvent:
    return TopologyEvent(
        node=_str(o, "node", required=True),
        ts=_num(o, "ts", required=True),
        gpus=tuple(_topology_gpu(item) for item in _list(o, "gpus", MAX_TOPOLOGY_ITEMS)),
        nics=tuple(_topology_nic(item) for item in _list(o, "nics", MAX_TOPOLOGY_ITEMS)),
        extra=_extra(o, _TOPOLOGY_FIELDS),
    )


_PARSERS.update({"gpu": _parse_gpu, "xid": _parse_xid, "link": _parse_link, "topology": _parse_topology})


# -- host signals (issue 17) -------------------------------------------------------------------
#
# One ``host`` event per agent sample (producers/procfs_host.py): PSI averages, the raw
# cumulative CPU jiffies, load, memory, OOM kills, per-disk and per-NIC counters.
# models/host.py turns the counters into rates.

HOST_CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
HOST_DISK_FIELDS = ("reads", "read_ms", "writes", "write_ms", "io_ms")
HOST_NETDEV_FIELDS = ("rx_dropped", "tx_dropped", "rx_errors", "tx_errors")
MAX_HOST_DEVICES = 256
_HOST_FIELDS = frozenset("v kind node ts psi cpu load1 mem_total mem_available swap_used oom_kills disks "
                         "netdevs".split())


@dataclass(frozen=True, slots=True)
class HostEvent:
    node: str
    ts: float
    psi: dict[str, dict[str, float]] | None = None  # {"io": {"some_avg10": %, "full_avg10": %}, ...}
    cpu: dict[str, int] | None = None  # raw cumulative jiffies of /proc/stat's cpu line
    load1: float | None = None
    mem_total: int | None = None  # bytes
    mem_available: int | None = None
    swap_used: int | None = None
    oom_kills: int | None = None  # cumulative, /proc/vmstat oom_kill
    disks: tuple[dict[str, Any], ...] = ()  # {"device", "reads", "read_ms", "writes", "write_ms", "io_ms"}
    netdevs: tuple[dict[str, Any], ...] = ()  # {"name", "rx_dropped", "tx_dropped", "rx_errors", "tx_errors"}
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    kind = "host"


def _uint(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**64:
        raise InvalidEvent(f"{what} must be a non-negative 64-bit integer")
    return value


def _host_psi(o: dict) -> dict[str, dict[str, float]] | None:
    value = o.get("psi")
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidEvent("'psi' must be an object")
    out: dict[str, dict[str, float]] = {}
    for resource in ("cpu", "io", "memory"):
        item = value.get(resource)
        if item is None:
            continue
        if not isinstance(item, dict):
            raise InvalidEvent(f"'psi.{resource}' must be an object")
        out[resource] = {}
        for name in ("some_avg10", "full_avg10"):
            number = _num(item, name, required=False)
            if number is not None:
                if number > 100:
                    raise InvalidEvent(f"'psi.{resource}.{name}' is a percentage")
                out[resource][name] = number
    return out or None


def _host_items(o: dict, name: str, key: str, fields: tuple[str, ...]) -> tuple[dict[str, Any], ...]:
    out = []
    for item in _list(o, name, MAX_HOST_DEVICES):
        entry: dict[str, Any] = {key: _str(item, key, required=True)}
        for f in fields:
            if item.get(f) is not None:
                entry[f] = _uint(item[f], f"{name} '{f}'")
        out.append(entry)
    return tuple(out)


def _parse_host(o: dict) -> HostEvent:
    cpu = o.get("cpu")
    if cpu is not None:
        if not isinstance(cpu, dict):
            raise InvalidEvent("'cpu' must be an object of jiffies")
        cpu = {name: _uint(cpu[name], f"cpu '{name}'") for name in HOST_CPU_FIELDS if cpu.get(name) is not None}
    return HostEvent(
        node=_str(o, "node", required=True),
        ts=_num(o, "ts", required=True),
        psi=_host_psi(o),
        cpu=cpu or None,
        load1=_num(o, "load1", required=False),
        mem_total=_int(o, "mem_total", required=False),
        mem_available=_int(o, "mem_available", required=False),
        swap_used=_int(o, "swap_used", required=False),
        oom_kills=_int(o, "oom_kills", required=False),
        disks=_host_items(o, "disks", "device", HOST_DISK_FIELDS),
        netdevs=_host_items(o, "netdevs", "name", HOST_NETDEV_FIELDS),
        extra=_extra(o, _HOST_FIELDS),
    )


_PARSERS["host"] = _parse_host
EVENT_KINDS = frozenset(_PARSERS)


# -- column-wise decoding of batch envelopes (the worker's fast path) ----------------------
#
# A batch envelope of a few hundred step events is the common message. Building and checking
# one StepEvent per rank costs more than the detection itself, so the worker decodes such an
# envelope field by field: one list per field (C-level ``map``), types checked per column and
# ranges with numpy. Only envelopes whose every event is a plain, valid step event (no extra
# fields, exact types) take this path; anything else goes through ``decode_message`` and
# gets the same per-event results and rejection reasons as before.


class StepColumns:
    """The step events of one batch envelope, column by column (what ``DetectionEngine.process_batch`` reads).

    Lists, in message order; absent optional numbers are NaN (JSON has no NaN, so NaN means
    absent); ``phase`` is already defaulted to ``train``. ``events()`` gives the StepEvents
    ``decode_message`` returns for the same envelope.
    """

    __slots__ = ("items", "job", "rank", "step", "ts", "step_time", "compute_time", "data_time", "comm_time",
                 "tokens", "samples", "node", "gpu", "group", "world_size", "phase", "jobs", "_events")

    kind = "step"

    def __len__(self) -> int:
        return len(self.items)

    def events(self) -> list[StepEvent]:
        if self._events is None:
            self._events = [_parse_step_fast(o) for o in self.items]
        return self._events

    def job_runs(self) -> list[tuple[str, int, int]]:
        """``(job, start, end)`` of each run of consecutive events of one job."""
        if len(self.jobs) == 1:
            return [(self.job[0], 0, len(self.items))]
        out, start, jobs = [], 0, self.job
        for i in range(1, len(jobs)):
            if jobs[i] != jobs[i - 1]:
                out.append((jobs[start], start, i))
                start = i
        out.append((jobs[start], start, len(jobs)))
        return out


_NONE = type(None)
_NUM_TYPES = frozenset({float, int})
_OPT_NUM_TYPES = frozenset({float, int, _NONE})
_OPT_INT_TYPES = frozenset({int, _NONE})


def _types(values: list) -> set:
    return set(map(type, values))


def _names_ok(values) -> bool:
    return all(0 < len(v) <= MAX_NAME_LEN for v in values)


def _step_columns(items: list) -> StepColumns | None:
    """Columns of a batch's events when all are plain valid step events, else None (use the per-event path)."""
    from operator import itemgetter

    import numpy as np

    n = len(items)
    if not n or _types(items) != {dict}:
        return None
    keys = set().union(*items)
    if not keys <= _STEP_FIELDS:
        return None  # extra fields are kept per event: the per-event path does that

    def col(name: str) -> list:
        try:
            return list(map(itemgetter(name), items))
        except KeyError:
            return [o.get(name) for o in items]

    def optional(name: str) -> list | None:
        return col(name) if name in keys else None

    def floats(values: list, *, maximum: float) -> list[float] | None:
        """As floats (None -> NaN), or None if some value is out of [0, maximum]."""
        a = np.array(values, dtype=np.float64)
        if (a < 0).any() or (a > maximum).any():
            return None
        return a.tolist()

    def counters(values: list) -> bool:
        present = [v for v in values if v is not None] if None in values else values
        if not present:
            return True
        try:
            a = np.array(present, dtype=np.int64)
        except OverflowError:
            return False
        return bool(a.min() >= 0 and a.max() <= MAX_COUNTER)

    try:
        v, kind = col("v"), col("kind")
        if _types(v) != {int} or v.count(1) != n or kind.count("step") != n:
            return None
        c = StepColumns()
        c.items = items
        c._events = None
        c.job = col("job")
        if _types(c.job) != {str}:
            return None
        c.jobs = set(c.job)
        c.rank, c.step = col("rank"), col("step")
        if _types(c.rank) != {int} or _types(c.step) != {int} or not counters(c.rank) or not counters(c.step):
            return None
        c.ts, c.step_time = col("ts"), col("step_time")
        if not _types(c.ts) <= _NUM_TYPES or not _types(c.step_time) <= _NUM_TYPES:
            return None
        c.ts = floats(c.ts, maximum=math.inf)
        c.step_time = floats(c.step_time, maximum=MAX_DURATION)
        if c.ts is None or c.step_time is None or math.inf in c.ts or not _names_ok(c.jobs):
            return None
        nan_column = [math.nan] * n
        for name, maximum in (("compute_time", MAX_DURATION), ("data_time", MAX_DURATION),
                              ("comm_time", MAX_DURATION), ("tokens", math.inf), ("samples", math.inf)):
            values = optional(name)
            if values is None:
                setattr(c, name, nan_column)
                continue
            if not _types(values) <= _OPT_NUM_TYPES:
                return None
            values = floats(values, maximum=maximum)
            if values is None or (maximum == math.inf and math.inf in values):
                return None
            setattr(c, name, values)
        none_column = [None] * n
        for name in ("gpu", "world_size"):
            values = optional(name)
            if values is not None and (not _types(values) <= _OPT_INT_TYPES or not counters(values)):
                return None
            setattr(c, name, values or none_column)
        if c.world_size is not none_column and (
                any(map(operator.ge, c.rank, c.world_size)) if None not in c.world_size
                else any(w is not None and r >= w for r, w in zip(c.rank, c.world_size))):
            return None
        c.node = optional("node") or none_column
        if c.node is not none_column and (not _types(c.node) <= {str, _NONE}
                                          or not _names_ok(set(c.node) - {None})):
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
            if not _types(phase) <= {str, _NONE} or not set(phase) - {None} <= STEP_PHASES:
                return None
            c.phase = ["train" if p is None else p for p in phase] if None in phase else phase
        return c
    except (TypeError, ValueError, OverflowError):
        return None


def decode_message_columns(raw: bytes | str) -> tuple[list[Event] | StepColumns, list[Rejected]]:
    """``decode_message``, but a batch envelope of plain valid step events comes back as :class:`StepColumns`."""
    if isinstance(raw, (bytes, bytearray)) and len(raw) <= MAX_MESSAGE_BYTES and raw[:1] == b"{":
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            obj = None
        if (isinstance(obj, dict) and obj.get("kind") == "batch" and obj.get("v") == WIRE_VERSION
                and type(obj.get("events")) is list and len(obj["events"]) <= MAX_BATCH_EVENTS):
            cols = _step_columns(obj["events"])
            if cols is not None:
                return cols, []
            return _decode_batch(obj, raw)
    return decode_message(raw)
