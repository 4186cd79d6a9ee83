"""Import per-rank step timings from CSV or Parquet files into the wire format (JSON Lines).

Two layouts are understood:

* **one row per rank and step** (``ColumnMap``): name the columns that hold the job, rank,
  step, time and durations; missing ones can be constants (``job``) or synthesized (``ts`` from
  the step number, or from the cumulated step times);
* **one row per operation** (``OpMap``, e.g. a Megatron profile): rows are grouped per
  (rank, step); ``compute_time`` is the sum of the compute operations' durations, ``comm_time``
  of the communication ones, and each collective operation also becomes a ``collective``
  event with its latency.

Presets describe the public traces in ``../shared/data`` (see its README):
``alibaba-pai`` (Alibaba PAI mini-batch times) and ``bytedance-straggler`` (ByteDance
StragglerAnalysis operation traces). CSV needs nothing beyond the standard library; Parquet
needs ``pyarrow`` (``pip install 'stepwatch[import]'``).

The output is what ``stepwatch replay`` and the worker read: one batch envelope per step (all
ranks of the step), or one event per line with ``batch=False``, in time order.
"""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from stepwatch.models.wire.events import parse_event

#: Start of the synthesized clock when a trace has no absolute times (2023-11-14, arbitrary, fixed).
DEFAULT_T0 = 1_700_000_000.0


class TraceImportError(ValueError):
    """The input cannot be imported as asked (missing column, unreadable file, ...)."""


@dataclass(frozen=True, kw_only=True)
class ColumnMap:
    """Which input column feeds which wire field, for tables with one row per rank and step."""

    rank: str
    step: str
    step_time: str | None = None
    job: str | None = None  # column; else the constant ``job_name``
    ts: str | None = None  # column of step-end Unix seconds; else synthesized
    compute_time: str | None = None
    data_time: str | None = None
    comm_time: str | None = None
    group: str | None = None
    node: str | None = None
    #: Columns copied as extra fields (kept by the wire format), wire name -> input column.
    extra: dict[str, str] = field(default_factory=dict)
    #: Multiply every duration by this (e.g. 0.001 for milliseconds).
    time_scale: float = 1.0
    #: Without a ``ts`` column: step-end time = t0 + step * step_period, or, when 0, t0 + the
    #: cumulated median step time of the steps so far.
    step_period: float = 0.0


@dataclass(frozen=True, kw_only=True)
class OpMap:
    """Tables with one row per recorded operation (grouped per rank and step)."""

    rank: str
    step: str
    op: str
    duration: str
    start: str | None = None  # operation start, seconds (relative to the step or absolute)
    group: str | None = None
    job: str | None = None
    compute_ops: frozenset[str] = frozenset()
    collective_ops: frozenset[str] = frozenset()
    comm_ops: frozenset[str] = frozenset()  # other communication (pipeline send/recv); in comm_time
    data_ops: frozenset[str] = frozenset()
    extra: dict[str, str] = field(default_factory=dict)
    time_scale: float = 1.0
    #: Start times restart at 0 every step (as in the ByteDance traces): lay steps end to end.
    relative_start: bool = True
    collectives: bool = True  # also emit ``collective`` events


PRESETS: dict[str, ColumnMap | OpMap] = {
    # Alibaba PAI mini-batch times: worker, gpu, time (sample index), batch_time_norm (0-1000 per job).
    # The normalised mini-batch time becomes step_time in thousandths (0-1 "s"); the clock is
    # synthesized as one second per sample index.
    "alibaba-pai": ColumnMap(rank="worker", step="time", step_time="batch_time_norm", time_scale=0.001,
                             step_period=1.0, extra={"gpu_share": "gpu"}),
    # ByteDance StragglerAnalysis: one row per operation; compute = forward + backward + optimizer,
    # group = pipeline stage, collectives = the data-parallel reduce-scatter / all-gather / all-reduces.
    "bytedance-straggler": OpMap(
        rank="rank", step="step", op="optype", duration="duration", start="start_ts", group="stage",
        compute_ops=frozenset({"forward-compute", "backward-compute", "optimizer"}),
        collective_ops=frozenset({"grads-reduce-scatter", "params-all-gather", "layernorm-grads-all-reduce",
                                  "embedding-grads-all-reduce"}),
        comm_ops=frozenset({"forward-send", "forward-recv", "backward-send", "backward-recv"}),
        extra={"dp_rank": "dp_rank"}),
}

