"""The rank side of hang forensics without a broker: heartbeats' ``pgs``, stack capture, the answer
to a stack request, the Flight Recorder dump, and process-group tracking on a real gloo group."""

from __future__ import annotations

import os
import threading

import orjson
import pytest

from stepwatch.models.wire.events import parse_event
from stepwatch.models.hang.stacks import StackRequest, frame_lines
from stepwatch.producers.monitor import RankMonitor
from stepwatch.producers.stacks import answer, capture_threads, flight_recorder_dump


def monitor(**kw) -> tuple[RankMonitor, list]:
    sent: list = []
    m = RankMonitor(job="j", rank=3, world_size=8, node="n1", sink=sent.extend, heartbeat_interval=0, **kw)
    return m, sent


def test_heartbeat_carries_every_group_with_its_ranks_and_the_default_group_without():
    m, _ = monitor()
    try:
        m.pg_ranks["tp0"] = [0, 1, 2, 3]
        with m.collective("all_reduce"):
            pass
        with m.collective("all_gather", pg="tp0"):
            pass
        seq = m.collective_begin("tp0")  # issued, not completed: the rank waits in it
        hb = m.heartbeat_event()
        assert hb["pgs"] == {"default": {"started": 1, "completed": 1},
                             "tp0": {"started": 2, "completed": 1, "ranks": [0, 1, 2, 3]}}
        assert (hb["seq_started"], hb["seq_completed"]) == (1, 1)  # still there for older workers
        assert "seqs" not in hb
        assert parse_event(orjson.loads(orjson.dumps(hb))).pgs == (("default", 1, 1, None),
                                                                   ("tp0", 2, 1, (0, 1, 2, 3)))
        m.collective_end(seq, pg="tp0")
    finally:
        m.close()


def load_shard_slowly(entered: threading.Event, release: threading.Event) -> None:
    entered.set()
    release.wait(30)


def test_capture_puts_the_training_thread_first_outermost_frame_first():
    entered, release = threading.Event(), threading.Event()
    worker = threading.Thread(target=load_shard_slowly, args=(entered, release), name="trainer")
    worker.start()
    try:
        assert entered.wait(10)
        threads = capture_threads(worker.ident)
        assert threads[0]["name"] == "trainer"
        functions = [f["function"] for f in threads[0]["frames"]]
        assert functions.index("load_shard_slowly") < len(functions) - 1  # wait() etc. are further in
        assert functions[0] in ("_bootstrap", "run", "_bootstrap_inner")  # outermost first
        assert len(threads) <= 8 and all(len(t["frames"]) <= 64 for t in threads)
    finally:
        release.set()
        worker.join()


def test_asked_rank_answers_with_a_stack_event_others_do_not():
    m, sent = monitor()
    try:
        assert not answer(m, StackRequest(job="j", ranks=(1, 2), request_id="a/1", ts=1.0))
        assert not answer(m, StackRequest(job="other", ranks=(3,), request_id="a/1", ts=1.0))
        assert answer(m, StackRequest(job="j", ranks=(3, 4), request_id="a/1", ts=1.0))
        assert m.flush(5)
        # The Python stacks come first; a Flight Recorder dump, where torch is loaded, follows in a second answer.
        raw = [e for e in sent if e["kind"] == "stack"][0]
        assert "flight_recorder" not in raw
        event = parse_event(orjson.loads(orjson.dumps(raw)))
        assert (event.job, event.rank, event.request_id, event.node) == ("j", 3, "a/1", "n1")
        # The thread that built the monitor (this test's) is the training thread: first, innermost last.
        lines = frame_lines(event)
        assert any("test_asked_rank_answers_with_a_stack_event_others_do_not" in line for line in
                   [f"{f}:{ln} {fn}" for f, ln, fn in event.threads[0][1]])
        assert lines[-1].endswith("capture_threads")
    finally:
        m.close()


