"""(f) One large job over several processes: single-event messages of a 4,096-rank job keyed by rank shard,
read by one worker alone (each consumer mode) vs re-batched per job by two ``stepwatch shard`` processes and
read by the job's worker (rates and CPU per event of each stage)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from bench.common import CONSUMERS, PY, REPO, Workers, encode, ensure_topics, produce_keyed, sim_events_job, terminate


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _ShardStages:
    """``stepwatch shard`` processes of one group; CPU counted from their partition assignment on."""

    def __init__(self, bootstrap: str, prefix: str, count: int, tmp: Path) -> None:
        import socket

        exe = str(Path(PY).parent / "stepwatch")
        env = dict(os.environ, KAFKA_BOOTSTRAP=bootstrap, STEPWATCH_KAFKA_TOPIC_PREFIX=prefix,
                   STEPWATCH_KAFKA_APP_ID=prefix + "stepwatch")
        self.ports = []
        for _ in range(count):
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                self.ports.append(sock.getsockname()[1])
        self.logs = [tmp / f"{prefix}shard{i}.log" for i in range(count)]
        self.procs = [subprocess.Popen([exe, "shard", "--metrics-port", str(port)], stdout=open(log, "w"),
                                       stderr=subprocess.STDOUT, cwd=REPO, env=env)
                      for log, port in zip(self.logs, self.ports)]
        self.cpu_start: list[float | None] = [None] * count
        self.started: list[float | None] = [None] * count

    def published(self) -> int:
        """Events the stage published (acknowledged by the broker), from the processes' /metrics."""
        import urllib.request

        total = 0
        for port in self.ports:
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
            except OSError:
                continue
            for line in text.splitlines():
                if line.startswith("stepwatch_shard_events_published_total "):
                    total += int(float(line.split()[1]))
        return total

    def poll(self) -> None:
        for i, (p, log) in enumerate(zip(self.procs, self.logs)):
            if p.poll() is not None:
                raise RuntimeError(f"shard stage exited: {log.read_text()[-2000:]}")
            if self.cpu_start[i] is None and "assigned partitions" in log.read_text():
                self.cpu_start[i] = _cpu_seconds(p.pid)
                self.started[i] = time.time()

    def cpu(self) -> list[float]:
        return [_cpu_seconds(p.pid) - (c or 0.0) for p, c in zip(self.procs, self.cpu_start)]

    def stop(self) -> list[int]:
        """Stop them; the messages each consumed (from its last log line)."""
        import re

        terminate(self.procs, 40)  # they flush and commit on SIGTERM
        out = []
        for log in self.logs:
            m = re.search(r"consumed (\d+) messages", log.read_text())
            out.append(int(m.group(1)) if m else -1)
        return out


def large_job(bootstrap: str, tmp: Path, *, ranks: int = 4096, steps: int = 40, shard_ranks: int = 512,
              partitions: int = 2) -> dict:
    """One job of ``ranks`` ranks sending single-event messages, keyed by rank shard onto a raw events
    topic of ``partitions`` partitions: (1) one worker reads them all (each consumer mode); (2) two
    ``stepwatch shard`` processes re-batch them per job and one worker reads the job-events topic."""
    from stepwatch.localkafka import create_topics
    from stepwatch.producers.publisher import shard_key

    events = sim_events_job("bench-large", ranks, steps, seed=3)
    messages = [(shard_key("bench-large", e["rank"], shard_ranks).encode(), encode([e], 1)[0]) for e in events]
    n = len(messages)
    out: dict = {"ranks": ranks, "steps": steps, "events": n, "shard_ranks": shard_ranks, "partitions": partitions}
    for mode in CONSUMERS:  # (1) one worker on the single-event messages
        prefix = f"lj{mode[0]}{uuid.uuid4().hex[:6]}."
        ensure_topics(bootstrap, prefix, partitions)
        produce_keyed(bootstrap, prefix + "events", messages)
        workers = Workers(bootstrap, prefix, partitions, 1, tmp, consumer=mode)
        try:
            (st,) = workers.wait(lambda st: st[0]["n"] >= n, 600, "all events")
            out[f"one_{mode}_events_s"] = (n - st["n_first"]) / (st["last"] - st["first"])
            out[f"one_{mode}_cpu_us"] = (st["cpu_last"] - st["cpu_first"]) / (n - st["n_first"]) * 1e6
        finally:
            workers.stop()
        print(f"large job, one worker ({mode}): {out}", file=sys.stderr)
    # (2) the two stages one after the other, each on a full topic, so that each one's own rate shows:
    # two shard processes re-batch the whole raw topic (clock: from their partition assignment, both
    # waiting for the group's first rebalance, to the last event acknowledged on job-events), then one
    # worker reads job-events (clock: its first event to its last, as in (1)).
    prefix = f"ljs{uuid.uuid4().hex[:6]}."
    ensure_topics(bootstrap, prefix, partitions)
    create_topics(bootstrap, [prefix + "job-events"], partitions=1)
    produce_keyed(bootstrap, prefix + "events", messages)
    stages = _ShardStages(bootstrap, prefix, 2, tmp)
    try:
        end = time.time() + 600
        while stages.published() < n:
            stages.poll()
            if time.time() > end:
                raise RuntimeError(f"timed out: the shard stage published {stages.published()} of {n} events")
            time.sleep(0.05)
        done = time.time()
        shard_cpu = stages.cpu()
        out["shard_events_s"] = n / (done - min(t for t in stages.started if t is not None))
        out["shard_cpu_us"] = [c / n * 1e6 for c in shard_cpu]
    finally:
        out["shard_messages"] = stages.stop()
    workers = Workers(bootstrap, prefix, 1, 1, tmp, consumer="aiokafka",
                       env={"STEPWATCH_KAFKA_EVENTS_TOPIC": "job-events"})
    try:
        (st,) = workers.wait(lambda st: st[0]["n"] >= n, 600, "all events")
        out["staged_events_s"] = (n - st["n_first"]) / (st["last"] - st["first"])
        out["staged_worker_cpu_us"] = (st["cpu_last"] - st["cpu_first"]) / (n - st["n_first"]) * 1e6
    finally:
        workers.stop()
    print(f"large job, shard stage: {out}", file=sys.stderr)
    return out
