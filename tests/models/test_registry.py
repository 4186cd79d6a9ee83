"""The workers registry (streams/registry.py): which worker owns which events partition.

The pure part here; on the real broker: tests/streams/test_proxy_kafka.py (two workers proxying to each other).
"""

from __future__ import annotations

import orjson

from stepwatch.streams.registry import PeerRefusal, WorkersRegistry, registry_record

TOPIC = "p.events"


def rec(url: str, partitions, ts: float, *, topic: str = TOPIC, group: str | None = "g-events") -> bytes:
    return registry_record(url=url, topic=topic, group=group, partitions=partitions, ts=ts)


def test_record_is_the_documented_json():
    assert orjson.loads(rec("http://a:1", {1, 0}, 5.0)) == {"url": "http://a:1", "topic": TOPIC, "group": "g-events",
                                                           "partitions": [0, 1], "ts": 5.0}


def test_owner_of_each_partition_and_staleness():
    reg = WorkersRegistry(TOPIC, group="g-events", max_age=30.0)
    assert reg.owner(0, 100.0) is None
    assert reg.apply(rec("http://a:1/", [0, 2], 100.0), 100.0)
    assert reg.apply(rec("http://b:2", [1, 3], 101.0), 101.0)
    assert [reg.owner(p, 105.0) for p in range(4)] == ["http://a:1", "http://b:2", "http://a:1", "http://b:2"]
    assert reg.owners(105.0) == {0: "http://a:1", 1: "http://b:2", 2: "http://a:1", 3: "http://b:2"}
    assert reg.owner(0, 105.0, exclude="http://a:1/") is None  # this worker answers for itself
    # Entries older than max_age do not count (the worker is gone or cut off) ...
    assert reg.owner(0, 130.5) is None and reg.owner(1, 130.5) == "http://b:2"
    assert reg.owners(140.0) == {}
    # ... and one that is already stale when read (the start of the topic) is not taken.
    assert not WorkersRegistry(TOPIC, max_age=30.0).apply(rec("http://a:1", [0], 10.0), 100.0)


def test_assignment_changes_and_clean_stop():
    reg = WorkersRegistry(TOPIC, max_age=30.0)
    reg.apply(rec("http://a:1", [0, 1], 100.0), 100.0)
    # B joins: A gives up partition 1, B takes it.
    reg.apply(rec("http://a:1", [0], 110.0), 110.0)
    reg.apply(rec("http://b:2", [1], 110.5), 110.5)
    assert [reg.owner(p, 111.0) for p in (0, 1)] == ["http://a:1", "http://b:2"]
    # B stops cleanly (empty list); A takes both again.
    reg.apply(rec("http://b:2", [], 120.0), 120.0)
    assert reg.owner(1, 120.0) is None
    reg.apply(rec("http://a:1", [0, 1], 121.0), 121.0)
    assert reg.owner(1, 121.0) == "http://a:1"
    # A tombstone forgets the worker.
    assert reg.apply(None, 122.0, key=b"http://a:1")
    assert reg.owner(0, 122.0) is None and "http://a:1" not in reg.workers
    # Stale entries are dropped as news comes (the topic keeps every URL ever used).
    reg.apply(rec("http://c:3", [2], 200.0), 200.0)
    assert list(reg.workers) == ["http://c:3"]


def test_a_crashed_owner_is_superseded_by_the_newer_claim():
    reg = WorkersRegistry(TOPIC, max_age=30.0)
    reg.apply(rec("http://a:1", [0], 100.0), 100.0)
    reg.apply(rec("http://b:2", [1], 100.0), 100.0)  # B's last word before it crashed
    reg.apply(rec("http://a:1", [0, 1], 108.0), 108.0)  # A took partition 1 over
    assert reg.owner(1, 109.0) == "http://a:1"
    # An older message of a worker heard from since changes nothing (out of order).
    assert not reg.apply(rec("http://a:1", [0], 104.0), 109.0)
    assert reg.owner(1, 109.0) == "http://a:1"


def test_other_topics_groups_and_garbage_are_ignored():
    reg = WorkersRegistry(TOPIC, group="g-events", max_age=30.0)
    for value in (rec("http://x:1", [0], 100.0, topic="other.events"),
                  rec("http://x:1", [0], 100.0, group="g"),  # the Faust agent's group of the same deployment
                  b"{not json", b"[1]", orjson.dumps({"url": "http://x:1", "topic": TOPIC}),
                  orjson.dumps({"url": "", "topic": TOPIC, "partitions": [0], "ts": 100.0}),
                  orjson.dumps({"url": "http://x:1", "topic": TOPIC, "partitions": ["a"], "ts": 100.0})):
        assert not reg.apply(value, 100.0)
    assert reg.owner(0, 100.0) is None and reg.ignored == 7
    assert reg.apply(rec("http://x:1", [0], 100.0, group=None), 100.0)  # no group named: taken
    assert reg.apply({"url": "http://y:1", "topic": TOPIC, "partitions": [1], "ts": 100.0}, 100.0)  # decoded
    assert reg.owners(100.0) == {0: "http://x:1", 1: "http://y:1"}


KEY = b"shared-peer-key"


