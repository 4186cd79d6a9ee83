"""The alert corpus: every recording of the scenario library (stepwatch/sim/scenarios.py) and of the test
generators (tests/gen2, tests/gen3), replayed as ``stepwatch replay`` does, and a sha256 of each one's alert
JSON Lines. A redesign must leave every digest as it is (issue 40: "behaviour does not change").

``python tests/alert_corpus.py [--write] [NAME...]`` prints (or writes into ``DIGESTS``) the digests and the
seconds each recording took; tests/models/test_alert_corpus.py compares a bounded sample (or all: ``--full``).
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
DIGESTS = HERE / "fixtures" / "alert_corpus.json"
#: ``--drain`` of each family, as its own tests replay it (tests/scenarios/test_gen2_replay.py, tests/gen3/judge.py).
GEN2_DRAIN = 120.0
GEN3_DRAIN = 900.0
LIBRARY_DRAIN = 0.0


@dataclass(frozen=True)
class Recording:
    """One recording of the corpus: its name (``family/scenario``), its lines, and the replay's ``--drain``."""

    name: str
    lines: Callable[[], list[bytes]]
    drain: float


def _library() -> Iterator[Recording]:
    import orjson

    from stepwatch.sim import scenarios

    def lines(name: str) -> list[bytes]:  # as scenarios.write writes the file
        out = []
        for _, batch in scenarios.batches(scenarios.get(name)):
            if batch:
                out.append(orjson.dumps(batch[0] if len(batch) == 1 else {"v": 1, "kind": "batch", "events": batch}))
        return out

    for name in scenarios.names():
        yield Recording(f"library/{name}", lambda name=name: lines(name), LIBRARY_DRAIN)


def _gen2() -> Iterator[Recording]:
    from gen2.scenarios import catalog

    for s in catalog():
        yield Recording(f"gen2/{s.name}", lambda s=s: [line for _, line in s.timed_lines()], GEN2_DRAIN)


def _gen3() -> Iterator[Recording]:
    from gen3.scenarios import scenarios
    from gen3.write import build

    for sc in scenarios():
        yield Recording(f"gen3/{sc.name}", lambda sc=sc: [line.encode() for line in build(sc)[0]], GEN3_DRAIN)


def corpus() -> list[Recording]:
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))  # gen2, gen3
    return [*_library(), *_gen2(), *_gen3()]


def alert_lines(recording: Recording) -> bytes:
    """The alert JSON Lines ``stepwatch replay --drain DRAIN`` prints for the recording (default settings)."""
    import tempfile

    from stepwatch.config import Settings
    from stepwatch.recording import merge_recorded, replay

    out = io.StringIO()
    with tempfile.TemporaryDirectory() as folder:  # a file, read as the command reads it (merge_recorded, by blocks)
        path = Path(folder) / "recording.jsonl"
        path.write_bytes(b"".join(line + b"\n" for line in recording.lines()))
        replay(merge_recorded([str(path)], blocks=True), Settings(), drain=recording.drain, out=out, stats={})
    return out.getvalue().encode()


def digest(recording: Recording) -> str:
    return hashlib.sha256(alert_lines(recording)).hexdigest()


def main(argv: list[str]) -> int:
    write = "--write" in argv
    names = [a for a in argv if not a.startswith("--")]
    known = json.loads(DIGESTS.read_text()) if DIGESTS.exists() else {}
    for rec in corpus():
        if names and rec.name not in names:
            continue
        started = time.perf_counter()
        d = digest(rec)
        seconds = time.perf_counter() - started
        old = known.get(rec.name, {}).get("sha256")
        print(f"{rec.name}\t{d[:16]}\t{seconds:.2f}s\t{'same' if old == d else 'NEW' if old is None else 'CHANGED'}",
              flush=True)
        known[rec.name] = {"sha256": d, "seconds": round(seconds, 2)}
    if write:
        DIGESTS.write_text(json.dumps(known, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
