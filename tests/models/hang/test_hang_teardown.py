"""The hang rule across a teardown, and a job step counter that one wild event cannot move
(models/hang/detector.py; issue 26 item 5, issue 27 item 8).

Recordings come from a small generator of this file (not the project's simulator): a job of
``ranks`` ranks on nodes of 8, stepping at 1 s with heartbeats every 2 s carrying the default
group's sequence numbers, on a settable clock; some heartbeats are lost and some arrive out of
order, as they do through Kafka.
"""

from __future__ import annotations

import random

from stepwatch.models.wire.events import HeartbeatEvent, StepEvent
from stepwatch.models.hang.detector import HangDetector

T0 = 1_750_000_000.0
JOB = "job-td"


def node(rank: int) -> str:
    return f"n{rank // 8:02d}"


class Recording:
    """A job driven by hand: steps, heartbeats (with losses and reordering) and checks once a second."""

    def __init__(self, ranks: int, *, seed: int = 5, **hang) -> None:
        self.ranks = ranks
        self.now = T0
        self.step = -1
        self.seq = 0  # collectives completed by every rank (2 per step)
        self.rng = random.Random(seed)
        self.det = HangDetector(job=JOB, **hang)
        self.alerts = []
        self.requests = []

    def feed(self, events) -> None:
        events = list(events)
        if self.rng.random() < 0.3:
            self.rng.shuffle(events)  # delivered out of order
        for event in events:
            self.alerts.extend(self.det.update(event))

    def check(self) -> None:
        self.alerts.extend(self.det.check(self.now))
        self.requests.extend(self.det.take_stack_requests())

    def heartbeat(self, rank: int, *, started: int | None = None, step: int | None = None) -> HeartbeatEvent:
        return HeartbeatEvent(job=JOB, rank=rank, ts=self.now + self.rng.uniform(-0.01, 0.01),
                              step=self.step if step is None else step, node=node(rank),
                              seq_started=self.seq if started is None else started, seq_completed=self.seq)

    def steps(self, n: int, *, extra=None) -> None:
        """``n`` healthy steps; ``extra(step)`` may return more events to send with a step."""
        for _ in range(n):
            self.now += 1.0
            self.step += 1
            self.seq += 2
            events = [StepEvent(job=JOB, rank=r, step=self.step, ts=self.now + self.rng.uniform(-0.02, 0.02),
                                step_time=1.0, node=node(r), world_size=self.ranks) for r in range(self.ranks)]
            if self.step % 2 == 0:
                events += [self.heartbeat(r) for r in range(self.ranks) if self.rng.random() > 0.02]  # a few lost
            if extra is not None:
                events += extra(self.step)
            self.feed(events)
            self.check()

    def hang(self, seconds: int, *, culprit: int, alive) -> None:
        """The job stuck in its next collective, which ``culprit`` never issued; ``alive(rank, t)``: the
        rank still sends heartbeats ``t`` seconds into the hang."""
        start = self.now
        for k in range(1, seconds + 1):
            self.now = start + k
            if k % 2 == 0:
                self.feed(self.heartbeat(r, started=self.seq if r == culprit else self.seq + 1)
                          for r in range(self.ranks) if alive(r, k) and self.rng.random() > 0.02)
            self.check()

    def hangs(self, status: str | None = None) -> list:
        return [a for a in self.alerts if a.type == "hang" and (status is None or a.status == status)]


