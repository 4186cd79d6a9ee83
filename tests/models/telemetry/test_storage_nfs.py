"""NFS (and Lustre) client statistics as the storage cause of a hang in a checkpoint (issue 39 item 1).

The agent reads ``/proc/self/mountstats`` and ``/proc/fs/lustre/llite/*/stats`` (a procfs tree written in the kernel's layout by tests/procfs_tree.py);
the hang recording is tests/hang_recordings.py's checkpoint hang on node n3 without IO pressure, so only the
mount's round trips can explain it. Variants (mount name, how slow, timeouts only, the healthy control) assert
what must not change: the culprits, and that the cause names the mount exactly when its RPCs went wrong.
"""

from __future__ import annotations

import orjson
import pytest

from hang_recordings import T0, culprits, hangs, replay
from procfs_tree import write_llite_stats, write_mountstats, write_procfs
from stepwatch.models.wire.events import decode_message
from stepwatch.producers.procfs_host import MAX_MOUNTS, HostReader
from test_hang_pace import STUCK_NODE, checkpoint_hang, stuck_ranks

HEALTHY_NODE = "n0"


class NfsClient:
    """An NFS client's cumulative WRITE/COMMIT counters, advanced sample by sample."""

    def __init__(self) -> None:
        self.write = [0, 0, 0, 0, 0]  # ops, ntrans, timeouts, rtt_ms, exe_ms
        self.commit = [0, 0, 0, 0, 0]

    def advance(self, writes: int, rtt_ms: float, *, timeouts: int = 0, retrans: int = 0) -> None:
        for counters, ops, rtt in ((self.write, writes, rtt_ms), (self.commit, max(writes // 8, 1), rtt_ms * 1.5)):
            counters[0] += ops
            counters[1] += ops + retrans
            counters[2] += timeouts
            counters[3] += round(ops * rtt)
            counters[4] += round(ops * (rtt + 0.3))

    def spec(self) -> dict:
        return {"server": "10.0.0.7:/ckpt", "write": tuple(self.write), "commit": tuple(self.commit)}


def with_nfs(tmp_path, job, start, *, mount="/ckpt", stuck_rtt=2100.0, timeouts=1, retrans=1, ck=20.0, end=1900.0,
             lustre: str | None = None):
    """Host events of n3 and n0 every 5 s, read by the agent's reader from procfs trees: small writes to ``mount``
    at 4 ms, a checkpoint's burst at 5 ms, and on n3 from the stuck save on a few writes a sample taking
    ``stuck_rtt`` ms with ``timeouts`` major timeouts and ``retrans`` retransmissions."""
    clients = {n: NfsClient() for n in (STUCK_NODE, HEALTHY_NODE)}
    readers = {n: HostReader(write_procfs(tmp_path / n), tmp_path / "sys", netdevs=False) for n in clients}
    t = T0 - 60.0
    while t < start + end:
        for name, client in clients.items():
            if name == STUCK_NODE and t > start + ck / 2:
                client.advance(2, stuck_rtt, timeouts=timeouts, retrans=retrans)
            else:
                client.advance(4, 4.0)
            if lustre:  # the save goes to Lustre; an idle NFS home mount beside it
                write_llite_stats(tmp_path / name, lustre, write=(client.write[0], client.write[3] * 1000),
                                  fsync=(client.commit[0], client.commit[3] * 1000))
                write_mountstats(tmp_path / name, {"/home": {"server": "10.0.0.9:/home", "vers": 3}})
            else:
                write_mountstats(tmp_path / name, {mount: client.spec(),
                                                   "/home": {"server": "10.0.0.9:/home", "vers": 3}})
            event = readers[name].to_event(name, t)
            job.events.append(event)
        t += 5.0
    return job


def nfs_causes(alert: dict) -> list[dict]:
    return [c for c in alert["evidence"].get("suspected_causes", []) if c["component"].startswith("nfs:")]


@pytest.mark.parametrize("mount, stuck_rtt, timeouts, retrans", [
    ("/ckpt", 2100.0, 1, 1),  # the case: slow writes that time out
    ("/mnt/shared ckpt", 800.0, 0, 0),  # only slow (a space in the mount point: the kernel's \040)
    ("/ckpt", 4.0, 2, 3),  # round trips look normal, but RPCs time out and are sent again
])
def test_a_hang_in_a_checkpoint_names_the_nfs_mount_of_the_stuck_node_as_storage_cause(tmp_path, mount, stuck_rtt,
                                                                                         timeouts, retrans):
    job, start = checkpoint_hang(ranks=32, io=False, end=400.0)
    with_nfs(tmp_path, job, start, mount=mount, stuck_rtt=stuck_rtt, timeouts=timeouts, retrans=retrans, end=400.0)
    versions = hangs(replay(job.recording()))
    assert versions
    first = versions[0]
    assert first["severity"] == "warning" and culprits(first) == stuck_ranks(32), first["summary"]
    cause = first["evidence"]["suspected_causes"][0]
    assert (cause["category"], cause["node"], cause["component"]) == ("storage", STUCK_NODE, f"nfs:{mount}"), cause
    assert f"storage: NFS mount {mount} on {STUCK_NODE}: " in cause["hint"]
    evidence = cause["evidence"][0]
    assert (evidence["mount"], evidence["server"]) == (mount, "10.0.0.7:/ckpt")
    if stuck_rtt >= 800:
        assert evidence["op"] == "WRITE" and evidence["rtt_ms_per_op"] == pytest.approx(stuck_rtt, rel=0.01)
        assert evidence["baseline_rtt_ms_per_op"] == pytest.approx(4.0, rel=0.01)
    else:  # usual round trips are not news: only the timeouts are told
        assert "op" not in evidence and "rtt" not in cause["hint"], cause["hint"]
    assert evidence["timeouts"] >= 2 * timeouts and evidence["retransmissions"] >= 2 * retrans
    if (stuck_rtt, timeouts) == (2100.0, 1):
        assert cause["hint"].startswith(f"storage: NFS mount /ckpt on n3: WRITE rtt 2.1 s (baseline 4.0 ms), "), cause
    # Never the healthy node's mount, never the NFSv3 home mount that saw no writes; the numbers told stay put
    # as the hang goes on (the alert is not re-published for a growing count).
    for alert in versions:
        assert all(c["node"] == STUCK_NODE and c["component"] == f"nfs:{mount}" for c in nfs_causes(alert)), alert
        assert nfs_causes(alert)[0]["hint"] == cause["hint"]
    assert len(versions) == len(control_versions(tmp_path))


def control_versions(tmp_path) -> list[dict]:
    """The same hang with a healthy mount."""
    job, start = checkpoint_hang(ranks=32, io=False, end=400.0)
    with_nfs(tmp_path / "control", job, start, stuck_rtt=4.0, timeouts=0, retrans=0, end=400.0)
    return hangs(replay(job.recording()))


def test_a_hang_in_a_checkpoint_names_the_lustre_client_of_the_stuck_node(tmp_path):
    job, start = checkpoint_hang(ranks=32, io=False, end=400.0)
    with_nfs(tmp_path, job, start, lustre="scratch-ffff9a3b", end=400.0)
    versions = hangs(replay(job.recording()))
    assert versions and culprits(versions[0]) == stuck_ranks(32)
    cause = versions[0]["evidence"]["suspected_causes"][0]
    assert (cause["category"], cause["node"], cause["component"]) == ("storage", STUCK_NODE, "lustre:scratch-ffff9a3b")
    assert cause["hint"].startswith("storage: Lustre client scratch-ffff9a3b on n3: WRITE latency 2.1 s (baseline 4.0 ms)")


def test_a_healthy_mount_is_no_cause(tmp_path):
    versions = control_versions(tmp_path)
    assert versions and culprits(versions[0]) == stuck_ranks(32)
    assert not any(nfs_causes(a) or any(c["category"] == "storage" for c in a["evidence"].get("suspected_causes", []))
                   for a in versions)


def test_reader_reads_nfs_mounts_in_the_kernels_layout_and_bounds_them(tmp_path):
    proc = write_procfs(tmp_path / "proc")
    reader = HostReader(proc, tmp_path / "sys", netdevs=False)
    assert "mounts" not in reader.to_event("n1", 1.0)  # no mountstats (no NFS, or an older agent's tree)
    write_mountstats(proc, {"/ckpt": {"write": (10, 12, 1, 250, 260), "commit": (2, 2, 0, 30, 31)},
                            "/home": {"server": "h:/home", "vers": 3, "write": (5, 5, 0, 20, 21)}})
    mounts = reader.to_event("n1", 2.0)["mounts"]
    assert mounts == [
        {"mount": "/ckpt", "server": "10.0.0.7:/export", "fstype": "nfs4", "write_ops": 10, "write_trans": 12,
         "write_timeouts": 1, "write_rtt_ms": 250, "write_exe_ms": 260, "commit_ops": 2, "commit_trans": 2,
         "commit_timeouts": 0, "commit_rtt_ms": 30, "commit_exe_ms": 31},
        {"mount": "/home", "server": "h:/home", "fstype": "nfs", "write_ops": 5, "write_trans": 5, "write_timeouts": 0,
         "write_rtt_ms": 20, "write_exe_ms": 21, "commit_ops": 0, "commit_trans": 0, "commit_timeouts": 0,
         "commit_rtt_ms": 0, "commit_exe_ms": 0}]
    # Lustre: an instance timing write and fsync is a mount; one counting only write_bytes (older clients) is not.
    write_llite_stats(proc, "scratch-ffff01", write=(40, 2_400_000), fsync=(2, 2_000))
    write_llite_stats(proc, "home-ffff02", write=(40, 0), fsync=(0, 0), timed_write=False)
    lustre = [m for m in reader.to_event("n1", 2.5)["mounts"] if m["fstype"] == "lustre"]
    assert lustre == [{"mount": "lustre:scratch-ffff01", "fstype": "lustre", "write_ops": 40, "write_trans": 40,
                       "write_rtt_ms": 2400, "commit_ops": 2, "commit_trans": 2, "commit_rtt_ms": 2}]
    write_mountstats(proc, {f"/m{i}": {} for i in range(MAX_MOUNTS + 5)})
    event = reader.to_event("n1", 3.0)
    assert len(event["mounts"]) == MAX_MOUNTS
    events, rejected = decode_message(orjson.dumps(event))
    assert not rejected and len(events[0].mounts) == MAX_MOUNTS


def test_bad_mounts_are_rejected_not_crashing():
    good = {"v": 1, "kind": "host", "node": "n1", "ts": 1.0, "mounts": [{"mount": "/ckpt", "write_ops": 3}]}
    bad = [dict(good, mounts="/ckpt"), dict(good, mounts=[{"write_ops": 3}]),
           dict(good, mounts=[{"mount": "/ckpt", "write_ops": -1}]), dict(good, mounts=[{"mount": "/c", "server": 7}]),
           dict(good, mounts=[{"mount": f"/m{i}"} for i in range(65)])]
    events, rejected = decode_message(orjson.dumps({"v": 1, "kind": "batch", "events": [good] + bad}))
    assert len(events) == 1 and len(rejected) == len(bad)
    assert events[0].mounts == ({"mount": "/ckpt", "write_ops": 3},)


def test_the_mount_stays_the_first_cause_across_the_teardown_to_the_critical_and_adds_no_version(tmp_path):
    """With the node's IO pressure too (tests/models/hang/test_hang_pace.py's full case: teardown at 600 s, critical at 1800 s):
    the mount outranks the pressure in every version, and the versions are those the pressure alone gives."""
    job, start = checkpoint_hang(ranks=32)
    with_nfs(tmp_path, job, start)
    versions = hangs(replay(job.recording()))
    plain, _ = checkpoint_hang(ranks=32)
    assert [(v["severity"], v["evidence"]["case"]) for v in versions] == [
        (v["severity"], v["evidence"]["case"]) for v in hangs(replay(plain.recording()))]
    assert versions[-1]["severity"] == "critical" and "torn_down" in versions[-1]["evidence"]
    for v in versions:
        assert culprits(v) == stuck_ranks(32), v["summary"]
        first = v["evidence"]["suspected_causes"][0]
        assert (first["category"], first["component"]) == ("storage", "nfs:/ckpt"), v["summary"]
        assert any(c["component"] == "io_pressure" for c in v["evidence"]["suspected_causes"])
