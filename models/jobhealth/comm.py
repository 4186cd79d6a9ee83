"""Communication slowdown: collective latency against the job's own healthy baseline.

A rank's collective duration includes waiting for the slowest peer, so a straggler would
inflate everyone's durations. The network's own share is what the **last rank to arrive**
sees: for each collective (process group, op, sequence number) the minimum duration over
ranks is its transfer time. Per (process group, op, message-size bucket) the detector keeps
a bounded baseline of those transfer times and fires ``comm_slowdown`` when the median of
the last ``window`` collectives stays ``threshold`` (default 30%) above the baseline median
for ``persistence`` consecutive collectives. It names ranks (and their nodes) only when their
own durations grew more than the other ranks' by the straggler rule's robust test (among the
ranks whose recent durations are of the recent collectives): a network slowdown slows every
rank alike, and the node behind it comes from the job's telemetry (models/telemetry/fabric.py).

**When a collective is judged** (whatever order its events arrive in: live, or a recording
sorted by event time with node clocks seconds apart): once every rank of it is in (as many as
the most this key's collectives ever had), else once it is ``max_lag`` sequence numbers behind the
newest, once a rank of it is ``time_bound`` seconds past it (on that rank's own clock), or the oldest of
``max_pending`` open ones. Judging on the first ranks in would take the minimum over ranks that
all waited for a straggler still to come, and sell its wait as transfer time.

**A stalled producer is not a lost rank.** An incomplete collective missing a rank that has been silent (no
collective of this key) since before the collective began, for less than ``gone_after`` seconds, is missing a rank
whose producer stalled (blocked on the broker, a GC pause): its events are still to come, and when it was the
collective's last to arrive, the others' shortest duration is their wait for it (gen2:moe-rotating, whose slowest
rank rotates, paged with 1% of its messages 30 s late). So it waits (``_holds``), and the open collectives behind
it with it, until that rank's events come, and is judged with them: the others' growth cannot tell a wait for a new
straggler from a slower transfer (gen2:straggler-gpu-throttled, rank 9 slow from step 50 and its producer stalled
30 s, paged a comm_slowdown before its straggler). Past ``HOLD_EVENTS`` held (a large job) its sample is bounded by
what the ranks in say: a slower transfer lengthens every rank's own duration by as much, so it counts as no more
above the baseline than the median rank's duration grew over its own baseline (a stalled slowest rank: theirs did
not grow; a slower link: they all did). A rank silent ``gone_after`` (60 s: a Kafka producer's ``max.block.ms``,
the longest it blocks before failing a send) is gone, and one that reported since (an event lost, a clock ahead in
a recording sorted by time) is neither: the collective is judged on the ranks in, as before.

**Threshold changes** (``reconfigure``): an alert open when ``threshold`` is raised past its key's
recent increase resolves at its next collective with ``evidence.resolution = threshold_changed``, saying
the latency is still up by that much; otherwise resolutions are ``recovered``.

**One incident per job** (``MAX_INCIDENT_UPDATES``): keys that slow down while one of the job's comm alerts is
open join it instead of paging again (a slower fabric slows every process group of the job: the data-parallel
all-reduce, each pipeline replica's sends and receives, ...). The first key's alert is the incident; once 2, 4, 8,
... keys have joined, a new version of it (same id) is published with ``evidence.slowed`` listing every key slowed
during it (at most ``MAX_INCIDENT_UPDATES`` versions; the resolution lists them all); it resolves when the last of
its keys does. A job with one slowed key gets the same alert as before.

**Point-to-point ops** (``send``, ``recv``, ``isend``, ``irecv``, ``*-send``/``*-recv``): their numbers do
not match across ranks (pipeline stages do different numbers of them), and a receive waits for
its sender's compute. The transfer sample is the shortest of the key's last ``p2p_window``
durations (any rank): some transfer often finds both sides ready (the slow stage's own receives
from its faster upstream), so waits behind a slow stage do not move it, a slower transfer does.

**Pipeline waits are not the network** (issue 39 item 6). The shortest duration does not always hold: a 1F1B
schedule that posts its receives ahead (communication overlapped with compute), or a recorder that names each
stage pair's communicator, has keys whose every receive waits behind a slow upstream stage. So a point-to-point
key's samples feed its baseline, and count towards a slowdown, only while no straggler of the job explains them
(``explained()``, the job's straggler rule: a rank of a stage slower than its peers makes every stage after
it wait); a point-to-point key that stays slow fires only ``P2P_HOLD_STEPS`` of the job's steps after it
crossed (``job_step()``), the straggler rule's chance to find the slow stage first; a straggler firing
meanwhile takes the wait for its own (no ``comm_slowdown``); one firing while a point-to-point alert is open
resolves it (``evidence.resolution: "explained"``, the straggler named). A point-to-point key is not judged while
a rank's producer is stalled (``_p2p_stalled``: none of its events in the window): the stage whose receives find
their data ready may be the stalled one, and the window then holds only waits (library:healthy-pipeline-p2p-32).
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..alerts import Alert, alert_id
from ..wire.events import CollectiveEvent
from ..resolution import Resolution


def size_bucket(nbytes: int | None) -> str:
    """Message sizes in powers-of-4 buckets: latency is only comparable within a bucket."""
    if not nbytes:
        return "any"
    exp = int(math.log(nbytes, 4))
    return f"{4 ** exp}B+"


#: Point-to-point op names (and any op ending in ``send``/``recv``, e.g. Megatron's ``forward-recv``).
P2P_OPS = frozenset({"send", "recv", "isend", "irecv", "batch_isend_irecv", "p2p"})


def is_p2p(op: str) -> bool:
    op = op.lower()
    return op in P2P_OPS or op.endswith(("send", "recv"))


#: Versions of a job's comm incident published as more keys join it (the rest wait for its resolution).
MAX_INCIDENT_UPDATES = 8
#: Keys named in a grouped incident's summary (``evidence.slowed`` lists them all).
SUMMARY_KEYS = 4

#: Steps of the job a slowed point-to-point key waits, still slowed, before it fires: the straggler rule's window
#: (5) and a step, so that a slow stage is found first and takes the waits behind it for its own.
P2P_HOLD_STEPS = 6

#: Ranks whose own growth bounds a collective missing a stalled producer's rank (``_wait_free``): their median.
GROWTH_RANKS = 32

#: Events a key's open collectives may hold while the oldest waits for a stalled producer's rank (``_holds``): a
#: 30 s stall is 75 collectives of 0.4 s, 2,000 of 15 ms; past it (a large job: 1,024 ranks hold 32), the oldest
#: is judged on the ranks in, bounded by their own growth (``_wait_free``).
HOLD_EVENTS = 1 << 15

#: Distinct (process group, op, size bucket) keys judged per job; a collective of one more is left out
#: and counted (``capped``): op names come from the ranks, and each key holds a baseline.
MAX_OP_KEYS = 1024


@dataclass(frozen=True, slots=True)
class CommEvidence:
    """A comm_slowdown's ``evidence`` as the rule writes it (docs/job-health.md); durations in seconds."""

    process_group: str
    op: str
    size_bucket: str  # the message size class compared within
    baseline_transfer_seconds: float  # median transfer time of the baseline
    recent_transfer_seconds: float  # median of the recent window
    increase: float  # recent / baseline - 1
    threshold: float  # the setting it fired with (a resolution compares it with the current one)
    detected_seq: int  # the collective it fired at
    rank_growth: tuple[tuple[str, float], ...]  # (rank, its own duration growth), most grown first
    median_rank_growth: float | None  # the ranks' median growth (None: no rank had a baseline)

    def to_dict(self) -> dict[str, Any]:
        return {"process_group": self.process_group, "op": self.op, "size_bucket": self.size_bucket,
                "baseline_transfer_seconds": self.baseline_transfer_seconds,
                "recent_transfer_seconds": self.recent_transfer_seconds, "increase": self.increase,
                "threshold": self.threshold, "detected_seq": self.detected_seq, "rank_growth": dict(self.rank_growth),
                "median_rank_growth": self.median_rank_growth}

    @classmethod
    def from_dict(cls, ev: dict[str, Any]) -> "CommEvidence":
        """The record of a comm_slowdown's evidence (keys added later, e.g. the resolution, are ignored)."""
        return cls(process_group=ev["process_group"], op=ev["op"], size_bucket=ev["size_bucket"],
                   baseline_transfer_seconds=ev["baseline_transfer_seconds"],
                   recent_transfer_seconds=ev["recent_transfer_seconds"], increase=ev["increase"],
                   threshold=ev["threshold"], detected_seq=ev["detected_seq"],
                   rank_growth=tuple(ev["rank_growth"].items()), median_rank_growth=ev["median_rank_growth"])


