"""Jobs with no stepwatch code: NCCL Inspector logs and NCCL RAS read by the node agent (issue 24).

The agent's real code reads Inspector logs written in NCCL's format (tests/nccl_fixtures.py)
from files, maps pids through a /proc tree, and queries a local TCP server speaking RAS's
protocol; the worker's engine judges what it sends.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import orjson
import pytest
from nccl_fixtures import TORCHRUN, COMM_ID, RasServer, ras_status, rank_env, slurm_cgroup, write_job, write_proc
from support import run_stepwatch

from stepwatch.config import Settings
from stepwatch.models.detection import DetectionEngine
from stepwatch.models.wire.events import decode_message, parse_event
from stepwatch.producers.nccl_inspector import InspectorReader, InspectorSettings
from stepwatch.producers.nccl_ras import RasError, RasPoller, heartbeats, query_status
from stepwatch.producers.proc_identity import ProcTable, job_identity, rank_of

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl"
WINDOW = 16


def _read(host: dict, node: str, *, window: int = WINDOW) -> tuple[list[dict], InspectorReader]:
    reader = InspectorReader(InspectorSettings(directory=str(host["dir"]), window_size=window), node=node,
                             procs=ProcTable(host["proc"]))
    return reader.poll(final=True), reader


def _engine_alerts(events: list[dict]) -> list:
    engine = DetectionEngine()
    out = []
    for e in events:
        out.extend(engine.process(parse_event(e)))
    return out, engine


# -- job identity and pids ------------------------------------------------------------------

@pytest.mark.parametrize("env, job", [
    ({"STEPWATCH_JOB": "a", "SLURM_JOB_ID": "9"}, "a"),
    ({"TORCHELASTIC_RUN_ID": "none", "SLURM_JOB_ID": "9", "SLURM_STEP_ID": "2"}, "9.2"),
    ({"TORCHELASTIC_RUN_ID": "run-1", "SLURM_JOB_ID": "9"}, "run-1"),
    ({"JOB_NAME": "llm-pretrain"}, "llm-pretrain"),
    ({"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}, "10.0.0.1:29500"),
    ({"PATH": "/bin"}, None),
])
def test_job_identity_follows_the_rank_monitors_order(env, job):
    assert job_identity(env) == job



@pytest.mark.parametrize("env", [
    {"STEPWATCH_JOB": "a"}, {"TORCHELASTIC_RUN_ID": "run-1"}, {"SLURM_JOB_ID": "9", "SLURM_STEP_ID": "2"},
    {"SLURM_JOBID": "9", "SLURM_STEPID": "2"}, {"STEPWATCH_K8S_JOB_NAME": "llama-ft", "STEPWATCH_K8S_JOB_UID": "0f3c9a1e-7"},
])
def test_the_agent_names_a_job_as_its_rank_monitor_does(env):
    """A job that runs the callback and is read by the agent too is one job (issue 24 item 3)."""
    from stepwatch.producers.job_identity import job_identity as monitor_identity

    mine = monitor_identity(env)
    assert not mine.guessed and job_identity(env) == mine.job

def test_rank_comes_from_RANK_never_SLURM_PROCID():
    assert rank_of({"RANK": "13", "SLURM_PROCID": "1"}) == 13
    assert rank_of({"SLURM_PROCID": "1"}) is None


def test_a_container_pid_is_mapped_through_NSpid(tmp_path):
    write_proc(tmp_path, 52001, rank_env("77", 9, 16, 1, "pod-1"), ns_pid=18, cgroup=slurm_cgroup("77"))
    write_proc(tmp_path, 18, {"PATH": "/bin"})  # the host's own pid 18 is an unrelated process
    info = ProcTable(tmp_path).lookup(18, "pod-1")
    assert (info.pid, info.job, info.rank) == (52001, "77", 9)


# -- the Inspector reader -------------------------------------------------------------------

def test_the_readme_records_of_nccl_parse(tmp_path):
    """The two records of plugins/profiler/inspector/README.md (NCCL v2.30.7), verbatim."""
    d = FIXTURES / "inspector-readme"
    procs = tmp_path / "proc"
    # The fixture's environments, under the torchrun that set them, run by the user who owns the logs.
    write_proc(procs, 400000, {}, cmdline=TORCHRUN, uid=(d / "example-hostname-pid438776.log").stat().st_uid)
    for pid_dir in (FIXTURES / "inspector-readme-proc").iterdir():
        env = dict(kv.split("=", 1) for kv in (pid_dir / "environ").read_text().split("\0") if "=" in kv)
        write_proc(procs, int(pid_dir.name), env, ppid=400000, uid=(d / "example-hostname-pid438776.log").stat().st_uid)
    reader = InspectorReader(InspectorSettings(directory=str(d), window_size=1), node="n", procs=ProcTable(procs))
    events = reader.poll(final=True)
    assert reader.counts["records"] == 2 and reader.counts["bad_lines"] == 0
    by_op = {e["op"]: e for e in events}
    assert by_op["AllReduce"]["exec_sum"] == pytest.approx(0.061974)
    assert by_op["AllReduce"]["window"] == 1407 and by_op["AllReduce"]["n_ranks"] == 8
    assert by_op["ReduceScatter"]["comm"] == "0xe62dedaa97644a" and by_op["ReduceScatter"]["rank"] == 4
    for e in events:
        parse_event(e)  # valid wire events


@pytest.mark.parametrize("layout", ["per-line", "marker"])
def test_both_layouts_give_the_same_windows(tmp_path, layout):
    hosts = write_job(tmp_path / layout, job="4242", n_colls=64, late_rank=None, layout=layout, dump_every=20)
    events, reader = _read(hosts["gpu-b"], "gpu-b")
    assert reader.counts["records"] == 8 * 64 and reader.counts["orphan_records"] == 0
    assert {(e["rank"], e["window"]) for e in events} == {(r, w) for r in range(8, 16) for w in range(4)}
    assert all(e["count"] == WINDOW and e["job"] == "4242" and e["node"] == "gpu-b" for e in events)
    if layout == "marker":
        assert reader.counts["markers"] == 8 * 4


def test_partial_lines_rotation_truncation_and_bad_lines(tmp_path):
    hosts = write_job(tmp_path, job="j", n_colls=40, late_rank=None, dump_every=40)
    host = hosts["gpu-a"]
    path = host["dir"] / "gpu-a-pid41000.log"
    full = path.read_bytes()
    cut = full.index(b"\n", len(full) // 2) + 30
    path.write_bytes(full[:cut])  # mid-line: the dump thread is still writing
    reader = InspectorReader(InspectorSettings(directory=str(host["dir"]), window_size=WINDOW), node="gpu-a",
                             procs=ProcTable(host["proc"]))
    first = [e for e in reader.poll() if e["rank"] == 0]
    records = reader.counts["records"]
    with open(path, "ab") as f:
        f.write(full[cut:] + b"not json\n")
    second = [e for e in reader.poll(final=True) if e["rank"] == 0]
    assert reader.counts["records"] == 8 * 40 and reader.counts["bad_lines"] == 1
    assert records < reader.counts["records"]
    assert [e["window"] for e in first + second] == [0, 1, 2] and [e["count"] for e in first + second] == [16, 16, 8]
    # truncated in place (logrotate copytruncate): read again from the start
    path.write_bytes(full[: full.index(b"\n") + 1])
    reader.poll()
    assert reader.counts["truncations"] == 1
    # rotated: a new file under the same name
    os.replace(path, host["dir"] / "old")
    path.write_bytes(full)
    reader.poll()
    assert reader.counts["rotations"] == 1


def test_a_stale_file_whose_process_is_gone_is_counted_not_read(tmp_path):
    d = tmp_path / "dir"
    d.mkdir()
    (d / "gpu-a-pid999.log").write_text('{"header": {}}\n')
    reader = InspectorReader(InspectorSettings(directory=str(d)), node="gpu-a", procs=ProcTable(tmp_path / "proc"))
    assert reader.poll() == [] and reader.counts["unmapped_files"] == 1
    assert reader.poll() == [] and reader.counts["unmapped_files"] == 1  # said once


def test_agent_once_stdout_prints_the_events_with_job_and_rank_from_proc(tmp_path):
    hosts = write_job(tmp_path, job="4242", n_colls=32, late_rank=None, dump_every=32)
    host = hosts["gpu-b"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPWATCH_")}
    result = run_stepwatch("agent", "--once", "--stdout", "--node", "gpu-b", "--nccl-inspector-dir", str(host["dir"]),
                           "--nccl-inspector-window", str(WINDOW), "--proc-root", str(host["proc"]),
                           "--sysfs-root", str(tmp_path / "nosys"), env=env, timeout=60)
    events = [json.loads(line) for line in result.stdout.splitlines()]
    windows = [e for e in events if e["kind"] == "nccl_window"]
    assert {(e["job"], e["rank"], e["window"]) for e in windows} == {("4242", r, w) for r in range(8, 16)
                                                                      for w in range(2)}
    assert {e["pid"] for e in windows} == set(range(17, 25))  # the container's pids, mapped through NSpid
    assert "NCCL Inspector logs" in result.stderr


# -- the worker side ------------------------------------------------------------------------

def _job_events(tmp_path, *, late_rank, n_colls=320, layout="per-line", late_from=0):
    hosts = write_job(tmp_path, job="4242", n_colls=n_colls, late_rank=late_rank, layout=layout, late_from=late_from)
    events = []
    for node, host in hosts.items():
        events.extend(_read(host, node)[0])
    events.sort(key=lambda e: e["ts"])
    return events


def test_the_late_rank_is_named_a_straggler_from_its_shortest_exec_times(tmp_path):
    alerts, engine = _engine_alerts(_job_events(tmp_path, late_rank=11, layout="marker"))
    fired = [a for a in alerts if a.type == "straggler" and a.status == "firing"]
    assert [a.ranks for a in fired] == [(11,)]
    a = fired[0]
    assert a.nodes == ("gpu-b",) and a.evidence["signal"] == "arrival"
    assert a.evidence["source"] == "nccl_inspector" and a.evidence["arrival_source"] == "nccl_inspector"
    assert a.evidence["process_group"] == COMM_ID and a.evidence["op"] == "AllReduce"
    assert a.evidence["detected_step"] <= 10 + 5  # windows: warm-up, then within the rule's window
    assert engine.jobs["4242"].inspector.counts["judged"] == 20


def test_a_rank_that_turns_late_mid_job_is_named_within_three_windows(tmp_path):
    """Onset at window 20 (collective 320) of 40: named by window 22, a window being at most a step's collectives."""
    alerts, _ = _engine_alerts(_job_events(tmp_path, late_rank=3, n_colls=640, late_from=320))
    fired = [a for a in alerts if a.type == "straggler" and a.status == "firing"]
    assert [a.ranks for a in fired] == [(3,)] and fired[0].nodes == ("gpu-a",)
    assert fired[0].evidence["first_step"] == 20 and fired[0].evidence["detected_step"] <= 22