def test_the_culprit_survives_a_watchdog_teardown_and_is_not_republished():
    # 64 ranks, rank 7 never issues collective N. 60 s into the hang the NCCL watchdog kills the 63
    # waiting ranks; rank 7 (its SIGTERM handler never runs) lives 30 s longer.
    job = Recording(64, stacks=True)
    job.steps(30)
    assert job.hangs() == []
    job.hang(400, culprit=7, alive=lambda r, t: t < 60 or (r == 7 and t < 90))
    versions = job.hangs("firing")
    assert versions, "no hang alert"
    assert len({a.id for a in versions}) == 1
    for alert in versions:
        assert alert.evidence["case"] == "culprit_before_collective", alert.summary
        assert [c["rank"] for c in alert.evidence["culprits"]] == [7], alert.summary
        assert alert.ranks[0] == 7
    assert all("silent:" not in a.summary for a in versions)
    # Named before the teardown, then one version for the teardown and one when rank 7 died too: no
    # new version per dead rank, none re-published every minute after.
    assert "torn_down" not in versions[0].evidence
    last = versions[-1]
    assert last.evidence["torn_down"]["count"] == 63 and last.evidence["torn_down"]["culprits_alive"] is False
    assert "job torn down: 63 rank(s)" in last.summary and "rank 7 on n00" in last.summary
    assert any(a.evidence.get("torn_down", {}).get("culprits_alive") is True for a in versions)
    assert len(versions) <= 5, [a.summary for a in versions]
    assert max(a.evidence["checked_at"] for a in versions) <= T0 + 30 + 90 + 30  # rank 7 dead + its timeout
    assert len(job.requests) == 1 and job.requests[0].ranks[0] == 7  # the culprit asked once, no dead rank after
    # It still resolves when the job restarts and steps again.
    job.steps(3)
    assert job.hangs("resolved")


def test_silence_without_a_named_culprit_still_names_the_silent_ranks():
    # The teardown rule keeps a culprit that was named; ranks dying with no culprit named are silent ranks.
    job = Recording(16)
    job.steps(20)
    job.hang(60, culprit=-1, alive=lambda r, t: r != 5)
    versions = job.hangs("firing")
    assert versions and versions[-1].evidence["case"] == "silent_ranks", [a.summary for a in versions]
    assert all([c["rank"] for c in a.evidence["culprits"]][:1] == [5] for a in versions)
    assert all("torn_down" not in a.evidence for a in versions)


def test_one_wild_step_number_makes_no_false_hang():
    # One event of rank 3 says step 10**9 (a corrupt or hostile producer); the job steps on.
    job = Recording(8)
    wild = lambda step: [StepEvent(job=JOB, rank=3, step=10**9, ts=job.now, step_time=1.0, node=node(3),
                                   world_size=8)] if step == 20 else []
    job.steps(120, extra=wild)
    assert job.hangs() == [], [a.summary for a in job.hangs()]
    assert job.det.step == 119  # the ranks' median, not the max
    # A real hang after it is still found, and resolves when the job steps again.
    job.hang(40, culprit=2, alive=lambda r, t: True)
    fired = job.hangs("firing")
    assert fired and [c["rank"] for c in fired[-1].evidence["culprits"]] == [2]
    job.steps(2)
    assert job.hangs("resolved")


def test_a_small_job_with_one_wild_rank_is_judged_by_its_median_too():
    job = Recording(2)
    wild = lambda step: [StepEvent(job=JOB, rank=1, step=10**9, ts=job.now, step_time=1.0, node=node(1),
                                   world_size=2)] if step == 10 else []
    job.steps(60, extra=wild)
    assert job.hangs() == [] and job.det.step == 59


def test_a_step_stamped_23_hours_ahead_does_not_hide_a_real_hang():
    job = Recording(8)
    ahead = lambda step: [StepEvent(job=JOB, rank=4, step=step, ts=job.now + 23 * 3600, step_time=1.0,
                                    node=node(4), world_size=8)] if step == 25 else []
    job.steps(30, extra=ahead)
    assert job.hangs() == []
    hung_at = job.now
    job.hang(60, culprit=6, alive=lambda r, t: True)
    fired = job.hangs("firing")
    assert fired, "the hang was hidden by the future timestamp"
    first = fired[0]
    assert first.evidence["case"] == "culprit_before_collective", first.summary
    assert [c["rank"] for c in first.evidence["culprits"]] == [6]
    assert first.evidence["checked_at"] - hung_at <= 35


