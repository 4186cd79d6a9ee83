"""Move one host's clock in a recording: what a host with a wrong clock would have sent.

Every absolute time the host writes (``ts``, ``start_ts``) moves by ``seconds``; durations do
not, nor does ``_arrival`` (the broker's clock, not the host's). An event is the host's when
its ``node`` is the one given, or, for ``rank``, when its ``rank`` is (a rank's events without
``node`` too). Batch envelopes are opened and their events moved one by one.

    python -m tests.clock_skew --rank 1 --seconds 0.3 IN.jsonl > OUT.jsonl
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Iterable

import orjson

TIME_FIELDS = ("ts", "start_ts")  # absolute times a host writes on its own clock


def shift_event(event: dict, *, seconds: float, rank: int | None = None, node: str | None = None) -> dict:
    if event.get("kind") == "batch":
        return {**event, "events": [shift_event(e, seconds=seconds, rank=rank, node=node)
                                    for e in event.get("events", [])]}
    mine = (node is not None and event.get("node") == node) or (rank is not None and event.get("rank") == rank)
    return shift_times(event, seconds) if mine else event


def shift_times(event: dict, seconds: float) -> dict:
    """The event as its host would have written it with its clock ``seconds`` ahead."""
    out = dict(event)
    for key in TIME_FIELDS:
        if isinstance(out.get(key), (int, float)) and not isinstance(out[key], bool):
            out[key] = out[key] + seconds
    return out


def shift_lines(lines: Iterable[bytes | str], *, seconds: float, rank: int | None = None,
                node: str | None = None) -> list[bytes]:
    return [orjson.dumps(shift_event(orjson.loads(line), seconds=seconds, rank=rank, node=node))
            for line in lines if line.strip()]


def shift_file(src: Path, dst: Path, *, seconds: float, rank: int | None = None, node: str | None = None) -> Path:
    dst.write_bytes(b"\n".join(shift_lines(src.read_bytes().splitlines(), seconds=seconds, rank=rank,
                                           node=node)) + b"\n")
    return dst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--rank", type=int)
    parser.add_argument("--node")
    args = parser.parse_args()
    if args.rank is None and args.node is None:
        parser.error("--rank or --node")
    sys.stdout.buffer.write(b"\n".join(shift_lines(args.file.read_bytes().splitlines(), seconds=args.seconds,
                                                   rank=args.rank, node=args.node)) + b"\n")


if __name__ == "__main__":
    main()