_COLLECTIVE_NAMES = {"grads-reduce-scatter": "reduce_scatter", "params-all-gather": "all_gather",
                     "layernorm-grads-all-reduce": "all_reduce", "embedding-grads-all-reduce": "all_reduce"}


# -- reading ---------------------------------------------------------------------------------------


def read_table(path: str | Path) -> dict[str, list]:
    """Columns of a CSV (header row) or Parquet file, as lists (CSV values parsed as numbers when they are).
    Every error names the file."""
    try:
        return _read_table(Path(path))
    except UnicodeDecodeError as exc:
        raise TraceImportError(f"{path}: not a UTF-8 CSV file (byte {exc.start}: {exc.reason}); binary? "
                               "Parquet files end in .parquet") from None
    except csv.Error as exc:
        raise TraceImportError(f"{path}: not a CSV file ({exc})") from None
    except OSError as exc:
        raise TraceImportError(f"{path}: {exc.strerror or exc}") from None


def _read_table(path: Path) -> dict[str, list]:
    if not path.exists():
        raise TraceImportError(f"{path}: no such file")
    if path.suffix.lower() in (".parquet", ".pq"):
        try:
            import pyarrow.parquet as pq
        except ModuleNotFoundError:
            raise TraceImportError("reading Parquet needs pyarrow: pip install 'stepwatch[import]'") from None
        try:
            table = pq.read_table(path)
        except Exception as exc:  # pyarrow's ArrowInvalid and kin: one line naming the file
            raise TraceImportError(f"{path}: not a Parquet file ({str(exc).splitlines()[0] if str(exc) else exc})") from None
        return {name: table.column(name).to_pylist() for name in table.column_names}
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        try:
            header = next(reader)
        except StopIteration:
            raise TraceImportError(f"{path}: empty file") from None
        columns: list[list] = [[] for _ in header]
        for row in reader:
            if not row:
                continue
            for i, cell in enumerate(row[:len(header)]):
                columns[i].append(_number(cell))
            for i in range(len(row), len(header)):
                columns[i].append(None)
    names = [h.strip() or f"column{i}" for i, h in enumerate(header)]
    return dict(zip(names, columns))


def _number(cell: str) -> Any:
    cell = cell.strip()
    if cell == "":
        return None
    try:
        return int(cell)
    except ValueError:
        try:
            return float(cell)
        except ValueError:
            return cell


def _need(table: dict[str, list], name: str | None, what: str) -> list | None:
    if name is None:
        return None
    if name not in table:
        raise TraceImportError(f"no column {name!r} for {what} (columns: {', '.join(table)})")
    return table[name]


def _dur(value: Any, scale: float) -> float | None:
    if value is None:
        return None
    try:
        v = float(value) * scale
    except (TypeError, ValueError):
        return None
    return round(v, 9) if math.isfinite(v) and v >= 0 else None


# -- converting -------------------------------------------------------------------------------------


def rows_to_events(table: dict[str, list], mapping: ColumnMap, *, job_name: str,
                   t0: float = DEFAULT_T0) -> list[dict]:
    """Step events from a table with one row per rank and step (rows with no usable time are skipped)."""
    m = mapping
    n = len(next(iter(table.values()), []))
    ranks = _need(table, m.rank, "rank")
    steps = _need(table, m.step, "step")
    cols = {name: _need(table, getattr(m, name), name)
            for name in ("step_time", "compute_time", "data_time", "comm_time")}
    if cols["step_time"] is None and cols["compute_time"] is None:
        raise TraceImportError("map at least one of step_time and compute_time")
    jobs = _need(table, m.job, "job")
    ts_col = _need(table, m.ts, "ts")
    groups = _need(table, m.group, "group")
    nodes = _need(table, m.node, "node")
    extras = {k: _need(table, v, f"extra field {k}") for k, v in m.extra.items()}
    events = []
    for i in range(n):
        if ranks[i] is None or steps[i] is None:
            continue
        ev: dict[str, Any] = {"v": 1, "kind": "step", "job": str(jobs[i]) if jobs else job_name,
                              "rank": int(ranks[i]), "step": int(steps[i])}
        for name, col in cols.items():
            if col is not None and (v := _dur(col[i], m.time_scale)) is not None:
                ev[name] = v
        if "step_time" not in ev:
            if "compute_time" not in ev:
                continue
            ev["step_time"] = ev["compute_time"]  # nothing better known: the rank's own time
        if ts_col is not None:
            ev["ts"] = float(ts_col[i])
        if groups is not None and groups[i] is not None:
            ev["group"] = groups[i] if isinstance(groups[i], str) else int(groups[i])
        if nodes is not None and nodes[i] is not None:
            ev["node"] = str(nodes[i])
        for k, col in extras.items():
            if col[i] is not None:
                ev[k] = col[i]
        events.append(ev)
    if ts_col is None:
        _synthesize_ts(events, t0, m.step_period)
    return events


