"""The worker's web server as an attacker on the network meets it (docs/security.md), on the real broker.

Loopback bind by default; off loopback a bearer token on every page but /health and /metrics, and no
start at all without one; the proxy follows only signed workers-topic records, no redirect, and never
an arbitrary URL (issue 27 findings 1 and 2), nor any at all without a peer key or list, and an
unsigned tombstone removes no signed peer (issue 44). The registry's pure checks: tests/models/test_registry.py.
"""

from __future__ import annotations

import http.client
import http.server
import threading
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

from opsupport import free_port, wait_for
from stepwatch.streams.registry import registry_record
from stepwatch.streams.telemetry_feed import partition_of
from support import run_stepwatch, stepwatch_env

pytestmark = pytest.mark.kafka
TOKEN = "tok-" + "x" * 28


def request(port: int, path: str, token: str | None = None) -> tuple[int, dict, bytes]:
    """One GET on 127.0.0.1:port, redirects not followed; (status, headers, body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


def listening_addresses(port: int) -> set[str]:
    """The local addresses (hex, as /proc/net/tcp{,6} write them) of sockets listening on ``port``."""
    out = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(name) as f:
            for line in list(f)[1:]:
                fields = line.split()
                address, hex_port = fields[1].split(":")
                if int(hex_port, 16) == port and fields[3] == "0A":  # 0A: LISTEN
                    out.add(address)
    return out


def second_events_member(kafka_bootstrap: str, topic_prefix: str, app_id: str):
    """Start a second member of the worker's events group (round robin): the worker then holds one partition of
    two and has a job to proxy. Returns the function that makes it leave the group."""
    stop = threading.Event()

    def member() -> None:
        consumer = KafkaConsumer(topic_prefix + "events", bootstrap_servers=kafka_bootstrap, group_id=app_id + "-events",
                                 partition_assignment_strategy=[RoundRobinPartitionAssignor], enable_auto_commit=False)
        try:
            while not stop.is_set():
                consumer.poll(timeout_ms=200)
        finally:
            consumer.close()

    thread = threading.Thread(target=member, daemon=True)
    thread.start()

    def leave() -> None:
        stop.set()
        thread.join(timeout=10)

    return leave


def test_default_bind_is_loopback_and_an_open_off_loopback_bind_is_refused(start_worker, kafka_bootstrap,
                                                                         topic_prefix, tmp_path):
    port = free_port()
    start_worker(STEPWATCH_WORKER_WEB_PORT=str(port))
    wait_for(lambda: request(port, "/health")[0] == 200, what="the worker's /health")
    assert listening_addresses(port) == {"0100007F"}  # 127.0.0.1 only, not 0.0.0.0 (00000000)
    assert request(port, "/jobs")[0] == 200  # loopback without a token: the operator on the host

    env = stepwatch_env(kafka_bootstrap, topic_prefix, STEPWATCH_WORKER_WEB_PORT=str(free_port()),
                        STEPWATCH_WORKER_WEB_BIND="0.0.0.0", STEPWATCH_WORKER_DATADIR=str(tmp_path / "f2"))
    refused = run_stepwatch("worker", env=env, check=False, timeout=60)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip().splitlines() == [
        "stepwatch worker: STEPWATCH_WORKER_WEB_BIND=0.0.0.0 is not loopback: set STEPWATCH_WORKER_WEB_TOKEN_FILE "
        "(or STEPWATCH_WORKER_WEB_ALLOW_UNAUTHENTICATED=1 on a trusted network)"]


def test_off_loopback_every_page_but_health_and_metrics_wants_the_token(start_worker, tmp_path):
    token_file = tmp_path / "web-token"
    token_file.write_text(TOKEN + "\n")
    port = free_port()
    start_worker(STEPWATCH_WORKER_WEB_PORT=str(port), STEPWATCH_WORKER_WEB_BIND="0.0.0.0",
                 STEPWATCH_WORKER_WEB_TOKEN_FILE=str(token_file))
    wait_for(lambda: request(port, "/health")[0] == 200, what="the worker's /health without a token")
    assert listening_addresses(port) == {"00000000"}
    status, _, body = request(port, "/metrics")
    assert status == 200 and b"stepwatch_" in body
    for path in ("/jobs", "/config", "/jobs/j1", "/dashboard", "/dashboard/j1", "/router/", "/table/", "/"):
        status, headers, _ = request(port, path)
        assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer"), path
        assert request(port, path, token="wrong" + TOKEN[5:])[0] == 401, path
    assert request(port, "/jobs", token=TOKEN)[0] == 200
    assert request(port, "/config", token=TOKEN)[0] == 200


class Server:
    """A local HTTP server in a thread that answers every GET with ``status`` (and ``headers``); counts hits."""

    def __init__(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.hits: list[tuple[str, str | None]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                outer.hits.append((self.path, self.headers.get("Authorization")))
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_a_forged_workers_record_does_not_make_the_proxy_fetch_an_arbitrary_url(start_worker, kafka_bootstrap,
                                                                              topic_prefix, tmp_path):
    key = b"peer-key-" + b"k" * 23
    (tmp_path / "peer-key").write_bytes(key + b"\n")
    token_file = tmp_path / "web-token"
    token_file.write_text(TOKEN)
    internal = Server(200, b'{"secret": "internal service"}')  # what an attacker wants to read
    peer = Server(302, b'{"peer": "said"}', headers={"Location": internal.url + "/secret"})
    app_id = topic_prefix.rstrip(".") + "-worker"
    port = free_port()
    start_worker(STEPWATCH_WORKER_WEB_PORT=str(port), STEPWATCH_KAFKA_PARTITIONS="2",
                 STEPWATCH_WORKER_CONSUMER="aiokafka", STEPWATCH_WORKER_REGISTRY_INTERVAL="2",
                 STEPWATCH_WORKER_PEER_KEY_FILE=str(tmp_path / "peer-key"),
                 STEPWATCH_WORKER_WEB_TOKEN_FILE=str(token_file))
    # A second member of the worker's events group takes one partition: the worker has a job to proxy.
    leave_group = second_events_member(kafka_bootstrap, topic_prefix, app_id)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    try:
        import orjson

        mine = wait_for(lambda: (p := orjson.loads(request(port, "/health")[2]).get("partitions")) and len(p) == 1 and p,
                        timeout=90, what="the worker holding one events partition of two")
        other = 1 - mine[0]
        job = next(name for i in range(1000) if partition_of(name := f"job-{i}", 2) == other)
        events = topic_prefix + "events"
        workers_topic = topic_prefix + "workers"
        now = time.time()
        # The forgery: unsigned, stamped an hour ahead (it would outlive every real advertisement) ...
        producer.send(workers_topic, key=internal.url.encode(), value=registry_record(
            url=internal.url, topic=events, group=app_id + "-events", partitions=[0, 1], ts=now + 3600))
        # ... and one signed with a wrong key, then the real peer's signed word (read after both: one partition).
        producer.send(workers_topic, key=internal.url.encode(), value=registry_record(
            url=internal.url, topic=events, group=app_id + "-events", partitions=[0, 1], ts=now, key=b"guessed"))
        producer.send(workers_topic, key=peer.url.encode(), value=registry_record(
            url=peer.url, topic=events, group=app_id + "-events", partitions=[other], ts=time.time(), key=key))
        producer.flush()

        def proxied():
            status, _, body = request(port, f"/jobs/{job}", token=TOKEN)
            return status == 302 and body

        # The signed peer counts (so both forgeries were read and refused); its redirect is not followed.
        assert wait_for(proxied, timeout=30, what="the request proxied to the signed peer") == b'{"peer": "said"}'
        assert internal.hits == []
        assert peer.hits == [(f"/jobs/{job}", f"Bearer {TOKEN}")]  # the proxy passes the token on
        # Both forgeries are counted in /metrics by reason (no token needed there).
        from prometheus_client.parser import text_string_to_metric_families

        def refused() -> dict[str, float]:
            text = request(port, "/metrics")[2].decode()
            return {s.labels["reason"]: s.value for f in text_string_to_metric_families(text)
                    if f.name == "stepwatch_worker_peer_records_refused" for s in f.samples
                    if s.name.endswith("_total")}

        assert wait_for(lambda: (r := refused()).get("bad_signature") and r, timeout=30,
                        what="the refused records in /metrics") == \
            {"unsigned": 1.0, "bad_signature": 1.0, "not_a_peer": 0.0, "future_ts": 0.0, "over_cap": 0.0,
             "unsigned_tombstone": 0.0}
        # An unsigned tombstone for the signed peer (issue 44 row 11) removes nothing: refused and counted, and
        # the peer still answers for its job.
        producer.send(workers_topic, key=peer.url.encode(), value=None)
        producer.flush()
        assert wait_for(lambda: refused().get("unsigned_tombstone"), timeout=30,
                        what="the tombstone refused in /metrics") == 1.0
        assert proxied() == b'{"peer": "said"}' and len(peer.hits) == 2
    finally:
        leave_group()
        producer.close()
        internal.close()
        peer.close()


def test_without_a_peer_key_or_list_the_proxy_follows_no_workers_topic_url(start_worker, kafka_bootstrap,
                                                                         topic_prefix, tmp_path):
    """The default outside Helm (issue 44, "SSRF by default"): a record anyone can write names the owner of the
    job's partition; the worker warns at start, sends nothing there (least of all its token) and answers
    where the job is and how to set a key."""
    import orjson

    token_file = tmp_path / "web-token"
    token_file.write_text(TOKEN)
    attacker = Server(200, b'{"owner": "attacker"}')
    app_id = topic_prefix.rstrip(".") + "-worker"
    port = free_port()
    worker = start_worker(STEPWATCH_WORKER_WEB_PORT=str(port), STEPWATCH_KAFKA_PARTITIONS="2",
                          STEPWATCH_WORKER_CONSUMER="aiokafka", STEPWATCH_WORKER_REGISTRY_INTERVAL="2",
                          STEPWATCH_WORKER_WEB_TOKEN_FILE=str(token_file))
    assert "no peer key and no peer list" in worker.log_text()
    leave_group = second_events_member(kafka_bootstrap, topic_prefix, app_id)  # the worker holds one of two
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    try:
        mine = wait_for(lambda: (p := orjson.loads(request(port, "/health")[2]).get("partitions")) and len(p) == 1
                        and p, timeout=90, what="the worker holding one events partition of two")
        other = 1 - mine[0]
        job = next(name for i in range(1000) if partition_of(name := f"job-{i}", 2) == other)
        producer.send(topic_prefix + "workers", key=attacker.url.encode(), value=registry_record(
            url=attacker.url, topic=topic_prefix + "events", group=app_id + "-events", partitions=[other],
            ts=time.time()))
        producer.flush()

        def advertised():
            status, _, body = request(port, f"/jobs/{job}", token=TOKEN)
            answer = orjson.loads(body)
            return status == 404 and answer.get("owner") == attacker.url and answer

        answer = wait_for(advertised, timeout=30, what="the advertised owner in the answer")
        assert answer["partition"] == other and answer["verified"] is False
        assert "STEPWATCH_WORKER_PEER_KEY_FILE" in answer["error"] and "not proxied" in answer["error"]
        assert attacker.hits == []
    finally:
        leave_group()
        producer.close()
        attacker.close()