def test_a_healthy_job_gets_no_alert(tmp_path):
    alerts, engine = _engine_alerts(_job_events(tmp_path, late_rank=None))
    assert alerts == [] and engine.jobs["4242"].inspector.counts["judged"] == 20


def test_a_window_is_judged_only_once_every_rank_sent_it(tmp_path):
    """Ranks dump on their own schedule: gpu-b's whole log arrives after gpu-a's; no verdict before."""
    hosts = write_job(tmp_path, job="4242", n_colls=320, late_rank=11)
    a, b = _read(hosts["gpu-a"], "gpu-a")[0], _read(hosts["gpu-b"], "gpu-b")[0]
    engine = DetectionEngine()
    assert [x for e in a for x in engine.process(parse_event(e))] == []
    assert engine.jobs["4242"].inspector.counts["judged"] == 0
    alerts = [x for e in b for x in engine.process(parse_event(e))]
    assert [x.ranks for x in alerts if x.type == "straggler"] == [(11,)]


def test_a_job_with_the_callback_is_not_judged_twice(tmp_path):
    events = _job_events(tmp_path, late_rank=11)
    step = {"v": 1, "kind": "step", "job": "4242", "rank": 0, "step": 1, "ts": events[0]["ts"], "step_time": 1.0}
    alerts, engine = _engine_alerts([step] + events)
    assert [a for a in alerts if a.type == "straggler"] == []
    assert engine.jobs["4242"].inspector.counts["skipped_callback"] == len(events)