class _Key:
    __slots__ = ("pending", "transfer", "baseline", "rank_baseline", "rank_recent", "over", "firing", "fired",
                 "last_seq", "expected", "judged", "judged_set", "first_ts", "newest_ts", "p2p", "held_from",
                 "judged_ts", "members", "last_ts", "holding", "p2p_count", "p2p_last", "assessed", "rank_recent_at")

    def __init__(self, baseline_size: int, window: int) -> None:
        self.pending: dict[int, dict[int, tuple[float, float, str | None]]] = {}  # seq -> rank -> (dur, ts, node)
        self.expected = 0  # ranks of a complete collective: the most any had
        self.judged: deque[int] = deque(maxlen=512)  # recently judged seqs (a late copy is dropped)
        self.judged_set: set[int] = set()
        self.first_ts: dict[int, float] = {}  # seq -> earliest event time of it
        self.newest_ts = -math.inf
        self.p2p: deque[float] | None = None  # point-to-point: the last durations of any rank
        self.held_from: int | None = None  # point-to-point: the job's step it crossed at, while held
        self.judged_ts = -math.inf  # the latest event time judged (``_assess``: what an alert is stamped with)
        self.members: set[int] = set()  # ranks seen in its collectives (bounded by the job's ranks)
        self.last_ts: dict[int, float] = {}  # rank -> its newest event time in this key (a stall's silence)
        self.holding: tuple[int, tuple[int, ...]] | None = None  # the held oldest collective, its stalled ranks
        self.p2p_count = 0  # point-to-point: events of the key so far
        self.p2p_last: dict[int, tuple[int, float]] = {}  # point-to-point: rank -> (count, ts) at its last, stalest first
        self.transfer: deque[float] = deque(maxlen=window)
        self.baseline: deque[float] = deque(maxlen=baseline_size)
        self.rank_baseline: dict[int, deque[float]] = {}
        self.rank_recent: dict[int, deque[float]] = {}
        self.assessed = 0  # samples judged so far (a collective's index in the key)
        self.rank_recent_at: dict[int, deque[int]] = {}  # rank -> the indices of its recent durations
        self.over = 0
        self.firing: Alert | None = None
        self.fired: CommEvidence | None = None  # what ``firing`` was fired with
        self.last_seq = -1


