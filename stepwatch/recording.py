"""Recordings: capture an incident from the topics, replay it offline, or publish it again.

A recording is JSON Lines, one Kafka message value per line (a wire-format event or batch
envelope, docs/events.md). ``stepwatch record`` adds ``"_arrival"``: when the message reached
the broker (its Kafka timestamp, Unix seconds), so that ``stepwatch replay`` runs the
pipeline on the clock the live worker had (arrival lags, future-timestamp checks, hang
timing). ``stepwatch simulate --out`` and hand-written files work too (no ``_arrival``:
the events' own time is the clock).

- :func:`record`: events and telemetry topics -> lines, merged in arrival order; the config
  topic's messages (runtime settings, ``stepwatch config``) come too, as
  ``{"kind": "config", "_key": SCOPE, ...}`` lines, whole (compacted and small), so replay
  judges with the settings the worker had.
- :func:`replay`: lines -> the worker's ``Pipeline`` (models/pipeline.py) -> alerts.
- :func:`publish`: lines -> the topics, keyed as the wire format says (job events by job,
  node telemetry by node), batched, as fast as possible or paced.
- :func:`merge_recorded`: several recordings (one per rank or node) -> the lines of one, by time, each
  parsed once; ``stepwatch replay`` and ``stepwatch publish`` both read their files through it.
"""

from __future__ import annotations

import functools
import gc
import heapq
import os
import stat
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timezone

import orjson

from typing import TYPE_CHECKING

from stepwatch.config import Settings
from stepwatch.terminal import json_line, printable

if TYPE_CHECKING:  # the detection core loads when a recording is read, not for the commands' file checks
    from stepwatch.models.sources import RecordedBlock, RecordedLine

PROGRESS_SECONDS = 5.0

#: The cyclic garbage collector's youngest-generation threshold in replay (CPython's default: 700). The
#: column path allocates thousands of short-lived tuples per batch, so at 700 the collector runs every few
#: hundred events and its older generations, which hold every rank's state, get scanned in proportion to
#: the job's size: measured 6.5 -> 5.2 us per event at 65,536 ranks, 4.2 -> 4.0 at 1,024
#: (bench/replay_bench.py). Cycles are still collected, 50,000 allocations apart.
GC_GEN0_THRESHOLD = 50_000


def tune_gc() -> None:
    """Raise the collector's youngest-generation threshold to ``GC_GEN0_THRESHOLD`` (never lower it)."""
    first, *older = gc.get_threshold()
    gc.set_threshold(max(first, GC_GEN0_THRESHOLD), *older)


