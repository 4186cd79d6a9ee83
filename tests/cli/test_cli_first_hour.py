"""A newcomer's first hour on the command line (issue 28 item 8, issue 27 item 7): no traceback, no
wait without a message, nothing on the terminal that a job name can fake.

Each command runs as a real ``stepwatch`` subprocess. A dead bootstrap is a closed local port (bound,
then closed: nothing listens there); the alerts for ``report`` are real ones, from ``stepwatch simulate``
through ``stepwatch replay`` (the alert wire format of docs/events.md).
"""

from __future__ import annotations

import socket
import subprocess
import sys

import orjson
import pytest

from support import REPO, run_stepwatch


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def alerts_file(tmp_path_factory):
    """A straggler recording replayed into alerts (one firing, one resolved)."""
    d = tmp_path_factory.mktemp("first-hour")
    recording, alerts = d / "straggler.jsonl", d / "alerts.jsonl"
    run_stepwatch("simulate", "--scenario", "straggler", "--ranks", "16", "--steps", "120", "--out", str(recording),
                  env=_env())
    with open(alerts, "w") as out:
        subprocess.run([sys.executable, "-m", "stepwatch.cli", "replay", str(recording)], stdout=out, check=True,
                       cwd=REPO, env=_env(), timeout=120)
    assert alerts.stat().st_size > 0
    return alerts


def _env() -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("STEPWATCH_", "KAFKA_"))}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _stepwatch(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stepwatch.cli", *args], capture_output=True, text=True,
                          cwd=REPO, env=_env(), timeout=timeout)


# -- a dead bootstrap ---------------------------------------------------------------------------------

@pytest.mark.parametrize("command", [
    ["alerts", "--timeout", "30"],
    ["simulate", "--ranks", "4", "--steps", "3"],
    ["record"],
    ["config", "show"],
    ["config", "set", "straggler.window=8"],
    ["publish", "-"],
    ["report"],
    ["feedback", "--export"],
    ["feedback", "a1", "false"],
])
def test_every_kafka_client_fails_in_one_line_on_a_dead_bootstrap(command):
    bootstrap = f"127.0.0.1:{closed_port()}"
    # timeout=10: a command that waits longer on a dead broker fails the test with TimeoutExpired.
    result = subprocess.run([sys.executable, "-m", "stepwatch.cli", *command, "--bootstrap", bootstrap],
                            capture_output=True, text=True, cwd=REPO, env=_env(), timeout=10, input="")
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert 1 <= len(lines) <= 5, result.stderr
    assert "Traceback" not in result.stderr
    assert bootstrap in result.stderr and "unreachable" in result.stderr


# -- paths and ports ----------------------------------------------------------------------------------

def test_an_unwritable_simulate_out_is_one_line(tmp_path):
    result = _stepwatch("simulate", "--ranks", "4", "--steps", "3", "--out", str(tmp_path / "no" / "such" / "x.jsonl"))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"stepwatch simulate: {tmp_path / 'no' / 'such' / 'x.jsonl'}: No such file or directory"]


def test_an_unwritable_report_html_is_one_line(alerts_file, tmp_path):
    result = _stepwatch("report", str(alerts_file), "--html", str(tmp_path / "missing" / "r.html"))
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert "No such file or directory" in result.stderr
    result = _stepwatch("report", str(alerts_file), "--html", str(tmp_path))  # a directory
    assert result.returncode == 1 and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_the_broker_on_a_busy_port_says_so_in_one_line_and_never_ready():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = _stepwatch("broker", "--port", str(port), timeout=60)
    assert result.returncode == 1
    assert "ready" not in result.stdout + result.stderr.replace("already", "")
    assert result.stderr.strip().splitlines() == [
        f"stepwatch broker: port {port} on 127.0.0.1 is busy (Address already in use): another broker? stop it, "
        "or pick another with --port"]


# -- report FILE ----------------------------------------------------------------------------------------

def test_report_takes_the_file_as_replay_does_and_heads_with_the_incidents_span(alerts_file):
    positional = _stepwatch("report", str(alerts_file))
    option = _stepwatch("report", "--file", str(alerts_file))
    assert positional.returncode == 0 and positional.stdout == option.stdout
    alerts = [orjson.loads(line) for line in alerts_file.read_bytes().splitlines()]
    first = min(a["starts_at"] for a in alerts)
    last = max(a.get("ends_at") or a["starts_at"] for a in alerts)
    from datetime import datetime, timezone

    def minute(ts):
        return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")

    head = positional.stdout.splitlines()[0]
    assert head.startswith(f"stepwatch report: 1 incident(s) from {minute(first)} to {minute(last)} ("), head


