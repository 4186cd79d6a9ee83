"""The rank monitor's parts (issue 25 item 6): StepTimer, CollectiveRecorder and Heartbeats are objects
with their own state, usable alone through the callables they are given; the monitor composes them.

No torch, no broker: the parts' events go to lists, the monitor's to a sink.
"""

from __future__ import annotations

import doctest
import importlib
import threading

import pytest

from stepwatch.producers.collectives import DEFAULT_PG, CollectiveRecorder, StepComm, _union_length
from stepwatch.producers.heartbeat import Heartbeats
from stepwatch.producers.monitor import RankMonitor
from stepwatch.producers.step_timer import StepTimer

PARTS = ("stepwatch.producers.step_timer", "stepwatch.producers.collectives", "stepwatch.producers.heartbeat")


@pytest.mark.parametrize("name", PARTS)
def test_each_parts_docstring_example_runs(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.attempted > 0, f"{name} has no example"
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"


def recorder(events: list, errors: list, step=lambda: None, **kw) -> CollectiveRecorder:
    return CollectiveRecorder(enabled=True, rank_base={"job": "j", "rank": 1}, emit=events.append,
                              on_error=lambda where, exc: errors.append((where, exc)), event_step=step, **kw)


def test_recorder_charges_only_calls_that_ended_in_the_step_and_numbers_only_move_forward():
    events, errors = [], []
    rec = recorder(events, errors)
    rec.completed(5, "tp")
    rec.completed(3, "tp")  # a late, older completion never moves the number back
    assert rec.seq_completed == {"tp": 5}
    rec.charge([(1, 0, DEFAULT_PG, 1.0, 2.0),  # ended before the step began at 3.0: left out
                (2, 0, DEFAULT_PG, 2.5, 3.5),  # overlaps the start: its part inside the step counts
                (0, 0, "tp", 3.0, 4.0),  # point-to-point (seq 0): timed, not the default group's number
                (3, 0, DEFAULT_PG, 3.6, 3.8)], since=3.0)
    comm = rec.take_step()
    assert (comm.count, comm.last_seq) == (3, 3)
    assert comm.total == pytest.approx(1.0 + 1.0 + 0.2)
    assert comm.max == pytest.approx(1.0)
    assert _union_length(comm.intervals, 3.0, 5.0) == pytest.approx(1.0)  # the union: [3.0, 4.0]
    assert rec.take_step().count == 0  # taken: the next step starts empty
    assert events == [] and errors == []  # no per-call events unless asked for


def test_recorder_counts_a_bad_mark_and_carries_on():
    events, errors = [], []
    rec = recorder(events, errors, collective_events=True)
    rec.collective_end(1, duration="not a number")
    assert [where for where, _ in errors] == ["collective_end"]
    rec.collective_end(rec.collective_begin("tp"), pg="tp", duration=0.5)
    assert rec.seq_completed["tp"] == 1 and events[-1]["pg"] == "tp" and "step" not in events[-1]


def test_timer_takes_the_comm_time_from_the_callable_it_was_given():
    events, errors, taken = [], [], []

    def take_comm() -> StepComm:
        comm = StepComm()
        comm.durations.append(0.0)  # a device-timed call of no length: counted, no time
        comm.count, comm.last_seq = 1, 12
        taken.append(comm)
        return comm

    timer = StepTimer(enabled=True, step_base={"v": 1, "kind": "step", "job": "j", "rank": 0},
                      phase_base={"job": "j", "rank": 0}, emit=events.append,
                      on_error=lambda where, exc: errors.append(where), take_comm=take_comm, pollers=[],
                      poll=lambda: None, start_step=10)
    timer.begin_step()
    assert timer.started is not None and timer.event_step() == 10
    timer.end_step(tokens=8)
    assert len(taken) == 1 and timer.started is None
    (step,) = events
    assert (step["step"], step["comm_calls"], step["comm_seq"], step["tokens"]) == (10, 1, 12, 8.0)
    assert timer.last_step == 10 and timer.event_step() == 10
    timer.begin_step()
    timer.abandon_step()  # the body raised: nothing reported, nothing taken
    timer.end_step()
    assert len(events) == 1 and len(taken) == 1
    timer.phase("nonsense")
    assert errors == ["phase"] and timer.phase_name == "train"


def test_heartbeats_poll_late_timings_first_and_the_thread_stops_with_the_event():
    events, polled = [], []
    stop = threading.Event()
    sent = threading.Event()

    def emit(event: dict) -> None:
        events.append(event)
        sent.set()

    beats = Heartbeats(enabled=True, rank_base={"job": "j", "rank": 0}, emit=emit, on_error=lambda *a: None,
                       step_fields=lambda: (len(polled), "train", False), comm_fields=dict,
                       pollers=[object()], poll=lambda: polled.append(1), interval=3600, stop=stop, name="t-beat")
    beats.start()
    assert sent.wait(30)  # the thread's first heartbeat, at once
    stop.set()
    beats.thread.join(30)
    assert not beats.thread.is_alive()
    assert len(events) == 1 and events[0]["step"] == 1  # polled before the heartbeat was built


def test_the_monitor_is_composed_of_its_parts_and_its_calls_are_theirs():
    sent = []
    with RankMonitor(job="j", rank=2, world_size=4, sink=sent.extend, heartbeat_interval=0, environ={}) as m:
        assert isinstance(m.timer, StepTimer) and isinstance(m.collectives, CollectiveRecorder)
        assert isinstance(m.heartbeats, Heartbeats)
        # bound to the parts: no delegating layer between the training thread and the part
        assert m.begin_step.__self__ is m.timer and m.collective_end.__self__ is m.collectives
        assert m.heartbeat.__self__ is m.heartbeats
        assert m.seq_started is m.collectives.seq_started and m.pg_ranks is m.collectives.pg_ranks
        with m.step():
            with m.collective("barrier"):
                pass
        m.heartbeat()
        assert m.last_step == m.timer.last_step == 0
    other = RankMonitor(job="j", rank=3, sink=sent.extend, heartbeat_interval=0, environ={}, enabled=False)
    assert other.seq_started == {} and other.timer is not m.timer  # each monitor's parts are its own
    beat = [e for e in sent if e["kind"] == "heartbeat"][-1]
    assert (beat["step"], beat["seq_started"], beat["seq_completed"], beat["in_step"]) == (0, 1, 1, False)
    step = [e for e in sent if e["kind"] == "step"][-1]
    assert step["comm_calls"] == 1 and step["comm_seq"] == 1
    assert m.errors == 0
