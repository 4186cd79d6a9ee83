"""The workers registry: which worker owns which events partition, and where to reach it.

Faust's assignor only knows the assignment of Faust's own consumer group, so a worker whose
events consumer is its own (``STEPWATCH_WORKER_CONSUMER=aiokafka``, group ``<app_id>-events``)
could not tell where a job on another worker lives. Every worker therefore advertises its
events partitions and its ``worker.canonical_url`` on the compacted topic ``<prefix>workers``
(``KafkaSettings.workers_topic``), keyed by that URL, value
``{"url", "topic", "group", "partitions", "ts"}``: on every assignment change, every
``worker.registry_interval`` seconds (10) and, with an empty partition list, on a clean stop.
Every worker reads the topic without a consumer group and keeps partition -> (url, ts).

Anyone who can write the topic could otherwise point a job's status requests anywhere (the proxy
fetches from the owner's URL), so (docs/security.md): with ``worker.peer_key_file`` every record
carries ``"sig"``, an HMAC-SHA256 with that shared key over the record without ``sig`` (orjson,
sorted keys), and records without a valid one are ignored; with ``worker.peers`` only the listed
URLs count; a ``ts`` more than ``max_future`` seconds ahead of the reader's clock is ignored (a
future stamp would outlive the real owner's re-advertising); at most ``MAX_WORKERS`` entries.

``WorkersRegistry`` is the pure part (``apply``/``owner``, clock passed in; unit-tested in
tests/models/test_registry.py); ``RegistryAdvertiser`` is the thin Kafka adapter (a ``mode.Service`` of
the app with its own producer and reader).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

import orjson

from .supervise import cancel

log = logging.getLogger("stepwatch.worker.registry")

#: An entry older than this many refresh intervals is ignored (its worker is gone or cut off).
STALE_AFTER_INTERVALS = 3.0
#: Live workers kept at most (beyond, new URLs are ignored and counted): a bound whatever is written.
MAX_WORKERS = 1024
#: Clock skew tolerated between workers, seconds: a ``ts`` further ahead is refused.
MAX_FUTURE_SECONDS = 5.0


class PeerRefusal(str, Enum):
    """Why a workers-topic record was refused (``stepwatch_worker_peer_records_refused_total{reason}``)."""

    UNSIGNED = "unsigned"  # a key is configured and the record carries no ``sig``
    BAD_SIGNATURE = "bad_signature"  # a ``sig`` that is not the HMAC of the record with the shared key
    NOT_A_PEER = "not_a_peer"  # a URL that is not on ``worker.peers``
    FUTURE_TS = "future_ts"  # a ``ts`` more than ``max_future`` seconds ahead
    OVER_CAP = "over_cap"  # a new URL while ``MAX_WORKERS`` workers are live
    UNSIGNED_TOMBSTONE = "unsigned_tombstone"  # a null value (forget this worker) while a key is configured


@dataclass(frozen=True)
class WorkerEntry:
    url: str
    partitions: frozenset[int]
    ts: float


def signature(key: bytes, value: dict) -> str:
    """HMAC-SHA256 (hex) of ``value`` without its ``sig``, serialized with sorted keys."""
    body = orjson.dumps({k: v for k, v in value.items() if k != "sig"}, option=orjson.OPT_SORT_KEYS)
    return hmac.new(key, body, hashlib.sha256).hexdigest()


def registry_record(*, url: str, topic: str, group: str | None, partitions, ts: float,
                    key: bytes | None = None) -> bytes:
    """The value a worker publishes (keyed by ``url``); signed (``"sig"``) when ``key`` is given."""
    value = {"url": url, "topic": topic, "group": group, "partitions": sorted(int(p) for p in partitions), "ts": ts}
    if key is not None:
        value["sig"] = signature(key, value)
    return orjson.dumps(value)


def parse_peers(raw: str) -> frozenset[str] | None:
    """``worker.peers`` (comma-separated URLs) as a set; None when empty (no allow-list)."""
    peers = frozenset(u.strip().rstrip("/") for u in raw.split(",") if u.strip())
    return peers or None


class WorkersRegistry:
    """Partition -> owner URL from the workers' advertisements (pure; the caller passes the clock).

    ``topic``: the events topic; entries for another topic are ignored, and so are those of
    another consumer group when both sides name one. ``max_age``: entries whose ``ts`` is older
    than this (seconds, on the caller's clock) do not count. When two live entries claim one
    partition (a crashed owner's last word and its successor's), the newer claim wins.
    """

    def __init__(self, topic: str, *, group: str | None = None, max_age: float = 30.0, key: bytes | None = None,
                 peers: frozenset[str] | None = None, max_future: float = MAX_FUTURE_SECONDS,
                 on_refused: Callable[[PeerRefusal], None] | None = None) -> None:
        self.topic = topic
        self.group = group
        self.max_age = max_age
        #: The shared signing key (None: records are not signed and not checked).
        self.key = key
        #: The URLs that may own partitions (None: any).
        self.peers = peers
        self.max_future = max_future
        self.workers: dict[str, WorkerEntry] = {}
        self.ignored = 0
        #: Of ``ignored``: records refused as untrusted (bad or missing signature, not a listed peer,
        #: a future ``ts``, over ``MAX_WORKERS``).
        self.refused = 0
        #: Called with the reason of every refused record (the worker counts them in /metrics).
        self.on_refused = on_refused

    def _refusal(self, value: dict, url: str, ts: float, now: float) -> PeerRefusal | None:
        """Why the record is not to be trusted, or None when it is."""
        if self.key is not None:
            sig = value.get("sig")
            if sig is None:
                return PeerRefusal.UNSIGNED
            if type(sig) is not str or not hmac.compare_digest(sig, signature(self.key, value)):
                return PeerRefusal.BAD_SIGNATURE
        if self.peers is not None and url not in self.peers:
            return PeerRefusal.NOT_A_PEER
        if ts > now + self.max_future:
            return PeerRefusal.FUTURE_TS
        if url not in self.workers and len(self.workers) >= MAX_WORKERS:
            return PeerRefusal.OVER_CAP
        return None

    @property
    def verifies(self) -> bool:
        """Whether records are checked (a key or a peer list): unchecked, anyone who can write the topic names
        the owners, so no URL of theirs is verified."""
        return self.key is not None or self.peers is not None

    def known(self, url: str, now: float) -> bool:
        """Whether ``url`` is a verified peer: a listed one, or a live worker whose record was checked (signed
        with the key). With neither a key nor a list none is (the proxy then follows no topic URL)."""
        url = url.rstrip("/")
        if self.peers is not None and url in self.peers:
            return True
        if not self.verifies:
            return False
        entry = self.workers.get(url)
        return entry is not None and now - entry.ts <= self.max_age

    def apply(self, record: bytes | dict | None, now: float, *, key: bytes | str | None = None) -> bool:
        """Take one message of the workers topic; True when it changed what is known.

        ``record``: the value (bytes or decoded); ``None`` with a ``key`` is a tombstone (the
        worker is forgotten). ``now`` is unused except to drop entries that are already stale.
        """
        if isinstance(key, bytes):
            key = key.decode("utf-8", "replace")
        if record is None:
            if key is not None and self.key is not None:
                # A tombstone cannot carry a signature: with a key, only a signed record (an empty partition
                # list, as a clean stop publishes) or age removes a worker.
                self._refused(PeerRefusal.UNSIGNED_TOMBSTONE, key)
                return False
            return key is not None and self.workers.pop(key.rstrip("/"), None) is not None
        try:
            value = orjson.loads(record) if isinstance(record, (bytes, bytearray, memoryview, str)) else record
            if type(value) is not dict:
                raise ValueError("not an object")
            url = str(value["url"]).rstrip("/")
            topic = value["topic"]
            ts = float(value["ts"])
            partitions = frozenset(int(p) for p in value.get("partitions") or ())
            if not url or ts != ts:
                raise ValueError("empty url or NaN ts")
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            self.ignored += 1
            return False
        refusal = self._refusal(value, url, ts, now)
        if refusal is not None:
            self._refused(refusal, url)
            return False
        group = value.get("group")
        if topic != self.topic or (self.group and group and group != self.group):
            self.ignored += 1
            return False
        known = self.workers.get(url)
        if known is not None and known.ts > ts:
            return False  # an older word of a worker we heard from since
        for gone in [u for u, e in self.workers.items() if now - e.ts > self.max_age]:
            del self.workers[gone]  # bounded by the live workers, whatever the topic remembers
        if now - ts > self.max_age:
            self.workers.pop(url, None)
            return known is not None
        self.workers[url] = WorkerEntry(url, partitions, ts)
        return True

    def _refused(self, refusal: PeerRefusal, url: str) -> None:
        self.ignored += 1
        self.refused += 1
        if self.on_refused is not None:
            self.on_refused(refusal)
        if self.refused & (self.refused - 1) == 0:  # the 1st, 2nd, 4th, ...: a flood cannot flood the log
            log.warning("workers registry: ignored an untrusted record for %r (%s); %d so far", url[:200],
                        refusal.value, self.refused)

    def owner(self, partition: int, now: float, *, exclude: str | None = None) -> str | None:
        """The URL of the live worker that claims ``partition`` (newest claim first), or None."""
        exclude = exclude.rstrip("/") if exclude else None
        best: WorkerEntry | None = None
        for entry in self.workers.values():
            if partition not in entry.partitions or entry.url == exclude or now - entry.ts > self.max_age:
                continue
            if best is None or entry.ts > best.ts:
                best = entry
        return best.url if best is not None else None

    def owners(self, now: float) -> dict[int, str]:
        """Every partition with a live owner: partition -> URL."""
        out: dict[int, tuple[float, str]] = {}
        for entry in self.workers.values():
            if now - entry.ts > self.max_age:
                continue
            for p in entry.partitions:
                if p not in out or entry.ts > out[p][0]:
                    out[p] = (entry.ts, entry.url)
        return {p: url for p, (_, url) in sorted(out.items())}


#: What an unverified owner's answer (and the worker's start-up warning) tells the operator to do.
UNVERIFIED_HINT = ("set a shared peer key on every worker (STEPWATCH_WORKER_PEER_KEY_FILE) or list the peers "
                   "(STEPWATCH_WORKER_PEERS); ask the owner directly meanwhile")


def registry_for(settings, topic: str, *, group: str | None,
                 on_refused: Callable[[PeerRefusal], None] | None = None) -> WorkersRegistry:
    """The registry a worker with ``settings`` keeps (key and peers from ``worker.peer_key_file``/``peers``)."""
    from .web_auth import read_secret

    w = settings.worker
    key = read_secret(w.peer_key_file, "STEPWATCH_WORKER_PEER_KEY_FILE").encode() if w.peer_key_file else None
    registry = WorkersRegistry(topic, group=group, max_age=STALE_AFTER_INTERVALS * w.registry_interval, key=key,
                               peers=parse_peers(w.peers), on_refused=on_refused)
    if not registry.verifies and settings.kafka.partitions > 1:  # room for a second worker
        log.warning("no peer key and no peer list: this worker will not proxy status requests to the workers "
                    "that own the other events partitions (a workers-topic record is not verified); %s",
                    UNVERIFIED_HINT)
    return registry


class RegistryAdvertiser:
    """Publishes this worker's events partitions on the workers topic and reads everyone's into ``registry``.

    ``owned()``: this worker's events partitions now (None: not known yet); ``changed()``: to call on every
    assignment change (publishes at once). A component (streams/component.py) whose ``start()``/``stop()`` run
    as a service of the app: its own ``AIOKafkaProducer`` (so it can still say "no partitions" on stop) and a
    group-less reader.
    """

    def __init__(self, settings, *, registry: WorkersRegistry, url: str, owned: Callable[[], set[int] | None]) -> None:
        kafka = settings.kafka
        self.settings, self.registry, self.url, self._owned = settings, registry, url, owned
        self.topic = kafka.topic(kafka.workers_topic)
        self.interval = max(0.1, settings.worker.registry_interval)
        self._changed = asyncio.Event()
        self._producer = None
        self._published: list[int] | None = None
        self._jobs: list = []

    def attach(self, app) -> None:
        from .component import as_service

        as_service(app, self, "WorkersRegistryService")

    def changed(self) -> None:
        self._changed.set()

    async def publish(self, partitions) -> None:
        registry, url = self.registry, self.url
        value = registry_record(url=url, topic=registry.topic, group=registry.group, partitions=partitions,
                                ts=time.time(), key=registry.key)
        await self._producer.send_and_wait(self.topic, key=url.encode(), value=value)
        registry.apply(value, time.time())  # our own word counts at once (the reader sees it too)
        if self._published != sorted(partitions):
            self._published = sorted(partitions)
            log.info("workers registry: %s owns events partitions %s", url, self._published)

    async def advertise(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._changed.wait(), timeout=self.interval)
            except asyncio.TimeoutError:
                pass
            self._changed.clear()
            mine = self._owned()
            if mine is None:
                continue
            try:
                await self.publish(mine)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # e.g. the broker is away: the next round tries again
                log.warning("publishing to the workers registry failed (will retry): %r", exc)
                self._changed.set()
                await asyncio.sleep(1.0)

    async def read(self) -> None:
        from .topic_reader import read_topic_forever

        registry = self.registry

        def since_ms() -> int:
            # Older entries are ignored anyway: start a little before the oldest that still counts.
            return int((time.time() - registry.max_age - self.interval) * 1000)

        await read_topic_forever(self.settings, self.topic,
                                 lambda record: registry.apply(record.value, time.time(), key=record.key),
                                 what="workers registry reader", start_ms=since_ms)

    def _ensure_topic(self) -> None:
        from stepwatch.security import client_config
        from stepwatch.topics import ensure_workers_topic

        ensure_workers_topic(self.settings.kafka, client_config=client_config(self.settings))

    async def start(self) -> None:
        from aiokafka import AIOKafkaProducer

        from stepwatch.security import client_config

        try:
            await asyncio.get_running_loop().run_in_executor(None, self._ensure_topic)
        except Exception as exc:  # the reader and publisher retry; the topic may appear later
            log.warning("could not create the workers topic %s: %r", self.topic, exc)
        producer = AIOKafkaProducer(bootstrap_servers=self.settings.kafka.bootstrap.split(","), linger_ms=0,
                                    **client_config(self.settings))
        await producer.start()
        self._producer = producer
        self._jobs = [asyncio.ensure_future(self.read()), asyncio.ensure_future(self.advertise())]

    async def stop(self) -> None:
        for task in self._jobs:
            task.cancel()
        for task in self._jobs:
            await cancel(task)  # streams/supervise.py: an error it ended with is logged
        producer = self._producer
        if producer is None:
            return
        try:  # a clean stop: nothing is ours any more
            await asyncio.wait_for(self.publish(()), timeout=5.0)
        except Exception as exc:
            log.warning("could not withdraw from the workers registry: %r", exc)
        finally:
            await producer.stop()
