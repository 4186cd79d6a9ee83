"""(c) Memory per tracked rank and CPU per event for jobs of 1k, 4k and 16k ranks (RSS and tracemalloc in a
fresh process per size: bench/children/engine_memory.py)."""

from __future__ import annotations

import json
import subprocess

from bench.common import PY, REPO


def memory(sizes=(1024, 4096, 16384), steps: int = 20) -> list[dict]:
    out = []
    for ranks in sizes:
        r = subprocess.run([PY, "-m", "bench.children.engine_memory", str(ranks), str(steps)],
                           capture_output=True, text=True, timeout=600, cwd=REPO)
        if r.returncode:
            raise RuntimeError(r.stderr[-2000:])
        out.append(json.loads(r.stdout.strip().splitlines()[-1]))
    return out