def teardown_recording(*, grace: float = 30.0, seed: int = 9) -> list[dict]:
    """Wire-form events of 64 ranks on 8 nodes: 30 healthy steps, then rank 7 never issues collective
    N; 60 s in, the watchdog kills the 63 waiting ranks; rank 7 lives ``grace`` s longer. Heartbeats
    every 2 s (a few lost, some batches reversed); no ``end``: the launcher killed the job."""
    rng = random.Random(seed)
    out = []
    seq = 0
    t = T0
    for step in range(30):
        t += 1.0
        seq += 2
        for r in range(64):
            ts = t + rng.uniform(0, 0.01)
            out.append({"v": 1, "kind": "step", "job": JOB, "rank": r, "step": step, "ts": ts, "step_time": 1.0,
                        "node": node(r), "world_size": 64})
            if step % 2 == 0:
                out.append({"v": 1, "kind": "heartbeat", "job": JOB, "rank": r, "ts": ts + 0.01, "step": step,
                            "node": node(r), "seq_started": seq, "seq_completed": seq})
    for k in range(2, 400, 2):
        batch = [{"v": 1, "kind": "heartbeat", "job": JOB, "rank": r, "ts": t + k + rng.uniform(-0.01, 0.01),
                  "step": 29, "node": node(r), "seq_started": seq if r == 7 else seq + 1, "seq_completed": seq}
                 for r in range(64) if (k < 60 or (r == 7 and k < 60 + grace)) and rng.random() > 0.02]
        if k % 6 == 0:
            batch.reverse()
        out.extend(batch)
    # A healthy job beside it keeps the replay's clock moving after this job went quiet.
    for k in range(0, 460, 2):
        out.append({"v": 1, "kind": "step", "job": "beside", "rank": 0, "step": k // 2, "ts": T0 + k, "step_time": 2.0,
                    "node": "other-0"})
    out.sort(key=lambda e: e["ts"])
    return out


def test_through_the_engine_the_teardown_blames_only_the_culprits_node():
    from engine_driver import replay
    from stepwatch.config import Settings
    from stepwatch.models.detection import DetectionEngine
    from stepwatch.models.wire.events import parse_event

    engine = DetectionEngine(Settings())
    alerts = [a for a in replay((parse_event(e) for e in teardown_recording()), engine=engine)]
    hangs = [a for a in alerts if a.type == "hang" and a.job == JOB]
    assert hangs and {a.id for a in hangs} == {hangs[0].id}
    assert all([c["rank"] for c in a.evidence["culprits"]] == [7] for a in hangs), [a.summary for a in hangs]
    assert hangs[-1].evidence["torn_down"]["count"] == 63
    assert len(hangs) <= 6, [a.summary for a in hangs]
    assert all(a.evidence["failure_class"] == "hang_culprit" for a in hangs)
    # The node ledger holds the culprit's node only, not the 7 nodes of the ranks the watchdog killed.
    implicated = {n for n, incidents in engine.oncall.ledger.incidents.items()
                  if any(i.job == JOB for i in incidents.values())}
    assert implicated == {node(7)}


def test_a_culprit_that_dies_while_the_others_wait_is_silent_not_torn_down():
    # Rank 3 never issues the collective; it heartbeats on for a while (a warm-up, a slow death) and then dies
    # (OOM-killed) while every other rank still waits: a silent culprit with its last heartbeat (the OOM cause reads
    # that), never a torn-down rank. Whatever how long it lived on.
    for lived, seed in ((20, 1), (35, 2), (50, 3)):
        job = Recording(16, seed=seed)
        job.steps(20)
        job.hang(lived + 60, culprit=3, alive=lambda r, t: r != 3 or t < lived)
        last = job.hangs("firing")[-1]
        assert [c["rank"] for c in last.evidence["culprits"]] == [3], last.summary
        assert [s["rank"] for s in last.evidence["silent"]] == [3], last.summary
        assert "torn_down" not in last.evidence, last.summary