def parse_time(text: str) -> float:
    """Unix seconds, or an ISO 8601 time (UTC unless it says otherwise)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"expected Unix seconds or an ISO 8601 time, got {text!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


#: Bytes read from a recording at a time: its lines are split from a block at once (C-level), not read one by one.
READ_BLOCK = 1 << 20


def read_blocks(paths: Iterable[str], *, what: str = "replay", progress: bool = True) -> Iterator[list[bytes]]:
    """``read_lines``'s lines, a list per block of about ``READ_BLOCK`` bytes (each line stripped, empty ones left out).

    A pipe (stdin) gives what it has (``read1``), so a line is not held back until a block fills up."""
    next_report = time.monotonic() + PROGRESS_SECONDS if progress else float("inf")
    for path in paths:
        stream = sys.stdin.buffer if path == "-" else open(path, "rb")
        try:
            size = os.fstat(stream.fileno()).st_size if path != "-" else 0
        except (OSError, ValueError):  # not a file with a size (a pipe, a test's stream)
            size = 0
        read = getattr(stream, "read1", stream.read)
        lineno = 0
        pending: list[bytes] = []  # the start of a line not ended yet (a line longer than a block: joined once)
        try:
            while True:
                chunk = read(READ_BLOCK)
                if not chunk:
                    lines = [b"".join(pending)] if pending else []
                    pending = []
                else:
                    end = chunk.rfind(b"\n")
                    if end < 0:
                        pending.append(chunk)
                        continue
                    if pending:
                        pending.append(chunk[:end])
                        lines = b"".join(pending).split(b"\n")
                    else:
                        lines = chunk[:end].split(b"\n")
                    pending = [chunk[end + 1:]] if end + 1 < len(chunk) else []
                lineno += len(lines)
                lines = list(filter(None, map(bytes.strip, lines)))
                if time.monotonic() > next_report:
                    done = f" ({100 * stream.tell() / size:.0f} %)" if size else ""
                    print(f"stepwatch {what}: {path}: line {lineno}{done}", file=sys.stderr, flush=True)
                    next_report = time.monotonic() + PROGRESS_SECONDS
                if lines:
                    yield lines
                if not chunk:
                    break
        finally:
            if stream is not sys.stdin.buffer:
                stream.close()


def read_lines(paths: Iterable[str], *, what: str = "replay", progress: bool = True) -> Iterator[bytes]:
    """The non-empty lines of recordings ('-': stdin), with a progress line on stderr every ``PROGRESS_SECONDS`` or so
    (a recording read for longer than that; ``progress``: False, none)."""
    for lines in read_blocks(paths, what=what, progress=progress):
        yield from lines


def unreadable(paths: Iterable[str]) -> str | None:
    """Why one of these recordings cannot be read (its path and the reason, one line), before any line of them
    is used; None: all can. Nothing is opened (a named pipe's writer would be let through, then see its reader
    gone): the path must exist, not be a directory, and be readable; '-' (stdin) can be named once."""
    stdin = 0
    for path in paths:
        if path == "-":
            stdin += 1
            if stdin > 1:
                return "-: stdin named twice (it can be read once)"
            continue
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            return f"{path}: no such file"
        except OSError as exc:  # a path through a file, a loop of links, too long
            return f"{path}: {exc.strerror or type(exc).__name__}"
        if stat.S_ISDIR(mode):
            return f"{path}: is a directory"
        if not os.access(path, os.R_OK):
            return f"{path}: permission denied"
    return None


def _merge_time(line: RecordedLine, offset: float = 0.0) -> float | None:
    """Where a parsed line stands in time: its ``_arrival`` (broker time) if recorded and a Unix time (as replay's
    clock takes it), else the latest event time it states (as ``publish`` paces lines) less its writer's clock
    ``offset``; None: not known (a config line, bad JSON)."""
    if line.arrival is not None:
        return float(line.arrival)
    obj = line.value
    if type(obj) is not dict:
        return None  # replay dead-letters it where it stands in its file
    if obj.get("kind") != "batch":  # the common case: a lone event (its time, or none)
        ts = obj.get("ts")
        return ts - offset if type(ts) is float or type(ts) is int else None
    events = obj.get("events")
    latest = None
    for event in events if type(events) is list else ():
        ts = event.get("ts") if type(event) is dict else None
        if (type(ts) is float or type(ts) is int) and (latest is None or ts > latest):
            latest = ts
    return latest - offset if latest is not None else None


#: How much of each file ``merge_recorded`` reads ahead to estimate its writer's clock offset: its first lines, up
#: to this many steps of its step events. The lines read ahead are kept, parsed, for the merge (parsed once).
OFFSET_HEAD_LINES = 4_000
OFFSET_HEAD_STEPS = 64


def file_clock_offsets(paths: list[str], *, what: str = "replay") -> list[float]:
    """Each file's writer's clock offset from the others' (seconds ahead), from the step-end times of the steps
    their heads share (models/steps/clocks.py ``source_offsets``): in synchronous training every rank ends a step
    at the same instant, so what differs is the clocks. Lines with ``_arrival`` are on the broker's clock and are
    left out; stdin and other files that cannot be read twice (a pipe) get 0."""
    return _clock_heads(paths, what=what)[0]


def _clock_heads(paths: list[str], *, what: str) -> tuple[list[float], list[list[RecordedLine]]]:
    """``file_clock_offsets``, and the lines each file's head estimate read (parsed, for the merge)."""
    from stepwatch.models.sources import recorded
    from stepwatch.models.steps.clocks import source_offsets

    heads: list[dict[tuple[str, int], float]] = []
    parsed: list[list[RecordedLine]] = []
    step_times: list[float] = []
    for path in paths:
        ends: dict[tuple[str, int], float] = {}
        head: list[RecordedLine] = []
        heads.append(ends)
        parsed.append(head)
        try:
            regular = path != "-" and stat.S_ISREG(os.stat(path).st_mode)
        except OSError:
            regular = False  # reported where the file is read
        if not regular:
            continue
        lines = read_lines([path], what=what)
        try:
            for n, raw in enumerate(lines):
                if n >= OFFSET_HEAD_LINES or len(ends) >= OFFSET_HEAD_STEPS:
                    break
                line = recorded(raw)
                head.append(line)
                obj = line.value
                if type(obj) is not dict or line.arrival is not None:
                    continue  # not JSON (dead-lettered by replay where it stands), or on the broker's clock
                _step_ends(obj, lambda e: ends, step_times)
        finally:
            lines.close()
    return source_offsets(heads, step_time=_typical(step_times)), parsed


def _step_ends(obj: dict, ends_of: Callable[[dict], dict | None], step_times: list[float],
               steps: set | None = None) -> None:
    """A parsed line's step events noted for a clock-offset estimate: each one's earliest step end by ``(job, step)``
    in the dict ``ends_of(event)`` gives (None: not noted), its ``step_time`` in ``step_times``, its key in ``steps``."""
    events = obj.get("events") if obj.get("kind") == "batch" else [obj]
    for e in events if type(events) is list else ():
        if type(e) is not dict or e.get("kind") != "step":
            continue
        ends = ends_of(e)
        job, step, ts, took = e.get("job"), e.get("step"), e.get("ts"), e.get("step_time")
        if ends is not None and type(job) is str and type(step) is int and type(ts) in (int, float):
            key = (job, step)
            ends[key] = min(ends.get(key, ts), ts)
            if steps is not None:
                steps.add(key)
            if type(took) in (int, float):
                step_times.append(took)


