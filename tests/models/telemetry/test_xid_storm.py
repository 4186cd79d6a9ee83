"""Storm protection (issue 42, item 3): a node writing 200 Xid lines a second, from the kernel log to the incident.

The real agent reads a file written as the driver writes /dev/kmsg (``--kmsg``); its output goes through the
real engine. The agent's clock is driven by the test (one sample per simulated second), so nothing sleeps.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from engine_driver import replay
from stepwatch.config import Settings
from stepwatch.models.detection import DetectionEngine
from stepwatch.models.telemetry.telemetry_tracker import REPUBLISH_SECONDS
from stepwatch.models.wire.events import parse_event
from stepwatch.producers.agent import NodeAgent
from stepwatch.producers.event_storm import Coalescer, KindQueues
from stepwatch.producers.kmsg import parse_xid_line

T0 = 1_764_000_000.0
RATE = 200  # Xid lines a second
SECONDS = 300


def kmsg_line(seq: int, bus: str, code: int) -> str:
    return (f"4,{seq},{seq * 5000},-;NVRM: Xid (PCI:{bus}): {code}, pid=2041, name=python3, "
            f"GPU has fallen off the bus.\n")


@pytest.fixture
def node(tmp_path):
    """A node with two GPUs in the nvidia driver's sysfs (0000:1b:00.0 is GPU 0, 0000:3b:00.0 GPU 1), no NVML."""
    drivers = tmp_path / "sys" / "bus" / "pci" / "drivers" / "nvidia"
    drivers.mkdir(parents=True)
    for bus in ("0000:1b:00.0", "0000:3b:00.0"):
        (drivers / bus).mkdir()
    (tmp_path / "proc").mkdir()
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("6,1,1,-;old history: not read again\n")
    return tmp_path, kmsg


def run_agent(tmp_path, kmsg, *, seconds: int = SECONDS, rate: int = RATE):
    now = [T0]
    settings = Settings()
    settings = dataclasses.replace(settings, telemetry=dataclasses.replace(
        settings.telemetry, kmsg_path=str(kmsg), sysfs_root=str(tmp_path / "sys"), proc_root=str(tmp_path / "proc")))
    agent = NodeAgent(node="n7", settings=settings, sink=lambda k, e: None, clock=lambda: now[0])
    agent.discover()
    out, per_second, state = [], [], []
    seq = 2
    with kmsg.open("a") as f:
        for s in range(seconds):
            for i in range(rate):
                f.write(kmsg_line(seq, "0000:3b:00", 79))
                seq += 1
                if i % 50 == 0:
                    f.write(f"6,{seq},1,-;eth0: link up\n")
                    seq += 1
            f.flush()
            now[0] = T0 + s + 1.0
            events = [e for e in agent.sample() if e["kind"] == "xid"]
            per_second.append(len(events))
            out.extend(events)
            if s in (59, seconds - 1):
                state.append((len(agent.storm._open), len(agent.queues), len(agent.kmsg._partial)))
    now[0] += 5.0
    out.extend(e for e in agent.sample() if e["kind"] == "xid")  # the last window's repeats
    agent.close()
    return agent, out, per_second, state


def test_the_kernel_log_line_as_the_driver_writes_it():
    assert parse_xid_line(kmsg_line(7, "0000:3b:00", 79)) == (
        "0000:3b:00", 79, "pid=2041, name=python3, GPU has fallen off the bus.")
    assert parse_xid_line("[ 1234.5] NVRM: Xid (PCI:0000:3B:00.0): 48, pid='<unknown>', DBE")[:2] == ("0000:3b:00", 48)
    assert parse_xid_line("6,1,1,-;eth0: link up") is None