def test_bad_nccl_window_events_are_dead_lettered_with_a_reason():
    good = {"v": 1, "kind": "nccl_window", "job": "j", "rank": 1, "ts": 1.0, "comm": "c", "op": "AllReduce",
            "window": 3, "window_size": 16, "count": 16, "exec_sum": 0.02, "exec_median": 0.001, "n_ranks": 16}
    events, rejected = decode_message(orjson.dumps({"v": 1, "kind": "batch", "events": [
        good, {**good, "count": 0}, {**good, "comm_rank": 16}, {**good, "exec_sum": -1}]}))
    assert len(events) == 1 and [r.reason.split(" ")[0] for r in rejected] == ["'count',", "comm_rank", "'exec_sum'"]


# -- RAS --------------------------------------------------------------------------------------

def _ras_job(tmp_path):
    hosts = write_job(tmp_path, job="4242", n_colls=1, late_rank=None)
    host_of = {r: ("10.0.0.1" if r < 8 else "10.0.0.2") for r in range(16)}
    pids = {r: p for h in hosts.values() for r, p in h["pids"].items()}
    return hosts, host_of, pids


def test_ras_json_answer_becomes_heartbeats_of_this_nodes_ranks_only(tmp_path):
    hosts, host_of, pids = _ras_job(tmp_path)
    counts = {r: 120 for r in range(16)}
    counts[13] = 119  # rank 13 never launched collective 120
    status = json.loads((FIXTURES / "ras-status-lagging.json").read_text())
    assert status == ras_status(counts, hosts=host_of, pids=pids)  # the fixture file is this answer
    hbs, c = heartbeats(status, procs=ProcTable(hosts["gpu-b"]["proc"]), node="gpu-b", ts=100.0)
    by_rank = {h["rank"]: h for h in hbs}
    assert sorted(by_rank) == list(range(8, 16))  # gpu-b's ranks; gpu-a's agent speaks for 0-7
    assert by_rank[13]["pgs"][COMM_ID] == {"started": 119, "completed": 119}
    assert by_rank[12]["pgs"][COMM_ID] == {"started": 120, "completed": 119}
    assert all(h["source"] == "nccl_ras" and h["job"] == "4242" for h in hbs)
    for h in hbs:
        parse_event(h)