def test_report_of_a_file_without_alerts_says_so_and_fails(tmp_path):
    garbage = tmp_path / "garbage.txt"
    garbage.write_bytes(b"not json\n\x00\x01\n{\"kind\": \"step\"}\n")
    for path in (garbage, tmp_path / "empty.jsonl"):
        path.touch()
        result = _stepwatch("report", str(path))
        assert result.returncode != 0
        assert result.stderr.strip().splitlines() == [
            f"stepwatch report: {path}: no alerts in it (expected JSON Lines of alerts, e.g. 'stepwatch replay' or "
            "'stepwatch alerts --json' output)"]
        assert "1969" not in result.stdout + result.stderr


# -- escaping ------------------------------------------------------------------------------------------

FAKE = "x\n2026-12-01 10:00 RESOLVED  all clear\x1b[2K\x9b1A\u202e"


def test_a_job_name_cannot_print_a_fake_line_in_report(alerts_file, tmp_path):
    forged = tmp_path / "forged.jsonl"
    with open(forged, "wb") as out:
        for line in alerts_file.read_bytes().splitlines():
            alert = orjson.loads(line)
            alert["job"] = FAKE
            alert["evidence"]["effective_compute"] = 0.5
            out.write(orjson.dumps(alert) + b"\n")
    result = _stepwatch("report", str(forged))
    assert result.returncode == 0, result.stderr
    assert not any(line.startswith("2026-12-01") for line in result.stdout.splitlines())
    assert "\x1b" not in result.stdout and "\x9b" not in result.stdout and "\u202e" not in result.stdout
    assert "x\\n2026-12-01 10:00 RESOLVED  all clear\\x1b[2K\\x9b1A\\u202e" in result.stdout


def test_the_alerts_row_status_view_and_replay_json_escape_control_characters(alerts_file):
    from stepwatch.commands.alerts import alert_table_row
    from stepwatch.commands.common import json_line
    from stepwatch.commands.status import format_job, format_jobs

    alert = orjson.loads(alerts_file.read_bytes().splitlines()[0])
    alert["job"] = alert["summary"] = FAKE
    alert["nodes"] = ["node-0\n01"]
    row = alert_table_row(alert, published=1_700_000_000.0)
    assert "\n" not in row and "\x1b" not in row and "\x9b" not in row and "\u202e" not in row
    assert "node-0\\n01" in row
    body = {"worker": "w", "partitions": [0], "jobs": [{"job": FAKE, "ranks": 1, "latest_step": 1, "phase": "train",
                                                        "open_alerts": 1, "alerts": [alert]}]}
    assert len(format_jobs(body).splitlines()) == 4
    job = {"job": FAKE, "latest_step": 1, "phase": "train", "alerts": [alert],
           "ranks": [{"rank": 0, "node": FAKE, "step": 1, "phase": "train"}]}
    text = format_job(job)
    assert "\x1b" not in text and not any(line.startswith("2026-12-01") for line in text.splitlines())
    line = json_line(alert)
    assert "\x9b" not in line and "\u202e" not in line and orjson.loads(line) == alert


def test_alerts_row_has_the_uncut_type_node_port_action_and_published_time():
    from stepwatch.commands.alerts import alert_table_header, alert_table_row
    from stepwatch.models.alert_types import ALERT_TYPES

    alert = {"id": "a", "status": "firing", "type": "checkpoint_stale", "severity": "warning", "job": "j",
             "ranks": [], "nodes": ["node-007", "node-009"], "starts_at": 1.0, "summary": "s",
             "evidence": {"device": "mlx5_0", "port": 1},
             "annotations": {"recommended_action": "Drain node-007 and page the fabric team."}}
    row = alert_table_row(alert, published=1_700_000_000.0)
    assert row.startswith("2023-11-14T22:13:20Z")  # the published time, not the onset (starts_at=1)
    assert " checkpoint_stale " in row and "node-007 mlx5_0/1 +1" in row
    assert row.endswith("  s | Drain node-007 and page the fabric team.")  # what happened, then what to do
    assert alert_table_header().split()[:3] == ["TIME", "(UTC)", "STATUS"]
    assert alert_table_header().endswith("SUMMARY | ACTION")
    for alert_type in ALERT_TYPES:  # never cut
        assert f" {alert_type} " in alert_table_row(dict(alert, type=alert_type), published=1.0)


