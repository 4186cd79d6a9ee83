"""Heartbeats of the rank monitor: the last completed step and the collective sequence
numbers, sent every ``heartbeat_interval`` seconds by a daemon thread, also while the
training thread is blocked (in a hung collective, say): that is what names a hang's culprit.

:class:`Heartbeats` is a part of :class:`~stepwatch.producers.monitor.RankMonitor` (its state
is set up in ``RankMonitor.__init__``: ``_heartbeat``, ``_stop``, ``pg_ranks`` and what the
step timer and collective recorder keep).
"""

from __future__ import annotations

import threading
import time

from .collectives import DEFAULT_PG

__all__ = ["Heartbeats"]

_wall = time.time


class Heartbeats:
    """Heartbeat events and thread of :class:`~stepwatch.producers.monitor.RankMonitor` (a mixin)."""

    def heartbeat_event(self) -> dict:
        """The heartbeat this rank would send now."""
        event = {"v": 1, "kind": "heartbeat", **self._rank_base, "ts": _wall(),
                 "step": self.last_step if self.last_step is not None else 0, "phase": self._phase}
        pg = self.default_pg
        if pg in self.seq_started:
            event["seq_started"] = self.seq_started[pg]
            event["seq_completed"] = self.seq_completed.get(pg, 0)
        if self.seq_started:
            # Every process group (docs/events.md); ``ranks`` for all but the default group.
            pgs = {}
            for name, started in list(self.seq_started.items()):
                entry = {"started": started, "completed": self.seq_completed.get(name, 0)}
                ranks = self.pg_ranks.get(name)
                if ranks is not None and name != DEFAULT_PG:
                    entry["ranks"] = ranks
                pgs[name] = entry
            event["pgs"] = pgs
        event["in_step"] = self._step_t0 is not None
        return event

    def heartbeat(self) -> None:
        """Queue one heartbeat now (the heartbeat thread does this every ``heartbeat_interval``)."""
        if not self.enabled:
            return
        try:
            if self._pollers:
                self._poll()
            self._enqueue(self.heartbeat_event())
        except Exception as exc:
            self._error("heartbeat", exc)

    def _heartbeat_loop(self) -> None:
        interval = self.config.heartbeat_interval
        self.heartbeat()
        while not self._stop.wait(interval):
            self.heartbeat()

    def _start_heartbeat(self) -> None:
        cfg = self.config
        if cfg.heartbeat_interval and cfg.heartbeat_interval > 0:
            self._heartbeat = threading.Thread(target=self._heartbeat_loop, name=f"stepwatch-heartbeat-r{cfg.rank}",
                                               daemon=True)
            self._heartbeat.start()