def test_ras_client_speaks_the_protocol_and_polls_gently(tmp_path):
    hosts, host_of, pids = _ras_job(tmp_path)
    server = RasServer(lambda: ras_status({r: 5 for r in range(16)}, hosts=host_of, pids=pids))
    try:
        assert query_status(server.addr)["communicators"][0]["size"] == 16
        now = [1002.5]
        poller = RasPoller(server.addr, procs=ProcTable(hosts["gpu-a"]["proc"]), node="gpu-a", interval=1.0,
                           clock=lambda: now[0])
        assert poller.interval == 5.0  # never more often than every 5 s
        got = poller.poll()
        assert len(got) == 8 and {h["ts"] for h in got} == {1000.0}  # the round's instant, as on every node
        now[0] += 2.0
        assert poller.poll() == [] and server.queries == 2
        now[0] += 1.0  # 1005.5: the next round
        assert {h["ts"] for h in poller.poll()} == {1005.0}
    finally:
        server.close()
    text_only = RasServer(lambda: {}, json_format=False)
    try:
        with pytest.raises(RasError, match="no JSON output"):
            query_status(text_only.addr)
    finally:
        text_only.close()


def test_ras_heartbeats_name_the_lagging_rank_of_a_hung_job(tmp_path):
    """Counts advance on every rank, then freeze with rank 13 one behind: culprit_before_collective."""
    hosts, host_of, pids = _ras_job(tmp_path)
    settings = Settings.from_env({"STEPWATCH_HANG_WARNING_FLOOR_SECONDS": "20",
                                  "STEPWATCH_HANG_TIMEOUT_SECONDS": "60"})
    engine = DetectionEngine(settings)
    alerts = []
    t0 = 1_764_484_800.0
    for i in range(12):
        counts = {r: 100 * (i + 1) for r in range(16)}
        if i >= 4:
            counts = {r: 500 for r in range(16)}
            counts[13] = 499
        status = ras_status(counts, hosts=host_of, pids=pids)
        for node, host in hosts.items():
            for hb in heartbeats(status, procs=ProcTable(host["proc"]), node=node, ts=t0 + 10 * i)[0]:
                alerts.extend(engine.process(parse_event(hb)))
        alerts.extend(engine.tick(t0 + 10 * i))
    hangs = [a for a in alerts if a.type == "hang"]
    assert hangs and hangs[-1].evidence["case"] == "culprit_before_collective"
    assert hangs[-1].ranks[0] == 13 and hangs[-1].evidence["process_group"] == COMM_ID
    assert hangs[-1].evidence["source"] == "nccl_ras"