def _synthesize_ts(events: list[dict], t0: float, period: float) -> None:
    by_job_step: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for ev in events:
        by_job_step[(ev["job"], ev["step"])].append(ev)
    clock: dict[str, float] = {}
    for (job, step), evs in sorted(by_job_step.items()):
        if period > 0:
            end = t0 + step * period
        else:
            times = sorted(e["step_time"] for e in evs)
            end = clock.get(job, t0) + times[len(times) // 2]
            clock[job] = end
        for ev in evs:
            ev["ts"] = round(end, 6)


def ops_to_events(table: dict[str, list], mapping: OpMap, *, job_name: str, t0: float = DEFAULT_T0) -> list[dict]:
    """Step (and collective) events from a table with one row per operation."""
    m = mapping
    ranks = _need(table, m.rank, "rank")
    steps = _need(table, m.step, "step")
    ops = _need(table, m.op, "op")
    durs = _need(table, m.duration, "duration")
    starts = _need(table, m.start, "start")
    groups = _need(table, m.group, "group")
    jobs = _need(table, m.job, "job")
    extras = {k: _need(table, v, f"extra field {k}") for k, v in m.extra.items()}
    acc: dict[tuple[str, int, int], dict[str, Any]] = {}
    for i in range(len(ranks)):
        if ranks[i] is None or steps[i] is None or durs[i] is None:
            continue
        job = str(jobs[i]) if jobs else job_name
        key = (job, int(steps[i]), int(ranks[i]))
        a = acc.get(key)
        if a is None:
            a = acc[key] = {"compute": 0.0, "comm": 0.0, "data": 0.0, "first": math.inf, "last": -math.inf,
                            "colls": [], "group": groups[i] if groups else None,
                            "extra": {k: c[i] for k, c in extras.items() if c[i] is not None}}
        d = float(durs[i]) * m.time_scale
        op = str(ops[i])
        if op in m.compute_ops:
            a["compute"] += d
        elif op in m.collective_ops:
            a["comm"] += d
            a["colls"].append((op, d, float(starts[i]) * m.time_scale if starts else None))
        elif op in m.comm_ops:
            a["comm"] += d
        elif op in m.data_ops:
            a["data"] += d
        if starts is not None and starts[i] is not None:
            s = float(starts[i]) * m.time_scale
            a["first"] = min(a["first"], s)
            a["last"] = max(a["last"], s + d)
    # Lay the steps out on one clock: each step lasts as long as its longest rank.
    spans: dict[tuple[str, int], tuple[float, float]] = {}
    for (job, step, _), a in acc.items():
        lo, hi = spans.get((job, step), (math.inf, -math.inf))
        spans[(job, step)] = (min(lo, a["first"]), max(hi, a["last"]))
    offset: dict[tuple[str, int], float] = {}
    clock: dict[str, float] = {}
    for (job, step) in sorted(spans):
        lo, hi = spans[(job, step)]
        if m.relative_start or not math.isfinite(lo):
            start = clock.get(job, t0)
            length = hi - lo if math.isfinite(lo) else 0.0
            offset[(job, step)] = start - (lo if math.isfinite(lo) else 0.0)
            clock[job] = start + length
        else:
            offset[(job, step)] = 0.0
    events: list[dict] = []
    seq: dict[tuple[str, int], int] = defaultdict(int)
    for (job, step, rank), a in sorted(acc.items()):
        off = offset[(job, step)]
        lo, hi = spans[(job, step)]
        end = (a["last"] if math.isfinite(a["last"]) else hi) + off
        step_time = (a["last"] - a["first"]) if math.isfinite(a["first"]) else a["compute"] + a["comm"]
        ev: dict[str, Any] = {"v": 1, "kind": "step", "job": job, "rank": rank, "step": step,
                              "ts": round(end, 6), "step_time": round(max(step_time, 0.0), 6),
                              "compute_time": round(a["compute"], 6), "comm_time": round(a["comm"], 6)}
        if m.data_ops:
            ev["data_time"] = round(a["data"], 6)
        if a["group"] is not None:
            ev["group"] = a["group"] if isinstance(a["group"], str) else int(a["group"])
        ev.update(a["extra"])
        events.append(ev)
        if m.collectives:
            for op, d, s in sorted(a["colls"], key=lambda c: (c[2] is None, c[2])):
                seq[(job, rank)] += 1
                c: dict[str, Any] = {"v": 1, "kind": "collective", "job": job, "rank": rank,
                                     "seq": seq[(job, rank)], "op": _COLLECTIVE_NAMES.get(op, op.replace("-", "_")),
                                     "duration": round(d, 6), "step": step, "pg": op}
                if s is not None:
                    c["start_ts"] = round(s + off, 6)
                    c["ts"] = round(s + off + d, 6)
                else:
                    c["ts"] = ev["ts"]
                events.append(c)
    return events


def convert(paths: Iterable[str | Path], mapping: ColumnMap | OpMap, *, job: str | None = None,
            t0: float = DEFAULT_T0) -> list[dict]:
    """Events of every input file (job id: ``job``, else the file name without extension), time-sorted."""
    events: list[dict] = []
    for path in paths:
        table = read_table(path)
        name = job or Path(path).name.split(".")[0]
        if isinstance(mapping, OpMap):
            events.extend(ops_to_events(table, mapping, job_name=name, t0=t0))
        else:
            events.extend(rows_to_events(table, mapping, job_name=name, t0=t0))
    events.sort(key=lambda e: (e["ts"], e["job"], e.get("step", 0), e["kind"] != "step", e["rank"]))
    return events


def validate(events: Iterable[dict]) -> int:
    """Check every event against the wire format; returns how many there were."""
    n = 0
    for ev in events:
        parse_event(ev)  # raises InvalidEvent with the reason
        n += 1
    return n


def write_jsonl(events: list[dict], out, *, batch: bool = True) -> tuple[int, int]:
    """Write events as JSON Lines to a binary stream: one envelope per (job, step) or one per line.

    Returns (events, lines)."""
    lines = 0
    if not batch:
        for ev in events:
            out.write(orjson.dumps(ev) + b"\n")
            lines += 1
        return len(events), lines
    for group in _runs(events):
        out.write(orjson.dumps(group[0] if len(group) == 1 else {"v": 1, "kind": "batch", "events": group}) + b"\n")
        lines += 1
    return len(events), lines


def _runs(events: list[dict]) -> Iterator[list[dict]]:
    """Consecutive events of one (job, step), in order."""
    run: list[dict] = []
    key = None
    for ev in events:
        k = (ev["job"], ev.get("step"))
        if run and k != key:
            yield run
            run = []
        key = k
        run.append(ev)
    if run:
        yield run


def mapping_from_args(preset: str | None, columns: dict[str, str], *, time_scale: float | None = None,
                      step_period: float | None = None) -> ColumnMap | OpMap:
    """A preset, possibly with columns overridden, or a ``ColumnMap`` built from ``columns``."""
    if preset is not None:
        if preset not in PRESETS:
            raise TraceImportError(f"unknown preset {preset!r} (known: {', '.join(PRESETS)})")
        base = PRESETS[preset]
        fields = {k: v for k, v in columns.items() if k in base.__dataclass_fields__}
        unknown = set(columns) - set(fields)
        if unknown:
            raise TraceImportError(f"preset {preset} has no field {', '.join(sorted(unknown))}")
        mapping = replace(base, **fields)
    else:
        missing = [k for k in ("rank", "step") if k not in columns]
        if missing:
            raise TraceImportError(f"without --preset, map at least --col rank=COLUMN and --col step=COLUMN "
                               f"(missing: {', '.join(missing)})")
        known = set(ColumnMap.__dataclass_fields__) - {"extra", "time_scale", "step_period"}
        unknown = set(columns) - known
        if unknown:
            raise TraceImportError(f"unknown field(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(known))})")
        mapping = ColumnMap(**columns)
    if time_scale is not None:
        mapping = replace(mapping, time_scale=time_scale)
    if step_period is not None:
        if isinstance(mapping, OpMap):
            raise TraceImportError("--step-period applies to one-row-per-step tables only")
        mapping = replace(mapping, step_period=step_period)
    return mapping