def _typical(step_times: list[float]) -> float:
    """The (upper) median step time, NaN without any: what ``source_offsets`` takes as half a step's floor."""
    step_times.sort()
    return step_times[len(step_times) // 2] if step_times else float("nan")


def merge_recorded(paths: list[str], *, what: str = "replay", blocks: bool = False
                   ) -> Iterator[bytes | RecordedLine | RecordedBlock]:
    """The lines of several recordings as one: one file per rank or node (each written on its own host) merged
    by time, so that replaying them is replaying one recording of the whole job. ``stepwatch replay`` and
    ``stepwatch publish`` both read their files through it.

    Each file keeps its own order (a rank's events as it wrote them: reordering within a file could only lose
    what the recording says). Files are merged in a heap on each line's time (``_arrival``, else its event
    time less the file's clock offset, ``file_clock_offsets``: a host whose clock runs seconds ahead would
    otherwise have its events merged seconds late, many steps behind the other ranks'), taken as the greatest
    seen so far in its file, so a line that went back in time (a clock step, a reordered event) stays behind
    the line before it; a line without a time (config, bad JSON) goes with the line before it. Ties go to the
    file named first. Where some file's offset is not 0, each line is replayed with its merge time as its arrival
    (``_arriving``: the clock a live worker would have had). Lazy: one line per file in memory (and the head of each file read once before, for the
    offsets).

    Each line is parsed once: several files' lines come parsed (``RecordedLine``, models/sources.py: the
    merge needs their times, and replay's pipeline and publish take the parsed value as it is); one file's
    come as they are (bytes, parsed where they are used); with ``blocks`` (``replay``), one file's plain lines come
    parsed a block at a time (``RecordedBlock``s, models/sources.py ``recorded_blocks``: what ``replay`` reads
    fastest), any other line as its ``RecordedLine``.
    """
    if len(paths) < 2:
        yield from _one_recording(paths, what=what, blocks=blocks)
        return
    from stepwatch.models.sources import recorded
    offsets, heads = _clock_heads(paths, what=what)

    moved = any(offsets)

    def timed(index: int, path: str) -> Iterator[tuple[float, int, int, RecordedLine]]:
        latest = float("-inf")
        offset, head = offsets[index], heads[index]
        heads[index] = []  # (the merge holds them from here)
        for seq, raw in enumerate(read_lines([path], what=what)):
            line = head[seq] if seq < len(head) else recorded(raw)  # the head was parsed for the offsets
            when = _merge_time(line, offset)
            if when is not None and when > latest:
                latest = when
            yield latest, index, seq, _arriving(line, latest) if moved else line  # (seq: never compare two lines)

    for *_, line in heapq.merge(*(timed(i, path) for i, path in enumerate(paths))):
        yield line


#: One recording sorted by event time: how much of its head ``_one_recording`` reads to estimate its hosts'
#: clock offsets (up to this many steps or events, whichever first); and the share of its timed lines that may
#: go back in time for it to count as sorted (a few reordered events).
SORTED_HEAD_STEPS = 256
SORTED_HEAD_EVENTS = 50_000  # parsed lines held: tens of MB at most
SORTED_BACK_SHARE = 0.01


def _one_recording(paths: list[str], *, what: str, blocks: bool = False
                   ) -> Iterator[bytes | RecordedLine | RecordedBlock]:
    """The lines of one recording: as they are, unless it is sorted by event time (no ``_arrival``: an
    imported or generated trace) and its hosts' clocks disagree by more than half a step. Sorting by raw
    time puts a host whose clock is seconds ahead many steps late (its steps closed without it, or taken
    for a restart): such a file is merged again as ``merge_recorded`` merges one file per host, each host's
    lines in their own order, on its time less the host's clock offset (``source_offsets`` of the nodes'
    step ends in the head). Lines without a node (job-wide phases, config) stay on the raw clock.

    Lazy: the head (parsed, for the estimate) and, while merging, the lines within the hosts' clock spread
    are held; each line is parsed once. ``blocks``: the lines after the head, where they come as they are,
    parsed a block at a time (``merge_recorded``)."""
    from stepwatch.models.sources import recorded, recorded_blocks
    from stepwatch.models.steps.clocks import source_offsets

    read = read_blocks(paths, what=what)
    rest: list[bytes] = []  # the lines of the block the head ended in, after it
    head: list[RecordedLine] = []
    ends: dict[str, dict[tuple[str, int], float]] = {}  # node -> (job, step) -> earliest step end
    steps: set[tuple[str, int]] = set()
    step_times: list[float] = []
    events = timed = back = 0
    previous = None

    def of_node(event: dict) -> dict | None:  # each node's step ends apart (an event without its node: none)
        node = event.get("node")
        return ends.setdefault(node, {}) if type(node) is str else None

    def enough(line: RecordedLine) -> bool:
        """Note a head line; True: the head is read."""
        nonlocal events, timed, back, previous
        if line.arrival is not None:
            return True  # on the broker's clock: its order is the order things arrived
        obj = line.value
        batch = obj.get("events") if type(obj) is dict and obj.get("kind") == "batch" else [obj]
        if type(batch) is not list:
            return False
        when = _merge_time(line)
        if when is not None:
            if previous is not None:
                timed += 1
                back += when < previous
            previous = when
        events += len(batch)
        if type(obj) is dict:
            _step_ends(obj, of_node, step_times, steps)
        return len(steps) >= SORTED_HEAD_STEPS or events >= SORTED_HEAD_EVENTS

    for block in read:
        for k, raw in enumerate(block):
            line = recorded(raw)
            head.append(line)
            if enough(line):
                rest = block[k + 1:]
                break
        else:
            continue
        break

    def raw_lines() -> Iterator[bytes]:
        yield from rest
        for block in read:
            yield from block

    offsets: list[float] = []
    if head[-1:] and head[-1].arrival is None and len(ends) > 1 and back <= SORTED_BACK_SHARE * timed:
        offsets = source_offsets(list(ends.values()), step_time=_typical(step_times))
    if not any(offsets):
        yield from head
        if not blocks:
            yield from raw_lines()
            return
        yield from recorded_blocks(rest)
        for block in read:
            yield from recorded_blocks(block)
        return
    offset = dict(zip(ends, offsets))
    top = max(0.0, *offsets)  # no later line's merge time is below the newest raw time less this

    def parsed() -> Iterator[RecordedLine]:
        yield from head
        head.clear()
        for raw in raw_lines():
            yield recorded(raw)

    held: list[tuple[float, int, RecordedLine]] = []
    latest: dict[str | None, float] = {}  # each host's greatest merge time so far: its lines keep their order
    newest = last = float("-inf")
    for seq, line in enumerate(parsed()):
        node = _line_node(line.value)
        shift = offset.get(node, 0.0)
        when = _merge_time(line, shift)
        if when is None:
            when = last  # with the line before it
        else:
            newest = max(newest, when + shift)
            when = latest[node] = max(when, latest.get(node, when))
        last = when
        heapq.heappush(held, (when, seq, _arriving(line, when)))
        while held and held[0][0] <= newest - top:
            yield heapq.heappop(held)[2]
    while held:
        yield heapq.heappop(held)[2]


def _arriving(line: RecordedLine, when: float) -> RecordedLine:
    """A line merged on clocks put right, replayed on that clock: its merge time as its arrival, as the live worker
    would have received it (on the broker's clock: a host whose clock is ahead does not move replay's clock, which
    would make the others look stalled)."""
    return line._replace(arrival=when) if line.arrival is None and when > float("-inf") else line


def _line_node(obj) -> str | None:
    """The node a parsed line's events were written on: a lone event's, or a batch's if all its events share it."""
    if type(obj) is not dict:
        return None
    if obj.get("kind") != "batch":
        node = obj.get("node")
        return node if type(node) is str else None
    events = obj.get("events")
    nodes = {e.get("node") for e in events if type(e) is dict} if type(events) is list else ()
    return next(iter(nodes)) if len(nodes) == 1 and type(next(iter(nodes))) is str else None


def merge_lines(paths: list[str], *, what: str = "replay") -> Iterator[bytes]:
    """``merge_recorded``'s lines as bytes (each line's own, as its file has it)."""
    for line in merge_recorded(paths, what=what):
        yield line if type(line) is bytes else line.message.value


# -- replay ---------------------------------------------------------------------------------


def candidate_lines(lines, overrides: dict):
    """The recording's lines with the candidate settings in force from its start, for every job (scope ``*``), as
    ``stepwatch config set`` would put them: a ``*`` config line first, and each recorded ``*`` config line
    (which replaces the scope's settings whole) with the candidate's values laid over it."""
    from stepwatch.runtime_config import GLOBAL

    yield orjson.dumps({"v": 1, "kind": "config", "_key": GLOBAL, **overrides})
    for line in lines:
        if type(line) is not bytes and not hasattr(line, "message"):  # a block of plain lines (no config line)
            yield line
            continue
        raw = line if type(line) is bytes else line.message.value
        if _is_config(raw):
            try:
                record = orjson.loads(raw)
            except orjson.JSONDecodeError:
                record = None
            if isinstance(record, dict) and record.get("kind") == "config" and record.get("_key") == GLOBAL:
                for section, values in overrides.items():
                    record[section] = {**(record.get(section) if isinstance(record.get(section), dict) else {}),
                                       **values}
                yield orjson.dumps(record)
                continue
        yield line


def replay(lines: Iterable[bytes], settings: Settings, *, drain: float = 0.0, until: float | None = None,
           out=None, stats: dict | None = None, across_arrivals: bool = True, tap=None) -> dict:
    """Run recording lines through the worker's pipeline; alerts to ``out`` as JSON Lines. Returns counts.
    ``tap``: a ``Sink`` (models/sinks.py) that sees every step's outputs first, as objects (tests).

    ``across_arrivals``: lines of different ``_arrival`` merged into the worker's column batches, each row on
    its own arrival (the same alerts: tests/cli/test_replay_fast.py); False: a read per arrival, as before."""
    from stepwatch.models.pipeline import Pipeline, run_recording
    from stepwatch.models.sinks import JsonLinesSink

    stats = stats if stats is not None else {}
    stats.update(events=0, rejected=0, alerts=0)
    tune_gc()
    pipeline = Pipeline(settings=settings)
    # Terminal-safe lines: replay often prints to one (control characters in names escaped).
    sink = JsonLinesSink(out or sys.stdout, report=sys.stderr, line=lambda a: json_line(a.to_dict()), text=printable)
    try:  # the recording's lines -> the pipeline -> the sink, as the worker's topics -> pipeline -> topics
        told = _told_arrivals(lines, pipeline.engine)
        for outputs in run_recording(pipeline, _apply_config(told, pipeline, settings), drain=drain, until=until,
                                     across_arrivals=across_arrivals):
            if tap is not None:
                tap.write(outputs)
            sink.write(outputs)
    finally:  # counts so far, also when reading stops half-way
        stats.update(events=pipeline.engine.events_by_kind.total(), rejected=sink.rejected, alerts=sink.alerts)
    return stats


# -- replay --jobs N -------------------------------------------------------------------------------


def _share(value, jobs: int) -> int | None:
    """Which of ``jobs`` processes feeds a parsed line: its job's (by a stable hash of the name), None: every one
    (node telemetry, runtime settings: every job's rules read them), -1: the first (not an event: dead-lettered
    once). An envelope of several jobs' events goes whole to its first job's process."""
    import zlib

    if type(value) is not dict:
        return -1
    events = value.get("events") if value.get("kind") == "batch" else [value]
    if value.get("kind") == "config" or type(events) is not list:
        return None if value.get("kind") == "config" else -1
    for event in events:
        job = event.get("job") if type(event) is dict else None
        if type(job) is str:
            return zlib.crc32(job.encode()) % jobs
    return None


def replay_jobs(paths: list[str], settings: Settings, *, jobs: int, drain: float = 0.0, until: float | None = None,
                out=None, stats: dict | None = None, overrides: dict | None = None) -> dict:
    """``replay`` split by job over ``jobs`` processes (``stepwatch replay --jobs N``); alerts to ``out`` in the
    order one process gives them, as far as it can be known (below). Returns counts.

    Each job's lines go to one process (``_share``); node telemetry and runtime settings go to every process;
    every process gets, for each line another one feeds, its time only (``models.sources.Elsewhere``), so its
    clock and ticks are one process's. The alerts are merged by where in the recording they came out (the line
    read when its process produced them, a read before a tick, ticks by their time), then by process. Node-scope
    alerts (no job) are taken from the first process only (each process sees all node telemetry).

    What is exact: job-scope rules (straggler, hang, throughput, imbalance...) of jobs that share no node. What
    needs all jobs' data, so one process: alerts that correlate jobs (a node suspected from several jobs'
    stragglers, incidents across jobs, the drain budget), and the order of two jobs' alerts raised between the
    same two ticks (here: by process)."""
    import concurrent.futures
    import multiprocessing
    import tempfile

    from stepwatch.models.sources import recorded

    stats = stats if stats is not None else {}
    out = out or sys.stdout
    lines = merge_recorded(paths)
    if overrides is not None:
        lines = candidate_lines(lines, overrides)
    with tempfile.TemporaryDirectory(prefix="stepwatch-replay-") as tmp:
        names = [os.path.join(tmp, f"{k}.jsonl") for k in range(jobs)]
        files = [open(name, "wb") for name in names]
        shared = 0
        try:
            for line in lines:
                parsed = recorded(line)
                share = _share(parsed.value, jobs)
                if type(line) is bytes:  # as its file has it
                    raw = line
                elif parsed.arrival is not None and type(parsed.value) is dict:
                    raw = orjson.dumps({**parsed.value, "_arrival": parsed.arrival})
                else:
                    raw = parsed.message.value
                if share is None:  # counted by every process: once in the stats
                    value = parsed.value
                    shared += len(value["events"]) if value.get("kind") == "batch" else value.get("kind") != "config"
                    for f in files:
                        f.write(raw + b"\n")
                    continue
                share = max(share, 0)
                at = parsed.arrival if parsed.arrival is not None else _merge_time(parsed)
                mark = orjson.dumps({"_elsewhere": at, "_arrival": parsed.arrival is not None}) + b"\n"
                for k, f in enumerate(files):
                    f.write(raw + b"\n" if k == share else mark)
        finally:
            for f in files:
                f.close()
        context = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
        with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context) as pool:
            results = list(pool.map(_replay_share, names, [drain] * jobs, [until] * jobs, range(jobs)))
    merged = sorted((key, k, seq, text) for k, (found, _) in enumerate(results)
                    for seq, (key, text) in enumerate(found))
    for *_, text in merged:
        out.write(text)
    events = sum(r[1]["events"] for r in results) - (jobs - 1) * shared
    stats.update(events=events, rejected=sum(r[1]["rejected"] for r in results), alerts=len(merged))
    return stats