def test_the_declared_alert_types_are_every_type_the_worker_classifies():
    from stepwatch.models.registry import type_classes

    TYPE_CLASSES = type_classes()
    from stepwatch.models.alert_types import ALERT_TYPES

    # straggler and hang are classified by their evidence, the others by type (models/oncall/actions.py).
    assert set(ALERT_TYPES) == set(TYPE_CLASSES) | {"straggler", "hang"}


# -- scenarios and help --------------------------------------------------------------------------------

def test_every_scenario_that_scenarios_lists_is_accepted_by_simulate(tmp_path):
    listed = [line.split()[0] for line in _stepwatch("scenarios").stdout.splitlines() if line.strip()]
    assert len(listed) > 50
    from stepwatch.sim import scenarios

    assert listed == scenarios.names()
    # Every name resolves through simulate's own lookup; two small ones run end to end.
    from stepwatch.commands.simulate import FLAG_SCENARIOS, library_scenario

    for name in listed:
        assert name not in FLAG_SCENARIOS
        assert library_scenario(name).name == name
    for name in ("healthy-8", "checkpoint-stops-16"):
        out = tmp_path / f"{name}.jsonl"
        result = _stepwatch("simulate", "--scenario", name, "--out", str(out), timeout=120)
        assert result.returncode == 0, result.stderr
        jobs = {orjson.loads(line).get("job") for line in out.read_bytes().splitlines()}
        assert jobs == {s.job for s in scenarios.get(name).specs}
    result = _stepwatch("simulate", "--scenario", "no-such-scenario", "--out", str(tmp_path / "x"))
    assert result.returncode != 0 and "unknown scenario 'no-such-scenario'" in result.stderr
    assert "Traceback" not in result.stderr


def test_two_simulated_jobs_can_keep_their_nodes_apart(tmp_path):
    nodes = {}
    for job in ("job-a", "job-b"):
        out = tmp_path / f"{job}.jsonl"
        assert _stepwatch("simulate", "--job", job, "--ranks", "16", "--steps", "3", "--node-prefix", "job",
                          "--out", str(out)).returncode == 0
        nodes[job] = {orjson.loads(line).get("node") for line in out.read_bytes().splitlines()} - {None}
    assert nodes["job-a"] == {"job-a-node-000", "job-a-node-001"}
    assert not nodes["job-a"] & nodes["job-b"]


def test_every_argument_and_subcommand_has_help_and_config_set_lists_the_fields():
    import argparse

    from stepwatch.cli import build_parser

    missing = []

    def walk(parser, path):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                helps = {c.dest: c.help for c in action._choices_actions}
                for name, sub in action.choices.items():
                    if not helps.get(name):
                        missing.append(" ".join(path + [name]))
                    walk(sub, path + [name])
            elif not isinstance(action, argparse._HelpAction) and not action.help:
                missing.append(" ".join(path) + " " + "/".join(action.option_strings or [action.dest]))

    walk(build_parser(), ["stepwatch"])
    assert missing == []
    text = _stepwatch("config", "set", "--help").stdout
    assert "straggler.ratio_threshold (default" in text and "hang.timeout_seconds (default" in text
    alerts_help = _stepwatch("alerts", "--help").stdout
    for alert_type in ("straggler", "hang", "link_errors", "node_suspect", "job_restart", "gpu_hot"):
        assert alert_type in alerts_help


# -- stepwatch alerts against the real broker ----------------------------------------------------------

@pytest.mark.kafka
def test_alerts_prints_one_line_per_incident_update_escaped_with_the_published_time(kafka_bootstrap, topic_prefix,
                                                                                    alerts_file):
    from datetime import datetime, timezone

    from kafka import KafkaProducer

    from support import stepwatch_env

    firing, resolved = [orjson.loads(line) for line in alerts_file.read_bytes().splitlines()]
    for alert in (firing, resolved):
        alert["job"] = FAKE
    topic = topic_prefix + "alerts"
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    published = 1_764_000_000_000  # ms: the record's own time, not the alert's onset
    # The firing state twice (a republish), then the resolution: two updates of one incident.
    for k, alert in enumerate((firing, firing, resolved)):
        producer.send(topic, orjson.dumps(alert), timestamp_ms=published + k * 1000)
    producer.flush()
    producer.close()
    result = run_stepwatch("alerts", "--from-beginning", "--timeout", "5", env=stepwatch_env(kafka_bootstrap,
                                                                                              topic_prefix))
    lines = result.stdout.splitlines()
    assert len(lines) == 3, result.stdout  # header, FIRING, RESOLVED
    def stamp(ms):
        return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    # Each line carries when its latest message was published (the republish, then the resolution).
    assert lines[1].startswith(f"{stamp(published + 1000)}  FIRING"), lines
    assert lines[2].startswith(f"{stamp(published + 2000)}  RESOLVED"), lines
    assert "straggler" in lines[1] and firing["nodes"][0] in lines[1]
    assert "\x1b" not in result.stdout and "\x9b" not in result.stdout and "\u202e" not in result.stdout
    assert not any(line.startswith("2026-12-01") for line in lines)
    assert firing["annotations"].get("recommended_action", "-") in lines[1]


