"""``stepwatch import``: CSV/Parquet step timings to wire-format JSON Lines (``import`` is a keyword)."""

from __future__ import annotations

import argparse
import dataclasses
import sys

from stepwatch.commands.common import files_precheck


def _parse_col(text: str) -> tuple[str, str]:
    field, sep, column = text.partition("=")
    if not sep or not field.strip() or not column.strip():
        raise argparse.ArgumentTypeError(f"expected FIELD=COLUMN, got {text!r}")
    return field.strip(), column.strip()


def run(args: argparse.Namespace) -> int:
    from stepwatch import importer

    columns = dict(args.col or [])
    extra = dict(args.extra or [])
    try:
        mapping = importer.mapping_from_args(args.preset, columns, time_scale=args.time_scale,
                                             step_period=args.step_period)
        if extra:
            mapping = dataclasses.replace(mapping, extra={**mapping.extra, **extra})
        events = importer.convert(args.files, mapping, job=args.job, t0=args.start_time)
        importer.validate(events)
    except ValueError as exc:  # TraceImportError, or InvalidEvent naming the bad field
        raise SystemExit(f"stepwatch import: {exc}") from None
    out = sys.stdout.buffer if args.out == "-" else open(args.out, "wb")
    try:
        n, lines = importer.write_jsonl(events, out, batch=not args.single)
    finally:
        if out is not sys.stdout.buffer:
            out.close()
    steps = sum(1 for e in events if e["kind"] == "step")
    print(f"stepwatch import: {n} events ({steps} step events) in {lines} lines"
          + ("" if args.out == "-" else f" to {args.out}"), file=sys.stderr)
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("import", help="convert CSV/Parquet step timings (e.g. public traces) to wire-format JSON Lines",
                       description="Map the columns of a CSV or Parquet file (one row per rank and step, or one row "
                                   "per operation with a preset) to step events, validated, in time order. "
                                   "Presets: alibaba-pai, bytedance-straggler. Parquet needs pyarrow "
                                   "(pip install 'stepwatch[import]').")
    p.add_argument("files", nargs="+", metavar="FILE", help="input .csv or .parquet file(s)")
    p.add_argument("--preset", choices=["alibaba-pai", "bytedance-straggler"], help="column mapping of a known trace")
    p.add_argument("--col", type=_parse_col, action="append", metavar="FIELD=COLUMN",
                   help="map a wire field (job, rank, step, ts, step_time, compute_time, data_time, comm_time, "
                        "group, node) to an input column; repeatable; overrides the preset's")
    p.add_argument("--extra", type=_parse_col, action="append", metavar="NAME=COLUMN",
                   help="copy a column into the events as an extra field; repeatable")
    p.add_argument("--job", help="job id (default: the job column, else the file name)")
    p.add_argument("--time-scale", type=float, metavar="X", help="multiply durations by X (e.g. 0.001 for ms)")
    p.add_argument("--step-period", type=float, metavar="S",
                   help="without a ts column: step N ends at start + N*S (default: cumulated median step time)")
    p.add_argument("--start-time", type=float, default=1_700_000_000.0,
                   help="Unix time of the synthesized clock's start (default 1700000000)")
    p.add_argument("--single", action="store_true", help="one event per line instead of one envelope per step")
    p.add_argument("-o", "--out", default="-", metavar="FILE", help="output JSON Lines file (default: stdout)")
    p.set_defaults(func=run, precheck=files_precheck("import", "nothing imported"))