def _replay_share(path: str, drain: float, until: float | None, share: int) -> tuple[list, dict]:
    """One process of ``replay_jobs``: its share of the recording, each alert line with where it came out."""
    import io

    from stepwatch.models.pipeline import Pipeline
    from stepwatch.models.sinks import JsonLinesSink
    from stepwatch.models.sources import Elsewhere, RecordingSource, Tick

    settings = Settings.from_env()
    tune_gc()
    pipeline = Pipeline(settings=settings)
    buffer = io.StringIO()
    sink = JsonLinesSink(buffer, report=sys.stderr, line=lambda a: json_line(a.to_dict()), text=printable)
    position = 0

    def lines() -> Iterator[bytes | Elsewhere]:
        nonlocal position
        for raw in read_lines([path], progress=False):  # (the split's own reading says how far it is)
            position += 1
            if raw.startswith(b'{"_elsewhere"'):
                mark = orjson.loads(raw)
                yield Elsewhere(mark["_elsewhere"], mark["_arrival"])
            else:
                yield raw

    found: list = []
    events = 0
    for item in RecordingSource(_apply_config(lines(), pipeline, settings), clock=lambda: pipeline.engine.clock,
                                tick_interval=settings.worker.tick_interval, drain=drain, until=until):
        outputs = pipeline.take(item)
        if share:  # node-scope alerts: the first process's (every process reads all node telemetry)
            outputs.alerts = [a for a in outputs.alerts if a.job]
        buffer.seek(0)
        buffer.truncate()
        sink.write(outputs)
        key = (position, 1, item.at) if type(item) is Tick else (position, 0, 0.0)
        found.extend((key, text) for text in buffer.getvalue().splitlines(keepends=True))
    events = pipeline.engine.events_by_kind.total()
    return found, {"events": events, "rejected": sink.rejected}