def test_one_io_fault_on_one_node_is_one_incident_two_lines(tmp_path):
    """host-io-64: one IO fault on node-002 under all 8 of its ranks. The worker makes it one node incident
    (models/telemetry/incidents.py; it was a straggler alert per rank, 24 messages), and the table prints it as one
    firing and one resolved line, with the node and its ranks; the table's own grouping of per-rank alerts of
    one node is tested below with the alerts split per rank as older workers published them."""
    from stepwatch.commands.incidents import IncidentLines

    recording, alerts_path = tmp_path / "host-io.jsonl", tmp_path / "alerts.jsonl"
    run_stepwatch("simulate", "--scenario", "host-io-64", "--out", str(recording), env=_env(), timeout=180)
    with open(alerts_path, "w") as out:
        subprocess.run([sys.executable, "-m", "stepwatch.cli", "replay", str(recording)], stdout=out, check=True,
                       cwd=REPO, env=_env(), timeout=180)
    alerts = [orjson.loads(line) for line in alerts_path.read_bytes().splitlines()]
    assert len({a["id"] for a in alerts}) == 1, [a["summary"] for a in alerts]  # one node incident
    assert alerts[0]["ranks"] == list(range(16, 24)) and alerts[0]["nodes"] == ["node-002"]
    lines = IncidentLines()
    for alert in alerts:
        lines.add(alert, 1_700_000_000.0)
    out = lines.flush()
    assert len(out) == 2, out
    assert " FIRING " in out[0] and " RESOLVED " in out[1]
    assert all("node-002" in line and " 16-23 " in line for line in out)
    # One alert at a time (each its own poll): never more lines than messages, one per state change.
    lines = IncidentLines()
    printed = []
    for alert in alerts:
        lines.add(alert, 1_700_000_000.0)
        printed += lines.flush()
    assert len(printed) <= len(alerts) and " RESOLVED " in printed[-1]
    # Per-rank alerts of one node (as a worker without node incidents published them): still two lines.
    split = [dict(a, id=f"{a['id']}-{r}", ranks=[r], summary=a["summary"].replace("node node-002", f"rank {r}"))
             for a in alerts for r in a["ranks"]]
    lines = IncidentLines()
    for alert in split:
        lines.add(alert, 1_700_000_000.0)
    out = lines.flush()
    assert len(out) == 2 and all("node-002" in line and " 16-23 " in line for line in out), out


# -- issue 43 item 2 / issue 44 row 14: ports, Ctrl-C, full disks, the worker's start ------------------

def _one_line(result: subprocess.CompletedProcess, code: int) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == code, (result.returncode, result.stderr)
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


@pytest.fixture
def silent_port():
    """A port that accepts connections and never answers (not Kafka)."""
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    held = []
    stop = threading.Event()

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


@pytest.mark.parametrize("command", [["alerts", "--timeout", "30"], ["record"], ["config", "show"],
                                     ["worker", "--web-port", "0"]])
def test_a_port_that_is_not_kafka_is_one_line_within_ten_seconds(command, silent_port):
    bootstrap = f"127.0.0.1:{silent_port}"
    # timeout: the 10 s a command may wait on a port that does not answer, plus the interpreter's start.
    result = subprocess.run([sys.executable, "-m", "stepwatch.cli", *command, "--bootstrap", bootstrap],
                            capture_output=True, text=True, cwd=REPO, env=_env(), timeout=25)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert bootstrap in lines[-1] and len(lines) <= 2, result.stderr
    if command[0] == "worker":  # it says what it waits for first, then why it stopped
        assert lines[0].startswith(f"stepwatch worker: waiting for Kafka at {bootstrap}")
        assert "did not answer as Kafka" in lines[-1]


def test_a_busy_web_port_is_one_line_naming_it(kafka_bootstrap):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = _stepwatch("worker", "--bootstrap", kafka_bootstrap, "--web-port", str(port), timeout=60)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"stepwatch worker: web port {port} on 127.0.0.1 is busy (Address already in use): another worker on "
        "this host? give this one --web-port PORT (or STEPWATCH_WORKER_WEB_PORT; 0: no web server)")


