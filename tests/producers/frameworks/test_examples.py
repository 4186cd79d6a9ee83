"""The runnable example (examples/ddp_gloo.py) as a newcomer runs it: torchrun, two CPU ranks, a real broker and worker.

The invariant for a two-rank job (issue 43): one cause, one alert. The slow rank is named in one
``straggler`` alert that resolves when the job ends; the job-wide slowdown the straggler causes is
not published beside it. Skipped without torch (``pip install -e '.[train-test]'``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="torch not installed (pip install -e '.[train-test]')")

from support import read_all_alerts  # noqa: E402
from train_support import free_port  # noqa: E402

pytestmark = pytest.mark.kafka

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "ddp_gloo.py"


def torchrun(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``torchrun --nproc-per-node 2 examples/ddp_gloo.py ARGS`` (torchrun is ``python -m torch.distributed.run``)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
           "--master-port", str(free_port()), str(EXAMPLE), *args]
    return subprocess.run(cmd, env=dict(env, OMP_NUM_THREADS="1"), cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def test_example_names_the_slow_rank_in_one_alert(kafka_bootstrap, topic_prefix, start_worker):
    worker = start_worker()
    run = torchrun(dict(worker.env, STEPWATCH_JOB="example-ddp"), "--steps", "120", "--slow-rank", "1")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    alerts = read_all_alerts(kafka_bootstrap, topic_prefix + "alerts",
                             until=lambda a: any(x["type"] == "straggler" and x["status"] == "resolved" for x in a))
    seen = [(a["status"], a["type"], a["ranks"]) for a in alerts]
    assert seen == [("firing", "straggler", [1]), ("resolved", "straggler", [1])], \
        f"{[a['summary'] for a in alerts]}; worker log:\n{worker.log_text()[-3000:]}"


def test_example_help_runs_without_torchrun():
    out = subprocess.run([sys.executable, str(EXAMPLE), "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "--slow-rank" in out.stdout, out.stderr