def _is_config(line: bytes) -> bool:
    return b'"config"' in line and line.startswith(b"{") and b'"_key"' in line


def _told_arrivals(lines: Iterable, engine) -> Iterator:
    """The lines as they are; the engine told by the first whether the recording's arrivals are the broker's
    (``_arrival`` written by ``record``) or replay's own merge of its hosts' times (``JobEngine.broker_arrivals``)."""
    from stepwatch.models.sources import RecordedBlock, RecordedLine

    it = iter(lines)
    for line in it:
        if type(line) is RecordedBlock:  # (its lines all carry a Unix-time ``_arrival``)
            engine.broker_arrivals = True
            yield line
            break
        raw = line if type(line) is bytes else getattr(getattr(line, "message", None), "value", None)
        # (another process's mark, a config line, a line that is no JSON object: the next decides; a merged
        # line is parsed already: its value, not a second parse)
        if type(raw) is bytes and not _is_config(raw) and type(
                line.value if type(line) is RecordedLine else _json_or_none(raw)) is dict:
            engine.broker_arrivals = b'"_arrival"' in raw
            yield line
            break
        yield line
    yield from it


def _json_or_none(raw: bytes):
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


def _apply_config(lines: Iterable[bytes | RecordedLine], pipeline, settings: Settings
                  ) -> Iterator[bytes | RecordedLine | Callable[[], None]]:
    """The lines, the config lines replaced by calls that change the pipeline's settings where they stand (as
    live): ``run_recording`` makes each call once every line before it is fed."""
    from stepwatch.models.sources import recorded
    from stepwatch.runtime_config import RuntimeConfig

    runtime = RuntimeConfig(settings)

    def apply(key: str, line: bytes) -> None:
        try:
            runtime.apply(pipeline.engine, key, line)
        except ValueError as exc:  # the worker ignored it too
            print(f"stepwatch replay: ignored runtime settings for {key!r}: {exc}", file=sys.stderr)

    for line in lines:
        if type(line) is not bytes and not hasattr(line, "message"):
            yield line  # a block of plain lines (none a config line: ``recorded_blocks``), another process's line
            continue
        raw = line if type(line) is bytes else line.message.value
        if _is_config(raw):
            record = recorded(line).value  # (a parsed line: as it is)
            if isinstance(record, dict) and record.get("kind") == "config" and isinstance(record.get("_key"), str):
                yield functools.partial(apply, record["_key"], raw)
                continue
        yield line