def _interrupted(args: list[str], *, env: dict[str, str], ready: str = "", until=None, unblock=None, **popen
                 ) -> subprocess.CompletedProcess:
    """``stepwatch ARGS`` sent SIGINT (Ctrl-C) once ``ready`` shows on its stderr, or once ``until(proc)``
    returns (a condition it waits for, never a fixed sleep). ``unblock()``: called while it has not exited, for a
    process whose signal came during a write to a full pipe: Python's buffered writer goes on with the rest of a
    partial write in C, and the KeyboardInterrupt is raised only once that write returns (the suite hung on it
    once, 2026-12-06)."""
    import signal

    proc = subprocess.Popen([sys.executable, "-m", "stepwatch.cli", *args], cwd=REPO, env=env,
                            stdout=popen.pop("stdout", subprocess.DEVNULL), stderr=subprocess.PIPE, **popen)
    seen = []
    if until is not None:
        until(proc)
    else:
        for line in proc.stderr:
            seen.append(line.decode())
            if ready in seen[-1]:
                break
    proc.send_signal(signal.SIGINT)
    for _ in range(120):
        try:
            proc.wait(timeout=0.5 if unblock is not None else 60)
            break
        except subprocess.TimeoutExpired:
            if unblock is None:
                raise
            unblock()
    rest = proc.stderr.read().decode()
    proc.wait(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, "", "".join(seen) + rest)


