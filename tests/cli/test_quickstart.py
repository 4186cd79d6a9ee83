"""The README's "Five minutes by hand", as a newcomer runs it: a fresh HOME, the worker, the simulated job
with its straggler, the alert, the dashboard. The simulation runs faster than the README's ``--speed 10``
(a later ``--speed`` wins); every other flag is the README's own, read from the README itself.
"""

from __future__ import annotations

import re
import shlex
import urllib.request
from pathlib import Path

import pytest
from support import read_alerts, run_stepwatch
from train_support import free_port

pytestmark = pytest.mark.kafka

README = Path(__file__).resolve().parents[2] / "README.md"


def quickstart_commands() -> list[list[str]]:
    """The ``stepwatch ...`` lines of the README's "Five minutes by hand" block, comments off, as argv lists."""
    text = README.read_text()
    section = text.split("## Five minutes by hand", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [shlex.split(line.split("#", 1)[0]) for line in block.splitlines() if line.startswith("stepwatch ")]


def test_the_readme_quickstart_names_the_straggler_and_serves_its_dashboard(kafka_bootstrap, topic_prefix,
                                                                            start_worker, tmp_path):
    commands = quickstart_commands()
    assert [c[1] for c in commands] == ["broker", "worker", "alerts", "simulate"]
    simulate = commands[-1]
    rank = int(simulate[simulate.index("--straggler") + 1].split(":")[0])
    home = tmp_path / "home"
    home.mkdir()
    port = free_port()
    worker = start_worker(HOME=str(home), STEPWATCH_WORKER_WEB_PORT=str(port))
    run_stepwatch(*simulate[1:], "--speed", "60", env=dict(worker.env, HOME=str(home)), timeout=180)
    alerts = read_alerts(kafka_bootstrap, topic_prefix + "alerts", timeout=120,
                         until=lambda a: any(x["type"] == "straggler" and x["status"] == "resolved" for x in a))
    stragglers = [a for a in alerts if a["type"] == "straggler"]
    assert stragglers and all(a["ranks"] == [rank] for a in stragglers), [a["summary"] for a in alerts]
    assert {a["type"] for a in alerts} == {"straggler"}, [a["summary"] for a in alerts]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/dashboard/sim-job", timeout=30) as page:
        assert page.status == 200 and "sim-job" in page.read().decode()