# -- record ---------------------------------------------------------------------------------


def _job_filter(value: dict, jobs: set[str]) -> dict | None:
    """The message value with only ``jobs``' events (None: nothing left); node telemetry is kept whole."""
    from stepwatch.models.wire.telemetry_events import TELEMETRY_KINDS

    if value.get("kind") != "batch":
        keep = value.get("kind") in TELEMETRY_KINDS or value.get("job") in jobs
        return value if keep else None
    items = value.get("events")
    if not isinstance(items, list):
        return None
    kept = [e for e in items if isinstance(e, dict) and (e.get("kind") in TELEMETRY_KINDS or e.get("job") in jobs)]
    if not kept:
        return None
    return value if len(kept) == len(items) else dict(value, events=kept)


def _config_line(key: bytes | None, value: bytes | None) -> bytes | None:
    """A config message as a recording line: its value (an empty one for a tombstone) with its key as ``_key``."""
    from stepwatch.runtime_config import GLOBAL

    try:
        record = orjson.loads(value) if value is not None else {"v": 1, "kind": "config"}
    except orjson.JSONDecodeError:
        return None
    if not isinstance(record, dict):
        return None
    record["_key"] = key.decode("utf-8", "replace") if key else GLOBAL
    return orjson.dumps(record)


def record(settings: Settings, out, *, jobs: list[str] | None = None, since: float | None = None,
           until: float | None = None, arrival: bool = True, timeout: float = 60.0) -> dict:
    """Copy what the events and telemetry topics hold now (from ``since`` to ``until``, broker time) to ``out``.

    Every partition is read up to its end at the start; the messages are written in arrival
    order (partitions merged by broker timestamp, each partition's own order kept).
    """
    from kafka import KafkaConsumer, TopicPartition

    from stepwatch.security import client_config

    k = settings.kafka
    config_topic = k.topic(k.config_topic)
    topics = [k.topic(k.events_topic), k.topic(settings.telemetry.topic), config_topic]
    consumer = KafkaConsumer(bootstrap_servers=k.bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", **client_config(settings))
    stats = {"messages": 0, "written": 0, "skipped": 0}
    wanted = set(jobs or ())
    try:
        tps = [TopicPartition(t, p) for t in topics for p in sorted(consumer.partitions_for_topic(t) or ())]
        if not tps:
            return stats
        ends = consumer.end_offsets(tps)
        starts = consumer.beginning_offsets(tps)
        if since is not None:  # the config topic is read whole: settings set before ``since`` still hold
            timed = [tp for tp in tps if tp.topic != config_topic]
            found = consumer.offsets_for_times({tp: int(since * 1000) for tp in timed})
            starts.update({tp: (found[tp].offset if found.get(tp) is not None else ends[tp]) for tp in timed})
        tps = [tp for tp in tps if ends[tp] > starts[tp]]
        per_partition: dict = {tp: [] for tp in tps}
        if tps:
            consumer.assign(tps)
            for tp in tps:
                consumer.seek(tp, starts[tp])
            remaining = set(tps)
            deadline = time.monotonic() + timeout
            while remaining and time.monotonic() < deadline:
                for tp, records in consumer.poll(timeout_ms=500, max_records=10_000).items():
                    for r in records:
                        if r.offset >= ends[tp] or (until is not None and r.timestamp / 1000 > until):
                            remaining.discard(tp)
                            break
                        if tp.topic == config_topic:
                            per_partition[tp].append((r.timestamp, _config_line(r.key, r.value)))
                        else:
                            per_partition[tp].append((r.timestamp, r.value))
                    if tp in remaining and consumer.position(tp) >= ends[tp]:
                        remaining.discard(tp)
                for tp in list(remaining):
                    if consumer.position(tp) >= ends[tp]:
                        remaining.discard(tp)
                consumer.pause(*[tp for tp in tps if tp not in remaining])
            if remaining:
                print(f"stepwatch record: stopped at the time limit; not fully read: "
                      f"{sorted(f'{tp.topic}[{tp.partition}]' for tp in remaining)}", file=sys.stderr)
    finally:
        consumer.close()
    for ts_ms, raw in heapq.merge(*per_partition.values(), key=lambda r: r[0]):
        stats["messages"] += 1
        try:
            value = orjson.loads(raw) if raw is not None else None
        except orjson.JSONDecodeError:
            value = None
        if not isinstance(value, dict):  # not an event: the worker dead-lettered it (see the dead-letter topic)
            stats["skipped"] += 1
            continue
        if wanted and value.get("kind") != "config":
            value = _job_filter(value, wanted)
            if value is None:
                continue
        if arrival:
            value["_arrival"] = ts_ms / 1000
        out.write(orjson.dumps(value))
        out.write(b"\n")
        stats["written"] += 1
    return stats


# -- publish --------------------------------------------------------------------------------


def _line_events(line: bytes | RecordedLine) -> tuple[list | None, float | None]:
    """A line's events (dicts) and its ``_arrival``; None: not a wire-format object. Parsed once: as replay's
    pipeline parses it (``recorded``), a line ``merge_recorded`` parsed already taken as it is."""
    from stepwatch.models.sources import recorded
    from stepwatch.models.wire.wire import MAX_MESSAGE_BYTES

    line = recorded(line)
    value = line.value
    raw = line.message.value
    if value is None and raw is not None and len(raw) > MAX_MESSAGE_BYTES:
        # Over one message's limit: still sent, in batches of the publisher's size (not one message).
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return None, None
        if isinstance(value, dict):
            value.pop("_arrival", None)
    if not isinstance(value, dict):
        return None, line.arrival
    if value.get("kind") == "batch":
        items = value.get("events")
        if not isinstance(items, list) or not all(isinstance(e, dict) for e in items):
            return None, line.arrival
        return items, line.arrival
    return [value], line.arrival


def wire_key(event: dict) -> tuple[str, str]:
    """Where an event goes and under which key (docs/events.md): ("telemetry", node), ("events", job), or
    ("config", scope) for a recorded config message (its ``_key`` taken off)."""
    from stepwatch.models.wire.telemetry_events import TELEMETRY_KINDS

    if event.get("kind") in TELEMETRY_KINDS:
        return "telemetry", str(event.get("node", ""))
    if event.get("kind") == "config" and "_key" in event:
        return "config", str(event.pop("_key"))
    return "events", str(event.get("job", ""))


def _line_time(events: list[dict], arrival: float | None) -> float | None:
    if arrival is not None:
        return float(arrival)
    stamps = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float)) and not isinstance(e["ts"], bool)]
    return max(stamps) if stamps else None


