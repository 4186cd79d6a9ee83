"""Stacks on demand for one job's hangs: whom to ask, when, and what came back.

When a hang opens (or its culprits change), the hang rule (models/hang/detector.py) asks the culprits
and a few waiting ranks for their Python stacks: ``StackRequests.maybe_request`` queues a
``StackRequest`` (models/hang/stacks.py, the wire record) that the worker takes (``take``) and sends on
the control topic, at most one per job per ``stack_min_interval_seconds``. The ranks' ``stack`` events
come back on the events topic (``on_answer``); ``evidence`` is what the alert shows of them, and ``key``
changes when the alert should be re-published (same id): once every asked rank answered or
``stack_timeout_seconds`` passed, or a Flight Recorder dump joins a rank's stack. Kept apart from the
rule because it is a conversation with the job (requests out, answers in, a deadline), not a judgement.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace

from ..wire.events import StackEvent
from .diagnosis import HangDiagnosis
from .evidence import StackEvidence
from .stacks import StackRequest, frame_lines

#: Culprits asked for their stacks per request (waiting ranks come on top, ``stack_waiting_ranks``).
MAX_STACK_CULPRITS = 4


@dataclass(slots=True)
class StackRound:
    """The stack requests of one hang episode and the answers (mutable, internal)."""

    request: StackRequest  # the latest request; its ranks are every rank asked in the episode
    requests: int = 1
    answers: dict[int, StackEvent] = field(default_factory=dict)
    final: bool = False
    sent: bool = False  # the worker sent it (replay sends nothing: no answer expected, none missing)


class StackRequests:
    """Stack requests and answers of one job, across its hang episodes.

    ``round`` is the open episode's (None when no hang asked), ``pending`` the requests not yet taken by
    the worker; ``old_alert_ids`` (the last 16 episodes) tells a late answer to an earlier hang's request.
    """

    def __init__(self) -> None:
        self.round: StackRound | None = None
        self.pending: list[StackRequest] = []
        self.last_request_at: float | None = None
        self.old_alert_ids: deque[str] = deque(maxlen=16)

    def reset(self) -> None:
        """The job's state starts afresh (a restart): no round open, nothing to send."""
        self.round = None
        self.pending = []

    def end_episode(self, alert_id: str) -> None:
        """The hang ``alert_id`` ended: answers to its requests that still arrive are ignored."""
        self.reset()
        self.old_alert_ids.append(alert_id)

    def on_answer(self, event: StackEvent) -> None:
        st = self.round
        if st is None:
            return  # no hang open: nobody asked
        rid = event.request_id
        if rid is not None and any(rid.startswith(old + "/") for old in self.old_alert_ids):
            return  # an answer to a request of an earlier hang, arriving late
        first = st.answers.get(event.rank)
        if first is None:
            st.answers[event.rank] = event
        elif event.flight_recorder and not first.flight_recorder:
            # A rank answers twice: its Python stack at once, then its Flight Recorder dump (producers/stacks.py).
            # The stack stays the first answer's; the dump is added (and re-published: ``key``).
            st.answers[event.rank] = replace(first, flight_recorder=event.flight_recorder)

    def take(self) -> list[StackRequest]:
        """The stack requests made since the last call (the worker sends them on the control topic)."""
        out, self.pending = self.pending, []
        return out

    def mark_sent(self, request_id: str) -> None:
        """The worker sent this request: from now on, ranks that do not answer count as missing."""
        st = self.round
        if st is not None and st.request.request_id == request_id:
            st.sent = True

    def maybe_request(self, now: float, job: str, ident: str, d: HangDiagnosis, *, waiting_ranks: int,
                      min_interval: float) -> None:
        """Ask ``d``'s culprits not asked yet (and up to ``waiting_ranks`` waiting ranks) for their stacks,
        unless the job was asked less than ``min_interval`` seconds ago; ``ident``: the alert's id."""
        st = self.round
        asked = set(st.request.ranks) if st is not None else set()
        # A silent rank (dead, frozen, torn down) cannot answer: never asked (one asked before it fell silent is
        # listed missing).
        gone = set(d.silent) | set(d.torn_down)
        culprits = [r for r in d.culprits if r not in asked and r not in gone][:MAX_STACK_CULPRITS]
        if st is not None and not culprits:
            return  # everyone accused was asked already
        if self.last_request_at is not None and now - self.last_request_at < min_interval:
            return
        ranks = list(culprits or [r for r in d.culprits if r not in gone][:MAX_STACK_CULPRITS])
        for r in (d.group_waiting or d.waiting) + d.waiting + d.stuck:
            if len(ranks) >= len(culprits) + waiting_ranks:
                break
            if r not in ranks and r not in asked and r not in gone:
                ranks.append(r)
        if not ranks:
            return
        n = st.requests + 1 if st is not None else 1
        request = StackRequest(job=job, ranks=tuple(ranks), request_id=f"{ident}/{n}", ts=now)
        if st is None:
            self.round = StackRound(request=request)
        else:
            # A second request (new culprits): its ranks join the first's, answers so far are kept.
            st.request = StackRequest(job=job, ranks=st.request.ranks + request.ranks,
                                      request_id=request.request_id, ts=now)
            st.requests, st.final = n, False
        self.last_request_at = now
        self.pending.append(request)

    def key(self, now: float, timeout: float) -> tuple:
        """What the alert shows of the stacks (changes when it should be re-published); marks the round
        final once every asked rank answered or ``timeout`` seconds passed since the request."""
        st = self.round
        if st is None:
            return ()
        if not st.final and (st.sent or st.answers) and (all(r in st.answers for r in st.request.ranks)
                                                         or now - st.request.ts >= timeout):
            st.final = True
        dumps = sum(1 for a in st.answers.values() if a.flight_recorder)
        return (st.request.request_id, len(st.answers), st.final, dumps)

    def evidence(self, alert_ranks: tuple[int, ...], timeout: float) -> StackEvidence | None:
        """The stacks gathered so far, the alert's ranks' first (culprits lead ``alert_ranks``); None when
        nothing was asked."""
        st = self.round
        if st is None:
            return None
        order = list(dict.fromkeys(list(alert_ranks) + list(st.request.ranks)))
        answered = [r for r in order if r in st.answers] + [r for r in st.answers if r not in order]
        return StackEvidence(
            request_id=st.request.request_id, requested=st.request.ranks, requested_at=round(st.request.ts, 6),
            stacks={str(r): frame_lines(st.answers[r]) for r in answered},
            flight_recorder={str(r): st.answers[r].flight_recorder for r in answered if st.answers[r].flight_recorder},
            missing=tuple(r for r in st.request.ranks if r not in st.answers), final=st.final,
            due_at=round(st.request.ts + timeout, 6))

    @property
    def awaiting(self) -> bool:
        """Answers are expected: the request was sent or some rank answered (replay sends none)."""
        st = self.round
        return st is not None and (st.sent or bool(st.answers))
