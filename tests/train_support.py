"""Launching the multi-process training jobs of the real-training tests."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRAIN_RANK = Path(__file__).resolve().parent / "train_rank.py"
FW_RANK = Path(__file__).resolve().parent / "fw_rank.py"
ZYGOTE = Path(__file__).resolve().parent / "rank_zygote.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: What every rank imports; the zygote imports it once before it forks the ranks.
PRELOAD = ("torch", "torch.distributed", "stepwatch.producers.monitor")


def start_job(env: dict[str, str], tmp_path: Path, *, world: int, args: tuple[str, ...], script: Path = TRAIN_RANK,
              preload: tuple[str, ...] = ()) -> subprocess.Popen:
    """Start ``world`` ranks of ``script`` as OS processes (torchrun's env conventions), forked by
    tests/rank_zygote.py after one import of PRELOAD and ``preload``; rank R's output goes to tmp_path/rankR.log.
    The zygote exits when every rank did; ``terminate()`` stops it and its ranks."""
    zygote_env = dict(env, WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
                      OMP_NUM_THREADS="1")
    with open(tmp_path / "zygote.log", "w") as log:
        return subprocess.Popen([sys.executable, str(ZYGOTE), "--world", str(world), "--logs", str(tmp_path),
                                 "--preload", ",".join(PRELOAD + tuple(preload)), str(script), *args],
                                env=zygote_env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)


def run_ddp_job(env: dict[str, str], tmp_path: Path, *, world: int = 4, args: tuple[str, ...] = (),
                timeout: float = 240, script: Path = TRAIN_RANK, preload: tuple[str, ...] = ()) -> list[dict]:
    """Run ``world`` ranks of ``script`` (tests/train_rank.py) to their end (``start_job``); return their stats."""
    proc = start_job(env, tmp_path, world=world, script=script, preload=preload,
                     args=("--stats", str(tmp_path / "stats{rank}.json"), *args))
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()  # the zygote kills its ranks
        proc.wait()
    logs = "\n".join(f"--- rank {r}:\n" + (tmp_path / f"rank{r}.log").read_text(errors="replace")[-3000:]
                     for r in range(world) if (tmp_path / f"rank{r}.log").exists())
    codes = json.loads((tmp_path / "codes.json").read_text()) if (tmp_path / "codes.json").exists() else None
    assert proc.returncode == 0 and codes == [0] * world, \
        f"ranks exited with {codes} (zygote {proc.returncode}):\n{(tmp_path / 'zygote.log').read_text()}\n{logs}"
    return [json.loads((tmp_path / f"stats{r}.json").read_text()) for r in range(world)]
