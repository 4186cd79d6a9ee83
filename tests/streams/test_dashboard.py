"""The dashboard in a real headless Chromium against a running worker.

Needs Debian's ``chromium`` package (``apt-get install -y chromium``): found the way scripts/test
looks for it (``command -v chromium``: the first ``chromium`` on PATH); skipped without it, which
fails the run in CI (tests/allowed_skips.py).
Screenshots go to ``artifacts/`` (gitignored): ``dashboard.png`` (32 ranks, one straggler)
and ``dashboard-4096.png`` (4,096 ranks, aggregated rows).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from opsupport import free_port, get, send_steps, wait_for
from support import read_alerts

#: The same lookup as scripts/test's ``command -v chromium``.
CHROMIUM = shutil.which("chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium package: no chromium on PATH "
                                                "(apt-get install -y chromium)"),
]


def chromium(url: str, tmp_path: Path, *args: str) -> str:
    profile = tmp_path / f"chromium-{len(list(tmp_path.glob('chromium-*')))}"
    result = subprocess.run(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", "--virtual-time-budget=5000", "--window-size=1400,900", *args, url],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def row_count(dom: str) -> int:
    return len(re.findall(r'<div class="row[^"]*" style=', dom))


def marked_rows(dom: str) -> list[str]:
    return re.findall(r'<div class="row marked straggler"[^>]*data-ranks="([^"]+)"', dom)


@pytest.fixture(scope="module")
def stripe_worker(kafka_bootstrap, tmp_path_factory):
    """One worker for the straggler stripe and the markup test (which sends it nothing): (port, worker)."""
    import uuid

    from support import WorkerProcess, stepwatch_env

    port = free_port()
    tmp = tmp_path_factory.mktemp("dashboard-worker")
    env = stepwatch_env(kafka_bootstrap, f"t-dashboard-{uuid.uuid4().hex[:8]}.", STEPWATCH_WORKER_WEB_PORT=str(port),
                        STEPWATCH_WORKER_DATADIR=str(tmp / "faust"), STEPWATCH_STRAGGLER_WARMUP_STEPS="2",
                        STEPWATCH_HANG_WARNING_FLOOR_SECONDS="600")
    worker = WorkerProcess(env, tmp / "worker.log").wait_ready()
    try:
        yield port, worker
    finally:
        worker.discard()


def test_dashboard_shows_the_straggler_stripe_live(kafka_bootstrap, stripe_worker, tmp_path):
    port, worker = stripe_worker
    base = f"http://127.0.0.1:{port}"
    topic_prefix = worker.env["STEPWATCH_KAFKA_TOPIC_PREFIX"]
    events = topic_prefix + "events"
    send_steps(kafka_bootstrap, events, job="demo", ranks=32, steps=range(0, 60), slow_rank=13, factor=1.3)
    read_alerts(kafka_bootstrap, topic_prefix + "alerts", until=lambda a: any(x["job"] == "demo" for x in a))
    wait_for(lambda: b'"latest_step":59' in get(base + "/jobs")[1], what="every step consumed")

    dom = chromium(f"{base}/dashboard/demo", tmp_path, "--dump-dom")
    assert 'data-ready="1"' in dom, dom[-2000:]  # the page fetched and rendered the data
    assert marked_rows(dom) == ["13"]  # the straggler's row, and only it, is marked
    assert row_count(dom) == 32
    assert 'data-ranks="13"' in dom and "rank 13 on node node-001" in dom  # the open alert
    assert "suspected cause" in dom and "compute_time" in dom
    assert all(f'data-verdict="{v}"' in dom for v in ("confirmed", "false", "duplicate"))  # the feedback buttons
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "dashboard.png"
    shot.unlink(missing_ok=True)
    chromium(f"{base}/dashboard/demo", tmp_path, f"--screenshot={shot}")
    assert shot.stat().st_size > 10_000

    # The job list, and ?job= as an alternative path.
    dom = chromium(f"{base}/dashboard", tmp_path, "--dump-dom")
    assert 'href="/dashboard/demo"' in dom, dom[dom.index("<main"):dom.index("<script")]
    assert marked_rows(chromium(f"{base}/dashboard?job=demo", tmp_path, "--dump-dom")) == ["13"]

    # 4,096 ranks: rows become node ranges; the straggler's range is the one marked.
    send_steps(kafka_bootstrap, events, job="big", ranks=4096, steps=range(0, 12), slow_rank=1234, factor=1.5)
    read_alerts(kafka_bootstrap, topic_prefix + "alerts", until=lambda a: any(x["job"] == "big" for x in a),
                timeout=120)
    dom = chromium(f"{base}/dashboard/big", tmp_path, "--dump-dom")
    assert row_count(dom) == 256
    [rows] = marked_rows(dom)
    first, last = map(int, rows.split("-"))
    assert first <= 1234 <= last
    shot = ARTIFACTS / "dashboard-4096.png"
    shot.unlink(missing_ok=True)
    chromium(f"{base}/dashboard/big", tmp_path, f"--screenshot={shot}")
    assert shot.stat().st_size > 10_000
    assert worker.proc.poll() is None


HANG_ENV = {  # as tests/models/hang/test_hang_kafka.py: a warning after ~2-4.5 s of stall, critical after 8 s
    "STEPWATCH_HANG_TIMEOUT_SECONDS": "8",
    "STEPWATCH_HANG_WARNING_FACTOR": "5",
    "STEPWATCH_HANG_WARNING_FLOOR_SECONDS": "2",
    "STEPWATCH_HANG_HEARTBEAT_TIMEOUT_SECONDS": "2",
    "STEPWATCH_WORKER_TICK_INTERVAL": "0.5",
}


def test_dashboard_in_a_hang_marks_the_culprit_apart_and_says_how_long_no_step(kafka_bootstrap, topic_prefix,
                                                                               start_worker, tmp_path):
    import sys

    from support import REPO, stepwatch_env

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    start_worker(STEPWATCH_WORKER_WEB_PORT=str(port), **HANG_ENV)
    # Rank 5 (node-001) stops before step 15's first collective for 120 s; the other 7 ranks wait in it.
    sim = subprocess.Popen(
        [sys.executable, "-m", "stepwatch.cli", "simulate", "--job", "hang-dash", "--ranks", "8", "--ranks-per-node",
         "4", "--steps", "30", "--compute-time", "0.2", "--heartbeat-interval", "0.5", "--speed", "1",
         "--scenario", "hang", "--hang", "5:15:120"],
        env=stepwatch_env(kafka_bootstrap, topic_prefix), cwd=REPO, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        read_alerts(kafka_bootstrap, topic_prefix + "alerts",
                    until=lambda got: any(a["type"] == "hang" and a["job"] == "hang-dash" for a in got), timeout=90)
        dom = chromium(f"{base}/dashboard/hang-dash", tmp_path, "--dump-dom")
    finally:
        sim.kill()
        sim.wait()
    assert 'data-ready="1"' in dom, dom[-2000:]
    culprit_rows = re.findall(r'<div class="row marked hang culprit"[^>]*data-ranks="([^"]+)"', dom)
    waiting_rows = re.findall(r'<div class="row marked hang waiting"[^>]*data-ranks="([^"]+)"', dom)
    assert culprit_rows == ["5"], dom[dom.index('<div id="labels"'):][:3000]
    assert "5" not in waiting_rows and len(waiting_rows) >= 1
    header = dom[dom.index("<header>"):dom.index("</header>")]
    assert re.search(r"no step for \d+ s", header), header
    assert "steps/s" not in header  # no stale rate while nothing steps
    alerts = dom[dom.index('<div id="alerts"'):]
    assert re.search(r"suspected cause: <b>rank 5 on node-001", alerts), alerts[:3000]
    assert re.search(r'<div class="action">action: [^-<][^<]+</div>', alerts), alerts[:3000]


def test_a_job_id_with_markup_puts_no_raw_tag_in_the_page(stripe_worker, tmp_path):
    from urllib.parse import quote

    port, _ = stripe_worker
    for job in ("__JOB__<img src=x onerror=document.title='pwned'>", "</script><img src=x onerror=alert(1)>",
                "__TITLE__\"'&<marquee>"):
        dom = chromium(f"http://127.0.0.1:{port}/dashboard/{quote(job, safe='')}", tmp_path, "--dump-dom")
        assert "<img" not in dom and "<marquee" not in dom, dom[:3000]
        assert "<title>pwned</title>" not in dom  # the handler never ran
        assert "&lt;" in dom.split("</title>")[0]  # the id is shown, escaped