def test_with_a_key_only_signed_records_count():
    reg = WorkersRegistry(TOPIC, max_age=30.0, key=KEY)
    signed = registry_record(url="http://a:1", topic=TOPIC, group=None, partitions=[0], ts=100.0, key=KEY)
    assert orjson.loads(signed)["sig"]
    assert not reg.apply(rec("http://evil:1", [0], 100.0), 100.0)  # unsigned
    assert not reg.apply(registry_record(url="http://evil:1", topic=TOPIC, group=None, partitions=[0], ts=100.0,
                                         key=b"guess"), 100.0)
    tampered = orjson.loads(signed) | {"url": "http://evil:1"}
    assert not reg.apply(orjson.dumps(tampered), 100.0)
    assert reg.refused == 3 and reg.owner(0, 100.0) is None
    assert reg.apply(signed, 100.0) and reg.owner(0, 100.0) == "http://a:1"
    assert reg.known("http://a:1/", 100.0) and not reg.known("http://evil:1", 100.0)


def test_future_timestamps_and_unlisted_peers_are_refused():
    reg = WorkersRegistry(TOPIC, max_age=30.0, peers=frozenset({"http://a:1"}))
    assert not reg.apply(rec("http://b:2", [0], 100.0), 100.0)  # not on the list
    assert not reg.apply(rec("http://a:1", [0], 3700.0), 100.0)  # an hour ahead: would outlive every real word
    assert not reg.apply(rec("http://a:1", [0], float("nan")), 100.0)
    assert reg.owner(0, 100.0) is None
    assert reg.apply(rec("http://a:1", [0], 102.0), 100.0)  # within the tolerated skew
    assert reg.known("http://a:1", 100.0) and not reg.known("http://b:2", 100.0)


def test_each_refused_record_is_reported_with_its_reason():
    reasons = []
    reg = WorkersRegistry(TOPIC, max_age=30.0, key=KEY, peers=frozenset({"http://a:1"}), on_refused=reasons.append)
    assert not reg.apply(rec("http://a:1", [0], 100.0), 100.0)
    assert not reg.apply(registry_record(url="http://a:1", topic=TOPIC, group=None, partitions=[0], ts=100.0,
                                         key=b"guess"), 100.0)
    assert not reg.apply(registry_record(url="http://b:2", topic=TOPIC, group=None, partitions=[0], ts=100.0,
                                         key=KEY), 100.0)
    assert not reg.apply(registry_record(url="http://a:1", topic=TOPIC, group=None, partitions=[0], ts=3700.0,
                                         key=KEY), 100.0)
    assert reg.apply(registry_record(url="http://a:1", topic=TOPIC, group=None, partitions=[0], ts=100.0,
                                     key=KEY), 100.0)
    assert reasons == [PeerRefusal.UNSIGNED, PeerRefusal.BAD_SIGNATURE, PeerRefusal.NOT_A_PEER,
                       PeerRefusal.FUTURE_TS] and reg.refused == 4


def test_a_new_worker_beyond_the_cap_is_refused_as_over_cap(monkeypatch):
    import stepwatch.streams.registry as registry

    monkeypatch.setattr(registry, "MAX_WORKERS", 2)
    reasons = []
    reg = WorkersRegistry(TOPIC, max_age=30.0, on_refused=reasons.append)
    assert reg.apply(rec("http://a:1", [0], 100.0), 100.0) and reg.apply(rec("http://b:2", [1], 100.0), 100.0)
    assert not reg.apply(rec("http://c:3", [2], 100.0), 100.0)
    assert reg.apply(rec("http://a:1", [0], 101.0), 101.0)  # a known worker's new word still counts
    assert reasons == [PeerRefusal.OVER_CAP]


def _signed(url: str, partitions, ts: float) -> bytes:
    return registry_record(url=url, topic=TOPIC, group=None, partitions=partitions, ts=ts, key=KEY)


def test_with_a_key_an_unsigned_tombstone_removes_nobody_and_is_refused():
    reasons = []
    reg = WorkersRegistry(TOPIC, max_age=30.0, key=KEY, on_refused=reasons.append)
    urls = [f"http://w{i}:1" for i in range(5)]
    for i, url in enumerate(urls):
        assert reg.apply(_signed(url, [i], 100.0), 100.0)
    before = reg.owners(101.0)
    for url in urls + [u + "/" for u in urls] + ["http://stranger:1"]:  # every spelling of every peer, and others
        assert not reg.apply(None, 101.0, key=url.encode())
    assert reg.owners(101.0) == before and all(reg.known(u, 101.0) for u in urls)
    assert reasons == [PeerRefusal.UNSIGNED_TOMBSTONE] * 11 and reg.refused == 11
    # What a key holder can do: a signed empty list (a clean stop) withdraws the worker.
    assert reg.apply(_signed(urls[0], [], 102.0), 102.0) and reg.owner(0, 102.0) is None


def test_without_a_key_or_a_peer_list_no_advertised_url_is_verified():
    # Anyone who can write the topic could name any URL: the proxy follows none of them (nor sends its token).
    reg = WorkersRegistry(TOPIC, max_age=30.0)
    assert not reg.verifies
    for i in range(4):
        assert reg.apply(rec(f"http://w{i}:1", [i], 100.0), 100.0)
        assert reg.owner(i, 100.0) == f"http://w{i}:1"  # where the job is, for the answer ...
        assert not reg.known(f"http://w{i}:1", 100.0)  # ... but not a peer to talk to
    assert WorkersRegistry(TOPIC, key=KEY).verifies and WorkersRegistry(TOPIC, peers=frozenset({"http://a"})).verifies
