"""Two workers on the real broker: a status request to either one for a job the other owns is proxied there.

In both events-consumer modes: with the Faust agent the owner comes from Faust's assignor, with the
aiokafka consumer from the workers registry (streams/registry.py; its pure part: tests/models/test_registry.py).
"""

from __future__ import annotations

import urllib.error
import urllib.request

import orjson
import pytest
from kafka import KafkaConsumer

from conftest import WORKER_CONSUMERS
from opsupport import free_port, get_json, send_steps, wait_for
from stepwatch.streams.telemetry_feed import partition_of

pytestmark = pytest.mark.kafka
PARTITIONS = 2


def job_in(partition: int) -> str:
    """A job id that Kafka's default partitioner puts in ``partition``."""
    return next(name for i in range(1000) if partition_of(name := f"job-{i}", PARTITIONS) == partition)


def get_unproxied(url: str) -> tuple[int, dict]:
    """GET as a proxied request would come: the worker answers for itself and never proxies it on."""
    request = urllib.request.Request(url, headers={"X-Stepwatch-Proxied": "1"})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, orjson.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, orjson.loads(exc.read())


def registry_messages(bootstrap: str, topic: str) -> list[dict]:
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, group_id=None, consumer_timeout_ms=2000)
    try:
        return [orjson.loads(r.value) for r in consumer]
    finally:
        consumer.close()


@pytest.mark.parametrize("worker_consumer", WORKER_CONSUMERS)
def test_each_worker_proxies_to_the_owner_of_the_other_partition(kafka_bootstrap, topic_prefix, start_worker,
                                                                 tmp_path, worker_consumer):
    ports = [free_port(), free_port()]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    (tmp_path / "peer-key").write_text("proxy-test-peer-key-" + "k" * 12)  # peers verify each other's records
    workers = [start_worker(STEPWATCH_KAFKA_PARTITIONS=str(PARTITIONS), STEPWATCH_WORKER_WEB_PORT=str(port),
                            STEPWATCH_WORKER_DATADIR=str(tmp_path / f"faust-{i}"),
                            STEPWATCH_WORKER_REGISTRY_INTERVAL="2",
                            STEPWATCH_WORKER_PEER_KEY_FILE=str(tmp_path / "peer-key"), ready=False)
               for i, port in enumerate(ports)]
    for worker in workers:  # started together: one start's wait, not two
        worker.wait_ready()

    def health(i: int) -> dict:
        status, body = get_json(urls[i] + "/health")
        return body if status == 200 else {}

    # One partition each once the group has settled.
    owned = wait_for(lambda: (h := [health(0).get("partitions"), health(1).get("partitions")])
                     and sorted(h, key=str) == [[0], [1]] and h, timeout=90, what="one events partition per worker")
    jobs = {i: job_in(owned[i][0]) for i in range(2)}  # the job each worker owns
    events = topic_prefix + "events"
    for i in range(2):
        send_steps(kafka_bootstrap, events, job=jobs[i], ranks=8 + 8 * i, steps=range(0, 20))
    for i in range(2):
        wait_for(lambda: [j["job"] for j in get_json(urls[i] + "/jobs")[1]["jobs"]
                          if j["latest_step"] == 19] == [jobs[i]], what=f"worker {i} holding {jobs[i]}")

    for asked, owner in ((0, 1), (1, 0)):
        job = jobs[owner]
        local = get_json(urls[owner] + f"/jobs/{job}")
        assert local[0] == 200 and local[1]["rank_count"] == 8 + 8 * owner
        # The asked worker does not hold it, and knows who does ...
        status, body = get_unproxied(urls[asked] + f"/jobs/{job}")
        assert status == 404 and body["partition"] == owned[owner][0], body
        assert body["owner"] == urls[owner] and "not on this worker" in body["error"], body
        # ... so a plain request returns the owner's view.
        status, proxied = wait_for(lambda: (r := get_json(urls[asked] + f"/jobs/{job}"))[0] == 200 and r,
                                   what=f"/jobs/{job} through worker {asked}")
        assert proxied["job"] == job and proxied["rank_count"] == local[1]["rank_count"] == 8 + 8 * owner
        assert [r["rank"] for r in proxied["ranks"]] == [r["rank"] for r in local[1]["ranks"]]
        status, heat = get_json(urls[asked] + f"/jobs/{job}/heatmap")
        assert status == 200 and heat["job"] == job, heat
        # Its own job it answers itself.
        assert get_json(urls[asked] + f"/jobs/{jobs[asked]}")[1]["rank_count"] == 8 + 8 * asked

    # Each worker advertised its partition under its URL; one that stops cleanly withdraws.
    workers[1].stop()
    records = registry_messages(kafka_bootstrap, topic_prefix + "workers")
    last = {r["url"]: r for r in records}
    assert set(last) == set(urls) and {r["topic"] for r in records} == {events}
    assert last[urls[1]]["partitions"] == []
    assert [r["partitions"] for r in records if r["url"] == urls[1]].count(owned[1]) >= 1
    # The other worker takes the partition over and answers for both jobs itself.
    wait_for(lambda: health(0).get("partitions") == [0, 1], timeout=90, what="worker 0 owning both partitions")
    status, body = wait_for(lambda: (r := get_unproxied(urls[0] + f"/jobs/{jobs[1]}"))[0] == 200 and r,
                            what="the moved job rebuilt on worker 0")
    assert body["job"] == jobs[1]