def test_ras_heartbeats_are_ignored_while_the_job_sends_its_own(tmp_path):
    """Both sources at once: the callback's heartbeats (finer sequence numbers) count, RAS's are not added."""
    hosts, host_of, pids = _ras_job(tmp_path)
    engine = DetectionEngine()
    own = {"v": 1, "kind": "heartbeat", "job": "4242", "rank": 9, "ts": 100.0, "step": 5,
           "pgs": {"default": {"started": 40, "completed": 40}}}
    engine.process(parse_event(own))
    status = ras_status({r: 7 for r in range(16)}, hosts=host_of, pids=pids)
    for hb in heartbeats(status, procs=ProcTable(hosts["gpu-b"]["proc"]), node="gpu-b", ts=101.0)[0]:
        engine.process(parse_event(hb))
    hang = engine.jobs["4242"].hang
    assert COMM_ID not in hang.progress.pg_seq and engine.jobs["4242"].sources == {"callback", "nccl_ras"}


# -- Flight Recorder through its FIFO ---------------------------------------------------------

def test_flight_recorder_dump_is_requested_through_the_fifo_and_summarized(tmp_path):
    """The FIFO's reader is a stand-in for ProcessGroupNCCL's watchdog (DumpPipe: no NCCL here); the dump it
    writes is a real torch 2.15 Flight Recorder dump."""
    import select
    import threading

    from stepwatch.producers.flight_recorder_fifo import FlightRecorderFifo, load_dump

    proc, files = tmp_path / "proc", tmp_path / "files"
    files.mkdir()
    env = {**rank_env("fr-job", 13, 16, 5, "gpu-b"), "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": f"{files}/fr_pipe_",
           "TORCH_FR_DUMP_TEMP_FILE": f"{files}/fr_dump_", "TORCH_FR_BUFFER_SIZE": "2000"}
    write_proc(proc, 52000, {}, cmdline=TORCHRUN)  # its launcher, run by the same user
    write_proc(proc, 52005, env, ppid=52000)
    (proc / "52005" / "root").symlink_to("/")  # the process's mount namespace: the host's here
    pipe = files / "fr_pipe_13.pipe"
    os.mkfifo(pipe)
    fd = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
    dump = (FIXTURES / "fr-dump-gloo-torch2.15.pkl").read_bytes()

    def watchdog():
        select.select([fd], [], [], 30)
        if os.read(fd, 128):
            (files / "fr_dump_13").write_bytes(dump)

    t = threading.Thread(target=watchdog, daemon=True)
    t.start()
    fifo = FlightRecorderFifo(ProcTable(proc), node="gpu-b", timeout=30)
    events = fifo.answer("fr-job", (13, 4), "abc/1")
    t.join(30)
    os.close(fd)
    assert len(events) == 1 and fifo.counts["dumps"] == 1
    ev = parse_event(events[0])
    assert ev.rank == 13 and ev.request_id == "abc/1" and ev.extra["source"] == "flight_recorder"
    frames = ev.threads[0][1]
    assert [f[2] for f in frames] == ["gloo:all_reduce scheduled", "gloo:all_reduce scheduled",
                                      "gloo:all_reduce scheduled", "gloo:barrier scheduled"]
    assert frames[-1][:2] == ("pg default_pg", 4)
    assert load_dump(dump)["version"] == "2.10"


def test_a_dump_with_objects_in_it_is_refused():
    import pickle

    from stepwatch.producers.flight_recorder_fifo import load_dump

    with pytest.raises(pickle.UnpicklingError):
        load_dump(pickle.dumps({"entries": [], "x": Path("/")}))