def test_200_xid_lines_a_second_become_one_event_a_second_with_counts(node):
    tmp_path, kmsg = node
    agent, events, per_second, state = run_agent(tmp_path, kmsg)
    assert max(per_second) <= 1  # one event a second per node, GPU and code, whatever the rate
    assert sum(e["count"] for e in events) == RATE * SECONDS  # nothing lost: the counts add up
    assert {(e["node"], e["gpu"], e["xid"], e["pci"]) for e in events} == {("n7", 1, 79, "0000:3b:00")}
    assert agent.queues.dropped == {} and "unmapped" not in agent.kmsg.counts
    assert agent.kmsg.counts["xid_lines"] == RATE * SECONDS
    assert state[0] == state[1]  # the agent's state after 1 minute and after 5: the same (bounded)

    # the worker: one incident, the counts summed, published again at most once per 30 s
    engine = DetectionEngine()
    sample = {"v": 1, "kind": "gpu", "node": "n7", "ts": T0, "gpu": 1, "temp_c": 60.0}
    after = [{**sample, "ts": T0 + SECONDS + 5.0 + s} for s in range(int(REPUBLISH_SECONDS) + 2)]  # node time goes on
    alerts = list(replay((parse_event(e) for e in [sample, *events, *after]), engine=engine))
    faults = [a for a in alerts if a.type == "gpu_fault"]
    assert len({a.id for a in faults}) == 1
    assert faults[-1].evidence["count"] == RATE * SECONDS
    assert len(faults) <= SECONDS / REPUBLISH_SECONDS + 2
    assert engine.telemetry.tracker.updates_held > 0


def test_a_storm_not_coalesced_by_the_agent_is_bounded_at_the_worker():
    """An older agent (or NVML's own events) sending every line: the worker still publishes one incident, summed,
    at most once per 30 s, and its state does not grow with the storm."""
    engine = DetectionEngine()
    tracker = engine.telemetry.tracker
    events = [{"v": 1, "kind": "gpu", "node": "n7", "ts": T0, "gpu": 0, "temp_c": 60.0}]
    n = 0
    sizes = []
    published = []
    for s in range(120):
        batch = [{"v": 1, "kind": "xid", "node": "n7", "gpu": 0, "xid": 95, "ts": T0 + s + i / 100}
                 for i in range(100)]
        n += len(batch)
        published.extend(a for a in replay((parse_event(e) for e in (events + batch)), engine=engine)
                         if a.type == "gpu_fault")
        events = []
        if s in (30, 119):
            gpu = tracker._nodes["n7"].gpus[0]
            sizes.append((len(gpu.faults), len(gpu.fault_count), len(gpu.fault_shown), len(gpu.fault_last)))
    after = [{"v": 1, "kind": "gpu", "node": "n7", "ts": T0 + 121.0 + s, "gpu": 0, "temp_c": 60.0}
             for s in range(int(REPUBLISH_SECONDS) + 2)]  # the node's samples go on: its clock with them
    published.extend(a for a in replay((parse_event(e) for e in after), engine=engine) if a.type == "gpu_fault")
    assert len({a.id for a in published}) == 1 and published[-1].evidence["count"] == n
    assert len(published) <= 120 / REPUBLISH_SECONDS + 2
    assert sizes[0] == sizes[1]


@pytest.mark.parametrize("seed", range(12))
def test_the_coalescer_loses_no_count_and_bounds_its_output(seed):
    rng = random.Random(seed)
    c = Coalescer(window=1.0, max_keys=rng.choice([2, 8, 4096]))
    q = KindQueues(size=rng.choice([5, 10_000]))
    t, sent, got = 0.0, 0, []
    for _ in range(rng.randint(100, 3000)):
        t += rng.expovariate(rng.choice([5.0, 200.0]))
        e = {"v": 1, "kind": "xid", "node": rng.choice(["a", "b"]), "gpu": rng.randint(0, 3),
             "xid": rng.choice([79, 48, 95]), "ts": t}
        sent += 1
        q.offer(c.add(e, t))
        if rng.random() < 0.05:
            q.offer(c.flush(t))
            got.extend(q.drain())
    q.offer(c.flush(t + 10.0))
    got.extend(q.drain())
    dropped = sum(q.dropped.values())
    if dropped == 0:
        assert sum(e["count"] for e in got) == sent
    assert len(c._open) <= c.max_keys and len(q) == 0
