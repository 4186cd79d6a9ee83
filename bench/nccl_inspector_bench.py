"""CPU cost of the node agent's NCCL Inspector reader (docs/zero-code.md): records per CPU second.

Writes a node's worth of Inspector logs (8 ranks, per-line layout, tests/nccl_fixtures.py's format) and times
``InspectorReader.poll`` over them with ``time.process_time`` (the agent's own CPU, not wall time).
Run: ``python bench/nccl_inspector_bench.py [records_per_rank] [window: auto (default), auto:CAP or N]``.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from nccl_fixtures import write_job  # noqa: E402

from stepwatch.producers.nccl_inspector import InspectorReader, InspectorSettings, window_bounds  # noqa: E402
from stepwatch.producers.proc_identity import ProcTable  # noqa: E402


def main() -> None:
    per_rank = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    low, window = window_bounds(sys.argv[2] if len(sys.argv) > 2 else "auto")
    with tempfile.TemporaryDirectory() as tmp:
        host = write_job(Path(tmp), job="bench", n_colls=per_rank, late_rank=None, dump_every=500)["gpu-a"]
        size = sum(p.stat().st_size for p in host["dir"].iterdir())
        reader = InspectorReader(InspectorSettings(directory=str(host["dir"]), window_min=low, window_size=window), node="gpu-a",
                                 procs=ProcTable(host["proc"]))
        t0 = time.process_time()
        events = 0
        while True:
            got = reader.poll()
            events += len(got)
            if not got and reader.counts["records"] >= 8 * per_rank - 8 * window:
                break
        cpu = time.process_time() - t0
    records = reader.counts["records"]
    print(f"{records} records ({size / 1e6:.1f} MB) of 8 ranks in {cpu:.2f} CPU s: {records / cpu:,.0f} records "
          f"per CPU second; {events} events out (1 per {records / max(events, 1):.0f} records)")


if __name__ == "__main__":
    main()