def test_straggler_settings_changed_at_run_time_reach_the_inspector_detectors(tmp_path):
    from stepwatch.models.steps.straggler import StragglerSettings

    events = _job_events(tmp_path, late_rank=11)
    engine = DetectionEngine()
    alerts = [a for e in events[:200] for a in engine.process(parse_event(e))]
    assert alerts == [] and engine.jobs["4242"].inspector.counts["judged"] >= 1  # detectors exist, none fired yet
    engine.apply_settings("4242", StragglerSettings(ratio_threshold=5.0))  # the late rank is 1.66x
    alerts = [a for e in events[200:] for a in engine.process(parse_event(e))]
    assert [a for a in alerts if a.type == "straggler"] == []
    engine.apply_settings("4242", None)
    assert engine.jobs["4242"].inspector.straggler.ratio_threshold == 1.1


def test_a_rank_ras_lists_missing_is_named_silent(tmp_path):
    """Rank 5's process stops answering: RAS lists it under missing_ranks, its agent sends nothing for it."""
    hosts, host_of, pids = _ras_job(tmp_path)
    settings = Settings.from_env({"STEPWATCH_HANG_WARNING_FLOOR_SECONDS": "20", "STEPWATCH_HANG_TIMEOUT_SECONDS": "60",
                                  "STEPWATCH_HANG_HEARTBEAT_TIMEOUT_SECONDS": "15"})
    engine = DetectionEngine(settings)
    alerts = []
    t0 = 1_764_484_800.0
    for i in range(12):
        frozen = i >= 4
        counts = {r: 500 if frozen else 100 * (i + 1) for r in range(16)}
        status = ras_status(counts, hosts=host_of, pids=pids, missing=(5,) if frozen else ())
        for node, host in hosts.items():
            for hb in heartbeats(status, procs=ProcTable(host["proc"]), node=node, ts=t0 + 10 * i)[0]:
                alerts.extend(engine.process(parse_event(hb)))
        alerts.extend(engine.tick(t0 + 10 * i))
    hangs = [a for a in alerts if a.type == "hang"]
    assert hangs and hangs[-1].evidence["case"] == "silent_ranks" and hangs[-1].ranks[0] == 5
    assert hangs[-1].nodes[0] == "gpu-a"


def test_a_process_that_exits_has_its_last_window_sent_once_its_file_is_still(tmp_path):
    import shutil

    hosts = write_job(tmp_path, job="j", n_colls=40, late_rank=None, dump_every=40)
    host = hosts["gpu-a"]
    now = [1000.0]
    reader = InspectorReader(InspectorSettings(directory=str(host["dir"]), window_size=WINDOW, stale_seconds=60),
                             node="gpu-a", procs=ProcTable(host["proc"]), clock=lambda: now[0])
    first = [e for e in reader.poll() if e["rank"] == 0]
    assert [e["window"] for e in first] == [0, 1]  # window 2 (8 records) is still open
    shutil.rmtree(host["proc"] / "41000")  # rank 0 exited
    now[0] += 30
    assert [e for e in reader.poll() if e["rank"] == 0] == []  # not yet: its file may still be written
    now[0] += 31
    last = [e for e in reader.poll() if e["rank"] == 0]
    assert [(e["window"], e["count"]) for e in last] == [(2, 8)] and reader.counts["files_finished"] == 1
    assert [e for e in reader.poll() if e["rank"] == 0] == []


def test_per_job_subfolders_are_read_as_the_taskprolog_lays_them_out(tmp_path):
    """deploy/slurm/stepwatch-taskprolog.sh points each job's NCCL_INSPECTOR_DUMP_DIR at <root>/<job id>;
    the agent is given <root> and reads every job's folder one level down."""
    hosts = write_job(tmp_path, job="4242", n_colls=64, late_rank=None, dump_every=20)
    host = hosts["gpu-b"]
    job_dir = host["dir"] / "4242"
    job_dir.mkdir()
    for log in list(host["dir"].glob("*.log")):
        log.rename(job_dir / log.name)
    assert not list(host["dir"].glob("*.log"))
    events, reader = _read(host, "gpu-b")
    assert reader.counts["records"] == 8 * 64
    assert {(e["rank"], e["window"]) for e in events} == {(r, w) for r in range(8, 16) for w in range(4)}
