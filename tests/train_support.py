"""Launching the multi-process training jobs of the real-training tests."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRAIN_RANK = Path(__file__).resolve().parent / "train_rank.py"
FW_RANK = Path(__file__).resolve().parent / "fw_rank.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ddp_job(env: dict[str, str], tmp_path: Path, *, world: int = 4, args: tuple[str, ...] = (),
                timeout: float = 240, script: Path = TRAIN_RANK) -> list[dict]:
    """Run ``world`` ranks of ``script`` (tests/train_rank.py) as OS processes (torchrun's env conventions);
    return their stats."""
    port = free_port()
    procs = []
    for rank in range(world):
        rank_env = dict(env, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        log = open(tmp_path / f"rank{rank}.log", "w")
        procs.append((subprocess.Popen([sys.executable, str(script), "--stats", str(tmp_path / f"stats{rank}.json"),
                                        *args], env=rank_env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT), log))
    deadline = time.monotonic() + timeout
    try:
        for proc, _ in procs:
            proc.wait(max(1.0, deadline - time.monotonic()))
    finally:
        for proc, log in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()
    logs = "\n".join(f"--- rank {r}:\n" + (tmp_path / f"rank{r}.log").read_text()[-3000:] for r in range(world))
    codes = [p.returncode for p, _ in procs]
    assert codes == [0] * world, f"ranks exited with {codes}:\n{logs}"
    return [json.loads((tmp_path / f"stats{r}.json").read_text()) for r in range(world)]