class CommSlowdownDetector:
    """Per job: feed collective events; returns comm_slowdown alerts.

    Example: an all-reduce of 1 MiB on four ranks takes 10 ms, then 20 ms on every rank alike.

    >>> from stepwatch.models.wire.events import CollectiveEvent
    >>> detector = CommSlowdownDetector(job="j")
    >>> alerts = [alert for seq in range(200) for rank in range(4)
    ...           for alert in detector.update(CollectiveEvent(job="j", rank=rank, seq=seq, op="allreduce",
    ...                                                        ts=1000.0 + seq, bytes=1 << 20,
    ...                                                        duration=0.01 if seq < 100 else 0.02))]
    >>> [(str(a.type), str(a.status)) for a in alerts]
    [('comm_slowdown', 'firing')]
    """

    def __init__(self, *, job: str, threshold: float = 0.30, window: int = 20, persistence: int = 10,
                 baseline_size: int = 200, min_baseline: int = 30, max_pending: int = 64, clear_after: int = 20,
                 top_ranks: int = 3, max_lag: int = 32, time_bound: float = 30.0, p2p_window: int = 32,
                 gone_after: float = 60.0) -> None:
        self.gone_after = gone_after
        self.max_lag = max_lag
        self.time_bound = time_bound
        self.p2p_window = p2p_window
        self.job = job
        self.threshold = threshold
        self.window = window
        self.persistence = persistence
        self.baseline_size = baseline_size
        self.min_baseline = min_baseline
        self.max_pending = max_pending
        self.clear_after = clear_after
        self.top_ranks = top_ranks
        self._keys: dict[tuple[str, str, str], _Key] = {}
        self.capped: Counter[str] = Counter()
        self._clean: dict[tuple[str, str, str], int] = {}
        # The job's one comm incident: its latest version, the keys firing in it (their own alerts, not
        # published past the first), every key that joined it (for ``evidence.slowed``), versions published.
        self._incident: Alert | None = None
        self._members: dict[tuple[str, str, str], Alert] = {}
        self._joined: dict[tuple[str, str, str], Alert] = {}
        self._versions = 0
        #: Set by the job's rules: the straggler that explains point-to-point waits (its alert; None: none firing),
        #: and the job's latest step (the hold's clock). Unset: point-to-point keys are judged as any other.
        self.explained: Callable[[], Alert | None] | None = None
        self.job_step: Callable[[], int] | None = None
        #: Point-to-point samples left out because a straggler explained them (and alerts it resolved).
        self.explained_samples = 0
        #: Incomplete collectives missing a stalled producer's rank (``_stalled_missing``): bounded, or left out.
        self.stalled_samples = 0

    #: Settings ``reconfigure`` may change at run time.
    TUNABLE = ("threshold", "window", "persistence")

    def reconfigure(self, **values) -> None:
        """Change settings in place (unknown names ignored); open alerts are judged on the new ones."""
        for name, value in values.items():
            if name in self.TUNABLE:
                setattr(self, name, float(value) if name == "threshold" else int(value))
        for state in self._keys.values():
            if state.transfer.maxlen != self.window:
                state.transfer = deque(state.transfer, maxlen=self.window)

    def update(self, event: CollectiveEvent) -> list[Alert]:
        key = (event.pg or "default", event.op, size_bucket(event.bytes))
        state = self._keys.get(key)
        if state is None:
            if len(self._keys) >= MAX_OP_KEYS:
                self.capped["op_names_per_job"] += 1
                return []
            state = self._keys[key] = _Key(self.baseline_size, self.window)
        if is_p2p(event.op):
            return self._p2p(key, state, event)
        # (a late copy too: its rank is alive)
        state.last_ts[event.rank] = max(state.last_ts.get(event.rank, event.ts), event.ts)
        if event.seq in state.judged_set or (event.seq <= state.last_seq - self.max_lag
                                              and event.seq not in state.pending):
            return []  # a late copy of a collective already judged (a held one takes its stalled rank's)
        by_rank = state.pending.setdefault(event.seq, {})
        by_rank[event.rank] = (event.duration, event.ts, event.node)
        state.first_ts[event.seq] = min(state.first_ts.get(event.seq, event.ts), event.ts)
        state.newest_ts = max(state.newest_ts, event.ts)
        out: list[Alert] = []
        if state.expected >= 2 and len(by_rank) >= state.expected:  # every rank is in
            out.extend(self._close(key, state, event.seq))
        newest = max(state.pending, default=event.seq)
        while state.pending:
            # Incomplete (a rank's event lost or late): judged on the ranks in once far enough behind, oldest first,
            # unless it waits for a stalled producer's rank (``_holds``): the ones behind it wait with it.
            seq = min(state.pending)
            if (seq > newest - self.max_lag and not self._moved_on(state, seq, event)
                    and len(state.pending) <= self.max_pending):
                break
            if len(state.pending) <= max(self.max_pending, HOLD_EVENTS // max(state.expected, 1)) \
                    and self._holds(state, seq):
                break
            out.extend(self._close(key, state, seq))
        return out

    def _moved_on(self, state: _Key, seq: int, event: CollectiveEvent) -> bool:
        """Whether ``event``'s rank, one of collective ``seq``'s, is ``time_bound`` seconds past it: both times on
        its own host's clock. The newest event of any host against the collective's earliest compared two clocks,
        tens of seconds apart where NTP is broken: the first collectives were judged on their first ranks in,
        ``expected`` learned that many, and the straggler's wait became the transfer (gen2:straggler-64 / clocks
        +-30s; tests/models/jobhealth/test_comm_clock_offsets.py)."""
        mine = state.pending[seq].get(event.rank)
        return mine is not None and event.ts - mine[1] >= self.time_bound

    def _holds(self, state: _Key, seq: int) -> bool:
        """Whether the oldest open collective ``seq`` waits for a rank whose producer stalled: silent since before
        the collective began, for less than ``gone_after``. Its events come late, in order: once one newer than
        the collective's start is in (its own event for it, or a later one: that one was lost), or the rank is
        gone, the collective is judged. (Its stalled ranks are found once, then only they are asked again.)"""
        ranks, began = state.pending[seq], state.first_ts[seq]
        since = state.newest_ts - self.gone_after
        if state.holding is None or state.holding[0] != seq:
            stalled = tuple(r for r, t in state.last_ts.items() if r not in ranks and since < t < began)
            state.holding = (seq, stalled) if stalled else None
            return bool(stalled)
        if any(r not in ranks and since < state.last_ts[r] < began for r in state.holding[1]):
            return True
        state.holding = None
        return False

    def _close(self, key, state: _Key, seq: int) -> list[Alert]:
        ranks = state.pending.pop(seq)
        if state.holding is not None and state.holding[0] == seq:
            state.holding = None
        began = state.first_ts.pop(seq, math.inf)
        if len(state.judged) == state.judged.maxlen:
            state.judged_set.discard(state.judged[0])
        state.judged.append(seq)
        state.judged_set.add(seq)
        state.expected = max(state.expected, len(ranks))
        return self._judge(key, state, seq, ranks, began)

    def _p2p(self, key, state: _Key, event: CollectiveEvent) -> list[Alert]:
        if state.p2p is None:
            state.p2p = deque(maxlen=self.p2p_window)
        state.p2p.append(event.duration)
        state.p2p_count += 1
        state.newest_ts = max(state.newest_ts, event.ts)
        prev = state.p2p_last.pop(event.rank, None)  # (re-inserted last: the dict's first rank is the stalest)
        state.p2p_last[event.rank] = (state.p2p_count, event.ts if prev is None else max(event.ts, prev[1]))
        if len(state.p2p) < state.p2p.maxlen:
            return []
        state.last_seq = max(state.last_seq, event.seq)
        straggler = self.explained() if self.explained is not None else None
        if straggler is not None:  # a slow stage's waits: neither the baseline nor a slowdown
            self.explained_samples += 1
            state.over, state.held_from = 0, None
            state.transfer.clear()
            if state.firing is None:
                return []
            alert, state.firing, state.fired = state.firing, None, None
            where = f"rank {straggler.ranks[0]}" if straggler.ranks else "a straggler"
            return self._leave(key, alert, alert.resolved(
                at=event.ts, summary=f"resolved: the waits are {where}'s, a slow pipeline stage "
                                     f"(straggler {straggler.id}), not the network ({alert.summary})",
                evidence={**alert.evidence, "resolution": Resolution.EXPLAINED, "explained_by": straggler.id}))
        if self._p2p_stalled(state):
            # A rank's producer stalled: the window lacks its samples, often the short ones (a slower stage's
            # receives find their data ready), and the others' may all be waits: judged once its events are in.
            self.stalled_samples += 1
            return []
        # The transfer: the shortest of the recent ones (both sides were ready); the ranks: this one.
        return self._assess(key, state, event.seq, min(state.p2p), event.ts,
                            {event.rank: (event.duration, event.ts, event.node)})

    def _judge(self, key, state: _Key, seq: int, ranks: dict[int, tuple[float, float, str | None]],
               began: float = math.inf) -> list[Alert]:
        state.last_seq = max(state.last_seq, seq)
        state.members.update(ranks)
        if len(ranks) < 2:
            return []
        if len(ranks) < len(state.members) and self._straggler_missing(state, ranks):
            # Judged without a firing straggler's rank (its events late or lost): the ranks in all waited for it,
            # their shortest is its wait, not the transfer (a straggler's stalled producer is no network page).
            self.explained_samples += 1
            return []
        transfer = min(d for d, _, _ in ranks.values())
        if len(ranks) < len(state.members) and self._stalled_missing(state, ranks, began):
            # Its missing rank's events are late, not lost, and it may be the last to arrive: the ranks in may all
            # have waited for it. A slower transfer slows every rank's own duration by as much, so the sample is
            # no slower than the baseline by more than theirs grew (a stalled slowest rank: they did not grow).
            # (While the baseline fills, the sample as it is: at worst a baseline a little high, never a page.)
            self.stalled_samples += 1
            bound = self._wait_free(state, ranks)
            if bound is not None:
                transfer = min(transfer, bound)
        ts = max(t for _, t, _ in ranks.values())
        return self._assess(key, state, seq, transfer, ts, ranks)

    def _assess(self, key, state: _Key, seq: int, transfer: float, ts: float,
                ranks: dict[int, tuple[float, float, str | None]]) -> list[Alert]:
        # An incomplete collective is judged late (once far behind): its verdict is the window's, as of the newest
        # collective in it, so that is its time (stamped with its own, a slowdown began before the link did).
        state.judged_ts = ts = max(ts, state.judged_ts)
        state.transfer.append(transfer)
        state.assessed += 1
        healthy = state.firing is None and state.over == 0
        at = state.assessed
        for rank, (duration, _, _) in ranks.items():
            recent = state.rank_recent.get(rank)
            if recent is None:  # (not setdefault: that builds two deques a rank per collective)
                recent = state.rank_recent[rank] = deque(maxlen=self.window)
                state.rank_recent_at[rank] = deque(maxlen=self.window)
            recent.append(duration)
            state.rank_recent_at[rank].append(at)
            if healthy:
                state.rank_baseline.setdefault(rank, deque(maxlen=self.baseline_size)).append(duration)
        if len(state.baseline) < self.min_baseline:
            state.baseline.append(transfer)
            return []
        base = float(np.median(state.baseline))
        recent = float(np.median(state.transfer))
        rel = recent / base - 1.0 if base > 0 else 0.0
        if rel >= self.threshold:
            state.over += 1
        else:
            state.over, state.held_from = 0, None
            if state.firing is None:
                state.baseline.append(transfer)
        if state.firing is None and state.over >= self.persistence and not self._held(state):
            state.firing, state.fired = self._fire(key, state, seq, ts, base, recent, rel, ranks)
            self._clean[key] = 0
            return self._join(key, state.firing)
        if state.firing is not None:
            fired_at = state.fired.threshold if state.fired is not None else self.threshold
            if self.threshold > fired_at and rel < self.threshold:
                # Raised past the increase while it fires: the latency did not recover, the threshold moved.
                alert, state.firing, state.fired = state.firing, None, None
                state.over = 0
                detail = f"comm.threshold {fired_at:g} -> {self.threshold:g}"
                return self._leave(key, alert, alert.resolved(
                    at=ts, summary=f"resolved: threshold changed ({detail}); {key[1]} latency is still {rel:.0%} "
                                   f"above its baseline, below the new threshold ({alert.summary})",
                    evidence={**alert.evidence, "resolution": Resolution.THRESHOLD_CHANGED,
                              "resolution_detail": detail, "recent_increase": round(rel, 4)}))
            self._clean[key] = self._clean.get(key, 0) + 1 if rel < self.threshold / 2 else 0
            if self._clean[key] >= self.clear_after:
                alert, state.firing, state.fired = state.firing, None, None
                return self._leave(key, alert, alert.resolved(
                    at=ts, summary=f"resolved: {key[1]} latency back to baseline ({alert.summary})",
                    evidence={**alert.evidence, "resolution": Resolution.RECOVERED}))
        return []

    def _straggler_missing(self, state: _Key, ranks: dict) -> bool:
        """Whether a firing straggler of the job (``explained``) is a rank of this key absent from ``ranks``."""
        straggler = self.explained() if self.explained is not None else None
        return straggler is not None and any(r in state.members and r not in ranks for r in straggler.ranks)

    def _stalled_missing(self, state: _Key, ranks: dict, began: float) -> bool:
        """Whether a rank of this key absent from ``ranks`` has been silent since before the collective began
        (``began``: its earliest event time), for less than ``gone_after``: its producer stalled."""
        since = state.newest_ts - self.gone_after
        return any(since < t < began for r, t in state.last_ts.items() if r not in ranks)

    def _p2p_stalled(self, state: _Key) -> bool:
        """Whether a rank of a point-to-point key stalled: none of its events among the key's last ``p2p_window``
        (its samples left the window; a key of more ranks than half the window: none in two rounds of every
        rank's), for less than ``gone_after`` of event time (a rank silent that long is gone: dropped). Counted in
        events, not seconds: a pace or a host clock ahead moves no one's turn."""
        while state.p2p_last:
            rank, (count, ts) = next(iter(state.p2p_last.items()))
            if state.newest_ts - ts < self.gone_after:
                return state.p2p_count - count >= max(self.p2p_window, 2 * len(state.p2p_last))
            del state.p2p_last[rank]
        return False

    def _wait_free(self, state: _Key, ranks: dict) -> float | None:
        """The baseline transfer plus the median growth of the ranks' own durations over their own baselines
        (None: the baseline still filling, or no rank of ``ranks`` with one)."""
        if len(state.baseline) < self.min_baseline:
            return None
        growth = []
        for r, (d, _, _) in ranks.items():
            b = state.rank_baseline.get(r)
            if b is not None and len(b) >= 3:
                growth.append(d - float(np.median(b)))
                if len(growth) >= GROWTH_RANKS:
                    break  # enough for a median: a 16k-rank job's stall costs no 16k medians per collective
        if not growth:
            return None
        return float(np.median(state.baseline)) + float(np.median(growth))

    def _held(self, state: _Key) -> bool:
        """A point-to-point key that crossed waits ``P2P_HOLD_STEPS`` of the job's steps before it fires."""
        if state.p2p is None or self.job_step is None:
            return False
        step = self.job_step()
        if step < 0:  # a job that reports no steps (collectives only): nothing to wait for
            return False
        if state.held_from is None or step < state.held_from:
            state.held_from = step
        return step - state.held_from < P2P_HOLD_STEPS

    # -- the job's one incident ------------------------------------------------------------------------

    def _join(self, key, alert: Alert) -> list[Alert]:
        """A key fired: the job's incident if none is open, else a new version of the open one."""
        self._members[key] = self._joined[key] = alert
        if self._incident is None:
            self._incident, self._versions = alert, 0
            return [alert]
        self._incident = self._grouped()
        n = len(self._joined)
        if n & (n - 1) or self._versions >= MAX_INCIDENT_UPDATES:
            return []  # a version at 2, 4, 8, ... keys (not one per key); this one is kept for the next or its end
        self._versions += 1
        return [self._incident]

    def _grouped(self) -> Alert:
        """The incident's version naming every key that joined it (the first key's alert, extended)."""
        joined = list(self._joined.values())
        first = joined[0]
        slowed = [{"process_group": e["process_group"], "op": e["op"], "size_bucket": e["size_bucket"],
                   "increase": e["increase"], "detected_seq": e["detected_seq"]}
                  for e in (a.evidence for a in joined)]
        others = ", ".join(f"{s['op']} on {s['process_group']} (+{s['increase']:.0%})" for s in slowed[1:SUMMARY_KEYS + 1])
        if len(slowed) > SUMMARY_KEYS + 1:
            others += f" and {len(slowed) - SUMMARY_KEYS - 1} more"
        return replace(first, severity="critical" if any(a.severity == "critical" for a in joined) else "warning",
                       ranks=tuple(dict.fromkeys(r for a in joined for r in a.ranks)),
                       nodes=tuple(dict.fromkeys(n for a in joined for n in a.nodes)),
                       summary=f"{first.summary}; one incident: {len(slowed) - 1} more slowed with it: {others}",
                       evidence={**first.evidence, "slowed": slowed})

    def _leave(self, key, alert: Alert, resolved: Alert) -> list[Alert]:
        """A key recovered (``resolved``: its own alert's resolution): the incident resolves with its last key."""
        self._members.pop(key, None)
        if self._members or self._incident is None:
            return []  # others are still slow: the incident stays open
        incident, self._incident = self._incident, None
        self._joined.clear()
        if incident is alert:  # a one-key incident: its own resolution
            return [resolved]
        extra = {k: v for k, v in resolved.evidence.items() if k not in alert.evidence}
        return [incident.resolved(at=resolved.ends_at, summary=resolved.summary.replace(alert.summary, incident.summary),
                                  evidence={**incident.evidence, **extra})]

    def _fire(self, key, state: _Key, seq: int, ts: float, base: float, recent: float, rel: float,
              ranks: dict[int, tuple[float, float, str | None]]) -> tuple[Alert, CommEvidence]:
        growth = []
        # Compared only with ranks whose recent durations are of the recent collectives (the oldest within two
        # windows): a rank judged out of most of them (its events late past the judging, lost, or its host clock
        # far behind in a recording sorted by event time) holds older, pre-slowdown durations, and beside it the
        # ranks judged read as grown more (library:comm-slowdown-2.5x-64, hosts 30 s apart: node-004's ranks).
        since = state.assessed - 2 * self.window
        for rank, recent_durations in state.rank_recent.items():
            if state.p2p is None and state.rank_recent_at[rank][0] <= since:
                continue
            baseline = state.rank_baseline.get(rank)
            if baseline and len(baseline) >= 3:
                b = float(np.median(baseline))
                if b > 0:
                    growth.append((float(np.median(recent_durations)) / b - 1.0, rank))
        growth.sort(reverse=True)
        # A network slowdown slows every rank alike: the ranks that "grew most" are noise unless
        # their growth stands out from the others' by the straggler rule's robust test.
        top = [rank for g, rank in growth[: self.top_ranks] if _stands_out(g, [x for x, _ in growth])]
        nodes = tuple(dict.fromkeys(n for r in top if (n := ranks.get(r, (0, 0, None))[2])))
        pg, op, bucket = key
        summary = (f"communication slowdown: job {self.job} {op} on process group {pg} (messages {bucket}) "
                   f"takes {rel:.0%} longer than its baseline ({recent * 1e3:.2f} ms vs {base * 1e3:.2f} ms); "
                   + (f"slowed most: ranks {', '.join(map(str, top))}" if top else
                      "every rank slowed alike (a network or fabric cause)"))
        evidence = CommEvidence(
            process_group=pg, op=op, size_bucket=bucket, baseline_transfer_seconds=round(base, 6),
            recent_transfer_seconds=round(recent, 6), increase=round(rel, 4), threshold=self.threshold,
            detected_seq=seq, rank_growth=tuple((str(r), round(g, 4)) for g, r in growth[: self.top_ranks]),
            median_rank_growth=round(float(np.median([g for g, _ in growth])), 4) if growth else None)
        return Alert(
            id=alert_id(self.job, "comm_slowdown", pg, op, bucket, seq),
            status="firing", type="comm_slowdown",
            severity="critical" if rel >= 2 * self.threshold else "warning",
            job=self.job, ranks=tuple(top), nodes=nodes, starts_at=ts, summary=summary,
            evidence=evidence.to_dict()), evidence

    def open_alerts(self) -> list[Alert]:
        return [self._incident] if self._incident is not None else []

    def close(self, *, at: float, reason: str) -> list[Alert]:
        for state in self._keys.values():
            state.firing = state.fired = None
        incident, self._incident = self._incident, None
        self._members.clear()
        self._joined.clear()
        return [incident.resolved(at=at, summary=f"resolved ({reason}): {incident.summary}")] if incident else []


def _stands_out(growth: float, all_growth: list[float], *, ratio: float = 1.10, z: float = 3.5,
                spread_floor: float = 0.02) -> bool:
    """The straggler rule on ``1 + growth`` against every rank's: ``ratio`` and robust ``z`` both met."""
    if len(all_growth) < 4:
        return False
    values = np.asarray(all_growth) + 1.0
    med = float(np.median(values))
    if med <= 0:
        return False
    spread = max(float(np.median(np.abs(values - med))) / 0.6744897501960817, spread_floor * med)
    return (1.0 + growth) / med >= ratio and (1.0 + growth - med) / spread >= z