def test_ctrl_c_exits_130_quietly_in_simulate_and_replay(tmp_path):
    import os
    import select

    env = _env()
    # simulate writing into a FIFO nobody drains: interrupted mid-write, once its first bytes are there
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        def drain():
            try:
                os.read(reader, 1 << 20)
            except BlockingIOError:
                pass

        simulate = _interrupted(["simulate", "--ranks", "4", "--steps", "100000", "--out", str(fifo)], env=env,
                                until=lambda proc: select.select([reader], [], [], 60), unblock=drain)
    finally:
        os.close(reader)
    assert simulate.returncode == 130, simulate.stderr
    assert "Traceback" not in simulate.stderr and "KeyboardInterrupt" not in simulate.stderr
    # replay reading a pipe that never ends: interrupted once it has taken more than a pipe holds
    read_end, write_end = os.pipe()
    line = b'{"kind":"step","job":"j","rank":0,"step":1,"ts":1.0,"duration":1.0}\n'

    def fed(proc):
        os.write(write_end, line * (4 * 65_536 // len(line)))  # returns once replay has read most of it

    try:
        replay = _interrupted(["replay", "-"], env=env, until=fed, stdin=read_end)
    finally:
        os.close(read_end)
        os.close(write_end)
    assert replay.returncode == 130, replay.stderr
    assert "Traceback" not in replay.stderr and "KeyboardInterrupt" not in replay.stderr


@pytest.mark.kafka
def test_ctrl_c_exits_130_quietly_in_alerts(kafka_bootstrap, topic_prefix):
    from support import stepwatch_env

    result = _interrupted(["alerts"], ready="waiting for alerts", env=stepwatch_env(kafka_bootstrap, topic_prefix))
    assert result.returncode == 130, result.stderr
    assert "Traceback" not in result.stderr and "KeyboardInterrupt" not in result.stderr


@pytest.fixture(scope="module")
def recorded_topics(kafka_bootstrap, tmp_path_factory):
    """Topics holding a small simulated job (the same for every record test of this module)."""
    import uuid

    from support import stepwatch_env

    env = stepwatch_env(kafka_bootstrap, f"rec-{uuid.uuid4().hex[:8]}.")
    run_stepwatch("simulate", "--ranks", "8", "--steps", "40", "--compute-time", "0.001", env=env)
    return env


@pytest.mark.kafka
def test_record_into_dev_full_is_one_line(recorded_topics):
    result = subprocess.run([sys.executable, "-m", "stepwatch.cli", "record", "-o", "/dev/full"], cwd=REPO,
                            env=recorded_topics, capture_output=True, text=True, timeout=60)
    line = _one_line(result, 1)
    assert line.startswith("stepwatch record: /dev/full: No space left on device; stopped after 0 complete lines")


@pytest.mark.kafka
@pytest.mark.parametrize("limit", [1, 700, 4096, 65_537])
def test_record_on_a_full_disk_ends_with_a_whole_line(recorded_topics, tmp_path, limit):
    """A file size limit (RLIMIT_FSIZE, EFBIG: what a full disk's ENOSPC is to the writer) cuts the recording at
    any byte; the file keeps only whole lines, and the line says how many."""
    import json
    import resource
    import signal

    out = tmp_path / "rec.jsonl"

    def limited():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails (EFBIG) instead of killing the process
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    result = subprocess.run([sys.executable, "-m", "stepwatch.cli", "record", "-o", str(out)], cwd=REPO,
                            env=recorded_topics, capture_output=True, text=True, timeout=60, preexec_fn=limited)
    line = _one_line(result, 1)
    data = out.read_bytes()
    assert data == b"" or data.endswith(b"\n")
    lines = data.splitlines()
    assert all(json.loads(x) for x in lines)
    assert line.startswith(f"stepwatch record: {out}: File too large; stopped after {len(lines)} complete lines")


def test_the_benign_start_and_rebalance_errors_are_demoted_and_real_ones_kept():
    import logging

    from aiokafka import errors as aiokafka_errors
    from kafka import errors as kafka_errors

    from stepwatch.streams.benign_logs import install

    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    handler = Keep(level=logging.DEBUG)
    names = ["aiokafka.consumer.group_coordinator", "faust.transport.drivers.aiokafka", "aiokafka.consumer.fetcher",
             "kafka.cluster"]
    benign = install()
    try:
        for name in names:
            logging.getLogger(name).addHandler(handler)
            logging.getLogger(name).setLevel(logging.INFO)
        coordinator = logging.getLogger(names[0])
        coordinator.error("Group Coordinator Request failed: %s", aiokafka_errors.GroupCoordinatorNotAvailableError())
        coordinator.error("Group Coordinator Request failed: %s", aiokafka_errors.GroupAuthorizationFailedError())
        faust_log = logging.getLogger(names[1])
        faust_log.error("[^---AIOKafkaConsumerThread]: Aiokafka has not sent fetch request for %r since start "
                        "(started %s)\n\nThe cause may be ...", "TP(topic='e', partition=0)", "12.00 minutes ago")
        faust_log.error("[^---AIOKafkaConsumerThread]: Aiokafka stopped fetching from %r (last done %s)", "tp", "1m")
        logging.getLogger(names[2]).error("Failed fetch offsets from %s: %s", 1,
                                          aiokafka_errors.NotLeaderForPartitionError())
        logging.getLogger(names[3]).error("Metadata refresh: failed %s", kafka_errors.Cancelled())
    finally:
        for name in names:
            logging.getLogger(name).removeHandler(handler)
            logging.getLogger(name).removeFilter(benign)
            logging.getLogger(name).setLevel(logging.NOTSET)
    # At info: the coordinator's election, the new topic's leader and the closing client are not shown; the
    # rebalance's fetch message is info with what it means; a refused group and a real stall stay errors.
    got = [(r.levelname, r.getMessage().splitlines()[0]) for r in records]
    assert got == [
        ("ERROR", "Group Coordinator Request failed: [Error 30] GroupAuthorizationFailedError"),
        ("INFO", "[^---AIOKafkaConsumerThread]: Aiokafka has not sent fetch request for \"TP(topic='e', partition=0)\" "
                 "since start (started 12.00 minutes ago) [benign after a rebalance: counted from the consumer's "
                 "start, not the partition's]"),
        ("ERROR", "[^---AIOKafkaConsumerThread]: Aiokafka stopped fetching from 'tp' (last done 1m)"),
    ], got


@pytest.mark.kafka
def test_the_worker_prints_one_ready_line_with_its_topics_and_urls(kafka_bootstrap, topic_prefix, tmp_path):
    from support import WorkerProcess, stepwatch_env

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = stepwatch_env(kafka_bootstrap, topic_prefix, STEPWATCH_WORKER_WEB_PORT=str(port),
                        STEPWATCH_WORKER_DATADIR=str(tmp_path / "faust"))
    worker = WorkerProcess(env, tmp_path / "worker.log").wait_ready()
    try:
        import time

        deadline = time.monotonic() + 60
        while "stepwatch worker: ready:" not in worker.log_text() and time.monotonic() < deadline:
            time.sleep(0.2)  # polling the log for a condition, not a timed assertion
        text = worker.log_text()
        # "/" leads to the dashboard (not Faust's {"status": "OK"})
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as page:
            assert page.url == f"http://127.0.0.1:{port}/dashboard"
            assert b"<title>stepwatch jobs</title>" in page.read()
    finally:
        worker.discard()  # its log is read: no graceful stop to wait for
    ready = [line for line in text.splitlines() if "stepwatch worker: ready:" in line]
    assert len(ready) == 1, text[-3000:]
    assert ready[0].startswith(f"stepwatch worker: ready: consuming {topic_prefix}events, ")
    assert f"dashboard http://127.0.0.1:{port}/dashboard; metrics http://127.0.0.1:{port}/metrics" in ready[0]
    assert "consumer aiokafka" in ready[0] or "consumer faust" in ready[0]
    assert "[ERROR]" not in text, [line for line in text.splitlines() if "[ERROR]" in line]


# -- issue 43 item 4: nothing valid is a failure; every file error names the file -------------------------

NOT_EVENTS = [b"", b"not json\n\x00\x01\n", b'{"kind": "alert", "id": "x"}\n{"kind":"step"}\n', bytes(range(256)) * 4]


@pytest.mark.parametrize("content", NOT_EVENTS)
def test_replay_of_a_file_without_a_valid_event_fails_naming_it(tmp_path, content):
    path = tmp_path / "wrong.jsonl"
    path.write_bytes(content)
    result = _stepwatch("replay", str(path))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stdout == ""
    assert result.stderr.strip().splitlines()[-1].startswith(f"stepwatch replay: no valid event in {path} ")


@pytest.mark.kafka
@pytest.mark.parametrize("content", [NOT_EVENTS[1], NOT_EVENTS[3]])  # publish sends JSON objects unvalidated
def test_publish_of_a_file_without_a_valid_event_fails_naming_it(tmp_path, content, kafka_bootstrap, topic_prefix):
    path = tmp_path / "wrong.jsonl"
    path.write_bytes(content)
    result = _stepwatch("publish", "--bootstrap", kafka_bootstrap, "--topic-prefix", topic_prefix, str(path))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(f"stepwatch publish: no valid event in {path}: nothing")


def test_import_of_a_missing_or_binary_file_is_one_line_naming_it(tmp_path):
    missing = tmp_path / "missing.csv"
    line = _one_line(_stepwatch("import", str(missing)), 1)
    assert line == f"stepwatch import: {missing}: no such file; nothing imported"
    binary = tmp_path / "trace.csv"
    binary.write_bytes(bytes(range(256)) * 64)
    line = _one_line(_stepwatch("import", str(binary), "--col", "rank=r", "--col", "step=s", "--col",
                                "step_time=t"), 1)
    assert line.startswith(f"stepwatch import: {binary}: not a UTF-8 CSV file"), line
    parquet = tmp_path / "trace.parquet"
    parquet.write_bytes(b"PAR1 not really")
    result = _stepwatch("import", str(parquet), "--col", "rank=r", "--col", "step=s", "--col", "step_time=t")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert str(parquet) in result.stderr.strip().splitlines()[-1]


# -- stepwatch status: the culprit first, readable times, the worker's token ------------------------------

def _hang_job(culprit: int, ranks: int = 64, stalled_since: float = 1_796_419_937.58) -> dict:
    alert = {"id": "h", "type": "hang", "severity": "critical", "status": "firing", "ranks": list(range(ranks)),
             "summary": f"hang: culprit rank {culprit}",
             "evidence": {"stalled_since": stalled_since, "checked_at": stalled_since + 30, "step": 99,
                          "culprits": [{"rank": culprit, "node": f"node-{culprit // 8:03d}"}],
                          "behind": {"count": 1, "ranks": [culprit]}}}
    # Every stuck rank carries the alert; the culprit's ratio is nothing special (it is waiting, not slow).
    rows = [{"rank": r, "node": f"node-{r // 8:03d}", "step": 99, "last_event_age": 30.0,
             "ratio": 1.0 + ((r * 7919) % 13) / 100, "robust_z": 0.0, "phase": "train", "alert": "hang"}
            for r in range(ranks)]
    return {"job": "j", "rank_count": ranks, "latest_step": 99, "phase": "train", "alerts": [alert], "ranks": rows}


@pytest.mark.parametrize("culprit", [0, 5, 37, 63])
def test_status_lists_the_culprit_first_and_times_as_iso_and_age(culprit):
    from stepwatch.commands.status import format_job

    stalled = 1_796_419_937.58
    text = format_job(_hang_job(culprit, stalled_since=stalled), now=stalled + 42)
    lines = text.splitlines()
    header = next(k for k, line in enumerate(lines) if line.split()[:2] == ["RANK", "NODE"])
    first = lines[header + 1].split()
    assert first[0] == str(culprit) and lines[header + 1].endswith("hang (culprit)"), text
    assert f"culprit: rank {culprit} on node-{culprit // 8:03d}" in text
    assert "stalled_since=2026-12-04T" in text and "(42 s ago)" in text
    assert "1796419937" not in text


def test_status_sends_the_token_from_its_file_and_says_what_a_401_wants(tmp_path):
    import http.server
    import threading

    token = "s3cret-token"

    class Pages(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            ok = self.headers.get("Authorization") == f"Bearer {token}"
            body = b'{"worker": "w", "partitions": [0], "jobs": []}' if ok else b'{"error": "a bearer token is required"}'
            self.send_response(200 if ok else 401)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        token_file = tmp_path / "token"
        token_file.write_text(token + "\n")
        without = _stepwatch("status", "--url", url)
        assert without.returncode == 1 and "Traceback" not in without.stderr
        assert "--token-file FILE" in without.stderr
        for args, extra in ((["--token-file", str(token_file)], {}), (["--token", token], {}),
                            ([], {"STEPWATCH_WORKER_WEB_TOKEN_FILE": str(token_file)})):
            result = subprocess.run([sys.executable, "-m", "stepwatch.cli", "status", "--url", url, *args],
                                    capture_output=True, text=True, cwd=REPO, env={**_env(), **extra}, timeout=60)
            assert result.returncode == 0, result.stderr
            assert "(no jobs on this worker)" in result.stdout
        missing = _one_line(_stepwatch("status", "--url", url, "--token-file", str(tmp_path / "nope")), 1)
        assert missing == f"stepwatch status: {tmp_path / 'nope'}: No such file or directory (the token file)"
    finally:
        server.shutdown()
        server.server_close()


def test_an_alerts_row_fits_the_terminal_summary_first_and_never_cuts_type_job_or_node():
    import random
    import uuid

    from stepwatch.commands.alerts_table import alert_table_row
    from stepwatch.models.alert_types import ALERT_TYPES

    rng = random.Random(43)
    for _ in range(300):
        job = rng.choice([str(uuid.UUID(int=rng.getrandbits(128))), "llm-70b", "j" * rng.randrange(1, 50)])
        node = rng.choice(["node-007", "gpu-rack12-host-0042.cluster.example.com"])
        summary = " ".join(rng.choice(["straggler", "rank", "17", "on", node, "slower", "than", "peers", "1.3x"])
                           for _ in range(rng.randrange(1, 60)))
        action = ". ".join("Drain the node and page the fabric team" for _ in range(rng.randrange(1, 5)))
        alert = {"id": "a", "status": rng.choice(["firing", "resolved"]), "type": rng.choice(ALERT_TYPES),
                 "severity": "warning", "job": job, "ranks": sorted(rng.sample(range(4096), rng.randrange(0, 20))),
                 "nodes": [node], "starts_at": 1.0, "summary": summary,
                 "evidence": rng.choice([{}, {"device": "mlx5_0", "port": 1}]),
                 "annotations": {"recommended_action": action}}
        width = rng.randrange(80, 300)
        row = alert_table_row(alert, published=1_700_000_000.0, width=width)
        whole = alert_table_row(alert, published=1_700_000_000.0)
        assert f" {alert['type']} " in row and f" {job} " in row and node in row  # never cut
        fixed = whole[:whole.index(summary)]  # time .. ranks: what is left to cut is the summary and the action
        assert len(row) <= max(width, len(fixed) + 30 + 3 + 61), (width, row)
        assert row.index(summary[:10]) < row.index(" | ")  # the summary first, the action after it
        assert whole.endswith(f"{summary} | {action}")  # whole: every character
        assert "~" not in whole[len(fixed):] or "~" in summary + action


def test_report_html_says_where_it_wrote_and_has_every_text_section(alerts_file, tmp_path):
    import re

    out = tmp_path / "r.html"
    result = _stepwatch("report", str(alerts_file), "--html", str(out))
    assert result.returncode == 0 and result.stdout == ""
    assert _one_line(result, 0).startswith(f"stepwatch report: wrote {out} (1 incident(s) from ")
    text = _stepwatch("report", str(alerts_file)).stdout
    page = re.sub(r"\s+", " ", out.read_text()).lower()
    # Every heading of the text report (an unindented line after the first; its title before a colon or the
    # column names) is a heading of the page.
    titles = [re.split(r":|\s{2,}", line)[0].strip().lower() for line in text.splitlines()[1:]
              if line and not line.startswith(" ")]
    assert "gpu-hours lost by cause" in titles and len(titles) >= 5
    for title in titles:
        assert f"<h2>{title}</h2>" in page, title