def test_flight_recorder_dump_is_triggered_where_torch_has_it(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch", reason="torch is not installed")
    c10d = torch._C._distributed_c10d
    if not hasattr(c10d, "_dump_fr_trace") and not hasattr(c10d, "_dump_nccl_trace"):
        pytest.skip(f"torch {torch.__version__} has no Flight Recorder API")
    monkeypatch.setenv("TORCH_FR_DUMP_TEMP_FILE", str(tmp_path / "fr_"))
    path = flight_recorder_dump(5, "abc/1")
    assert path == str(tmp_path / "fr_5_abc_1.pkl")
    assert os.path.getsize(path) > 0
    m, sent = monitor()
    try:
        assert answer(m, StackRequest(job="j", ranks=(3,), request_id="r/2", ts=1.0))
        assert m.flush(5)
        first, raw = [e for e in sent if e["kind"] == "stack"]  # the stacks first, then the dump
        assert "flight_recorder" not in first and raw["threads"] == first["threads"]
        assert raw["flight_recorder"] == str(tmp_path / "fr_3_r_2.pkl") and os.path.exists(raw["flight_recorder"])
    finally:
        m.close()


TRACKER_SCRIPT = r'''
import os, sys, json
import torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % int(sys.argv[1]), rank=0, world_size=1)
from stepwatch.producers.monitor import RankMonitor
sent = []
m = RankMonitor(job="j", rank=0, world_size=1, sink=sent.extend, heartbeat_interval=0)
tp = dist.new_group([0])
idle = dist.new_group([0])  # no collective on it: still reported, with started 0
t = torch.ones(2)
dist.all_reduce(t)                            # default group
dist.all_reduce(t, group=tp)                  # keyword group
dist.all_reduce(t, dist.ReduceOp.SUM, tp)     # positional group
dist.all_reduce(t, group=tp, async_op=True).wait()
out = [None]
dist.all_gather_object(out, {"a": 1}, group=tp)   # calls all_gather inside: counted once
m.heartbeat()
m.flush(5)
hb = [e for e in sent if e["kind"] == "heartbeat"][-1]
names = {"tp": m._pg_tracker.name_of(tp), "idle": m._pg_tracker.name_of(idle)}
print(json.dumps({"pgs": hb["pgs"], "names": names, "snapshot": m._pg_tracker.snapshot()}))
m.close()
dist.destroy_process_group()
'''


def test_process_group_tracker_on_a_real_gloo_group(tmp_path):
    """One real gloo process: groups appear in heartbeats with their ranks, also before their first
    collective; keyword, positional, async and nested calls are each numbered once."""
    pytest.importorskip("torch", reason="process-group tracking needs torch")
    import subprocess
    import sys

    from pg_rank_procs import free_port

    script = tmp_path / "track.py"
    script.write_text(TRACKER_SCRIPT)
    result = subprocess.run([sys.executable, str(script), str(free_port())], capture_output=True, text=True,
                            timeout=300, env=dict(os.environ, STEPWATCH_MONITOR_STACKS="0"))
    assert result.returncode == 0, result.stderr[-3000:]
    out = orjson.loads(result.stdout.strip().splitlines()[-1])
    pgs, names = out["pgs"], out["names"]
    assert pgs["default"] == {"started": 1, "completed": 1}
    assert pgs[names["tp"]] == {"started": 4, "completed": 4, "ranks": [0]}
    assert pgs[names["idle"]] == {"started": 0, "completed": 0, "ranks": [0]}
    # PyTorch's own counter, for comparison: all_gather_object issues two all_gathers inside.
    assert out["snapshot"][names["tp"]]["torch_seq"] == 5


def test_stack_answers_are_rate_limited_per_rank_and_by_request_size():
    from stepwatch.producers.stacks import StackLimits

    m, sent = monitor()
    try:
        limits = StackLimits({"STEPWATCH_MONITOR_STACK_MIN_INTERVAL": "3600", "STEPWATCH_MONITOR_STACK_MAX_RANKS": "4"})
        assert not answer(m, StackRequest(job="j", ranks=tuple(range(8)), request_id="big/1", ts=1.0), limits)
        assert answer(m, StackRequest(job="j", ranks=(3,), request_id="b/1", ts=1.0), limits)
        assert not answer(m, StackRequest(job="j", ranks=(3,), request_id="b/2", ts=2.0), limits)  # within the interval
        assert limits.limited == 2
        assert m.flush(5)
        assert {e["request_id"] for e in sent if e["kind"] == "stack"} == {"b/1"}
    finally:
        m.close()
