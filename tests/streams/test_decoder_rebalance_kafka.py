"""A second worker joins while the first reads large bursts through its decoder process: the parts fetched
before the rebalance are dropped (the new owner reads them again), and every straggler is still named
once, by one worker."""

from __future__ import annotations

import re
import threading
import time

import orjson
import pytest

from opsupport import free_port, get
from support import group_caught_up, read_all_alerts, wait_until

pytestmark = pytest.mark.kafka

JOBS = 8


def _backlog(now: float) -> dict[str, list[bytes]]:
    from stepwatch.sim.simulator import ClusterSimulator, SimulationSpec, StragglerFault

    out: dict[str, list[bytes]] = {}
    for j in range(JOBS):
        spec = SimulationSpec(job=f"rb-{j}", ranks=128, steps=80, seed=j, start_time=now - 200, warmup_steps=2,
                              node_prefix=f"rb{j}-", stragglers=(StragglerFault(rank=5 + j, start_step=30,
                                                                                factor=1.6),))
        run, msgs = [], []
        for e in ClusterSimulator(spec).events():
            if e["kind"] != "step":
                continue
            run.append(e)
            if len(run) == 64:
                msgs.append(orjson.dumps({"v": 1, "kind": "batch", "events": run}))
                run = []
        out[spec.job] = msgs
    return out


def _decoded(port: int) -> float:
    text = get(f"http://127.0.0.1:{port}/metrics")[1].decode()
    found = re.search(r"^stepwatch_decoder_messages_total (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def test_a_rebalance_mid_burst_names_every_straggler_once(kafka_bootstrap, topic_prefix, start_worker):
    from kafka import KafkaProducer

    from stepwatch.topics import create_topics

    events = topic_prefix + "events"
    create_topics(kafka_bootstrap, [events], 2)
    backlog = _backlog(time.time())
    env = dict(STEPWATCH_WORKER_CONSUMER="aiokafka", STEPWATCH_WORKER_DECODE_PROCESSES="1",
               STEPWATCH_KAFKA_PARTITIONS="2")
    ports = [free_port(), free_port()]
    first = start_worker(STEPWATCH_WORKER_WEB_PORT=str(ports[0]), **env)

    def send() -> None:
        """Every job's next 10 messages (~1 MB, over 256 KiB a partition) every 0.4 s: large reads."""
        producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, linger_ms=20, batch_size=1 << 20,
                                 max_request_size=8 << 20)
        for lo in range(0, max(map(len, backlog.values())), 10):
            for job, msgs in backlog.items():
                for m in msgs[lo:lo + 10]:
                    producer.send(events, key=job.encode(), value=m)
            producer.flush()
            time.sleep(0.4)
        producer.close()

    sender = threading.Thread(target=send)
    sender.start()
    second = start_worker(STEPWATCH_WORKER_WEB_PORT=str(ports[1]), **env)  # joins while the bursts come
    sender.join()
    group = first.env["STEPWATCH_KAFKA_APP_ID"] + "-events"
    wait_until(lambda: group_caught_up(kafka_bootstrap, group, events), timeout=240,
               what="the two workers to consume the bursts")
    want = {(f"rb-{j}", 5 + j) for j in range(JOBS)}
    alerts = read_all_alerts(kafka_bootstrap, topic_prefix + "alerts", timeout=120,
                             until=lambda a: want <= {(x["job"], x["ranks"][0]) for x in a
                                                      if x["type"] == "straggler" and x["ranks"]})
    firing = [a for a in alerts if a["status"] == "firing" and a["type"] == "straggler"]
    logs = (first.log_text()[-3000:], second.log_text()[-3000:])
    assert {(a["job"], a["ranks"][0]) for a in firing} == want, logs
    ids: dict[tuple[str, int], set[str]] = {}
    for a in firing:  # (a firing alert is published again, same id, when its diagnosis grows)
        ids.setdefault((a["job"], a["ranks"][0]), set()).add(a["id"])
    assert all(len(v) == 1 for v in ids.values()), ids  # each named once
    # The first worker owned both partitions, then one: the rebalance came while the bursts did.
    assert "owns events partitions [0, 1]" in first.log_text(), logs[0]
    assert re.search(r"owns events partitions \[[01]\]", first.log_text()), logs[0]
    assert _decoded(ports[0]) > 0, logs[0]  # its bursts went through its decoder process
    for w in (first, second):
        assert "Traceback" not in w.log_text(), w.log_text()[-3000:]