def publish(lines: Iterable[bytes], settings: Settings, *, speed: float = 0.0, batch_events: int = 4096) -> dict:
    """Send recording lines to the events and telemetry topics; returns counts.

    Job events are keyed by job, node telemetry by node (docs/events.md); events of one key go
    out in batch envelopes (``EventPublisher``), in the recording's order. ``speed`` > 0: each
    line is sent when its time (``_arrival``, else its latest event time) has come, ``speed``
    x real time; 0: as fast as possible.
    """
    from stepwatch.producers.publisher import EventPublisher
    from stepwatch.security import client_config
    from stepwatch.topics import create_topics, ensure_topics

    k = settings.kafka
    security = client_config(settings)
    ensure_topics(k, client_config=security)
    telemetry_topic = k.topic(settings.telemetry.topic)
    create_topics(k.bootstrap, [telemetry_topic], k.partitions, replication_factor=k.replication_factor,
                  client_config=security, append_time=[telemetry_topic])
    from stepwatch.topics import ensure_config_topic

    ensure_config_topic(k, client_config=security)
    stats = {"lines": 0, "skipped": 0}
    pending: dict[tuple[str, str], list[dict]] = {}
    count = 0
    with EventPublisher(bootstrap=k.bootstrap, topic=k.topic(k.events_topic), **security) as events_out, \
            EventPublisher(bootstrap=k.bootstrap, topic=telemetry_topic, **security) as telemetry_out, \
            EventPublisher(bootstrap=k.bootstrap, topic=k.topic(k.config_topic), **security) as config_out:
        outs = {"events": events_out, "telemetry": telemetry_out}

        def send() -> None:
            nonlocal count
            for (where, key), events in pending.items():
                if where == "config":  # one message each: the latest per scope is what counts
                    for event in events:
                        config_out.send(key, [event])
                else:
                    outs[where].send(key, events)
            pending.clear()
            count = 0

        origin_wall = time.monotonic()
        origin: float | None = None
        for line in lines:
            events, arrival = _line_events(line)
            if events is None:
                stats["skipped"] += 1
                continue
            stats["lines"] += 1
            if speed > 0:
                at = _line_time(events, arrival)
                if at is not None:
                    origin = at if origin is None else origin
                    delay = origin_wall + (at - origin) / speed - time.monotonic()
                    if delay > 0:
                        send()  # what is due goes out before the wait
                        time.sleep(delay)
            for event in events:
                pending.setdefault(wire_key(event), []).append(event)
            count += len(events)
            if count >= batch_events or speed > 0:
                send()
        send()
        for publisher in (events_out, telemetry_out, config_out):
            publisher.flush()
    publishers = (events_out, telemetry_out, config_out)
    stats["events_sent"] = sum(p.events_sent for p in publishers)
    stats["events_dropped"] = sum(p.events_dropped for p in publishers)
    stats["messages_sent"] = sum(p.messages_sent for p in publishers)
    return stats
