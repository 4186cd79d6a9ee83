"""Job-health rules live, against the real broker: simulator -> Kafka -> worker -> alerts topic.

One worker, two simulated jobs published as fast as possible through the Python API (their
timestamps are in the past: the engine allows for the producer's clock offset):

* ``jh-network``: the network slows every collective's transfer 2.5x from step 60 (collective
  events on): a ``comm_slowdown`` and a ``throughput_drop`` naming the communication layer;
* ``jh-ckpt``: checkpoints every 20 steps until step 40, then none; staleness by steps (40),
  not by age, so that it does not depend on how far the job's clock advances while the test
  runs. Its ``phase: end`` is left out: an ended job is not checked for staleness.
"""

from __future__ import annotations

import pytest
from support import read_alerts

from stepwatch.config import Settings
from stepwatch.producers.publisher import EventPublisher
from stepwatch.sim.simulator import ClusterSimulator, CommSlowdown, SimulationSpec
from stepwatch.security import client_config
from stepwatch.topics import ensure_topics

pytestmark = pytest.mark.kafka

ENV = {
    "STEPWATCH_JOB_HEALTH_CHECKPOINT_MAX_AGE_STEPS": "40",
    "STEPWATCH_JOB_HEALTH_CHECKPOINT_MAX_AGE_SECONDS": "0",
    "STEPWATCH_WORKER_TICK_INTERVAL": "0.5",
}
WANTED = ("comm_slowdown", "throughput_drop", "checkpoint_stale")


def _firing(alerts: list[dict], kind: str) -> list[dict]:
    return [a for a in alerts if a.get("type") == kind and a["status"] == "firing"]


def test_throughput_drop_comm_slowdown_and_checkpoint_stale_reach_the_alerts_topic(kafka_bootstrap, topic_prefix,
                                                                                   start_worker):
    worker = start_worker(**ENV)
    settings = Settings.from_env(worker.env)
    ensure_topics(settings.kafka, client_config=client_config(settings))
    network = SimulationSpec(job="jh-network", ranks=16, steps=130, seed=5, collective_events=True,
                             effects=(CommSlowdown(start_step=60, factor=2.5),))
    ckpt = SimulationSpec(job="jh-ckpt", ranks=8, steps=120, seed=6, checkpoint_every=20, checkpoint_seconds=2.0,
                          checkpoint_until=41)
    with EventPublisher(bootstrap=settings.kafka.bootstrap, topic=settings.kafka.topic(settings.kafka.events_topic),
                        **client_config(settings)) as publisher:
        for spec in (network, ckpt):
            for _, batch in ClusterSimulator(spec).steps():
                batch = [e for e in batch if spec is network or e.get("phase") != "end"]
                if batch:
                    publisher.send(spec.job, batch)
    assert publisher.events_dropped == 0

    alerts = read_alerts(kafka_bootstrap, topic_prefix + "alerts",
                         until=lambda got: all(_firing(got, kind) for kind in WANTED), timeout=60)
    missing = [kind for kind in WANTED if not _firing(alerts, kind)]
    assert not missing, (missing, [(a["type"], a["job"], a["status"]) for a in alerts], worker.log_text()[-3000:])

    comm = _firing(alerts, "comm_slowdown")[0]
    assert comm["job"] == "jh-network" and comm["evidence"]["op"] == "all_reduce"
    assert comm["evidence"]["process_group"] == "default" and comm["evidence"]["increase"] >= 0.3
    drop = _firing(alerts, "throughput_drop")[0]
    assert drop["job"] == "jh-network" and drop["evidence"]["layer"] == "communication"
    assert 60 <= drop["evidence"]["onset_step"] <= drop["evidence"]["detected_step"] <= 70
    stale = _firing(alerts, "checkpoint_stale")[0]
    assert stale["job"] == "jh-ckpt" and stale["evidence"]["reason"] == "age"
    assert stale["evidence"]["last_checkpoint_step"] == 40 and stale["evidence"]["steps_since"] > 40
    assert stale["labels"]["alertname"] == "stepwatch_checkpoint_stale"
    # The healthy part of each job raised nothing else of these kinds, and no straggler anywhere.
    assert len(_firing(alerts, "checkpoint_stale")) == 1 and not _firing(alerts, "straggler")
    assert all(a["job"] == "jh-network" for a in _firing(alerts, "comm_slowdown") + _firing(alerts, "throughput_drop"))
