"""Hugging Face ``transformers`` adapter: ``Trainer(..., callbacks=[StepwatchTrainerCallback()])``.

Each optimizer step is a step (numbered by ``state.global_step``). Evaluation is the
``eval`` phase and checkpoint saving the ``checkpoint`` phase: the Trainer decides in
``on_step_end`` (``control.should_evaluate`` / ``should_save``) and then evaluates and saves,
so the phase is announced *before* the pause, when a hang detector needs it. The end of
training sends ``end``. Configuration as for :class:`RankMonitor`; rank, world size and
local GPU come from ``TrainingArguments``. The DDP model the Trainer builds needs nothing
registered: the monitor's process-group hooks (producers/pg_tracker.py) see its gradient
all-reduces, so ``compute_time`` excludes waiting in them.

Imports ``transformers`` when this module is imported; ``import stepwatch`` never does.
"""

from __future__ import annotations

import logging
from typing import Any

from transformers import TrainerCallback

from .monitor import RankMonitor

log = logging.getLogger(__name__)

__all__ = ["StepwatchTrainerCallback"]


#: ``total_steps`` (the Trainer's ``max_steps``; the escalation ladder's horizon, docs/events.md) rides on the first
#: step event and every this many after: an envelope with it takes the worker's per-event decoder.
TOTAL_STEPS_EVERY = 500


class StepwatchTrainerCallback(TrainerCallback):
    """Reports steps and phases of this rank to stepwatch; never raises into training."""

    def __init__(self, monitor: RankMonitor | None = None, **monitor_kwargs: Any) -> None:
        self.monitor = monitor
        self._own_monitor = monitor is None
        self._monitor_kwargs = monitor_kwargs
        self._steps_sent = 0

    def _phase(self, name: str) -> None:
        try:
            if self.monitor is not None and self.monitor.current_phase != name:
                self.monitor.phase(name)
        except Exception as exc:
            self.monitor._error("hf phase", exc)

    def on_train_begin(self, args, state, control, **kwargs):
        if self.monitor is None:
            try:
                params = dict(rank=args.process_index, world_size=args.world_size, gpu=args.local_process_index)
                params.update(self._monitor_kwargs)
                self.monitor = RankMonitor(**params)
            except Exception as exc:
                log.warning("stepwatch: monitor not started: %r", exc)
                return
        try:
            self.monitor.phase("train")  # announce the start, even though "train" is the initial phase
        except Exception as exc:
            self.monitor._error("hf phase", exc)

    def on_step_begin(self, args, state, control, **kwargs):
        if self.monitor is not None:
            if self.monitor.current_phase != "train":
                self._phase("train")
            self.monitor.begin_step(state.global_step)

    def on_step_end(self, args, state, control, **kwargs):
        m = self.monitor
        if m is None:
            return
        samples = None
        try:
            samples = args.per_device_train_batch_size * args.gradient_accumulation_steps
        except Exception:  # silent: arguments without batch sizes: the step is sent without its sample count
            pass
        extra = {}
        total = getattr(state, "max_steps", 0)
        if (isinstance(total, int) and not isinstance(total, bool) and total > 0
                and (self._steps_sent == 0 or state.global_step % TOTAL_STEPS_EVERY == 0)):
            extra["total_steps"] = total  # now and then: envelopes without it keep the worker's fast decoder
        self._steps_sent += 1
        m.end_step(samples=samples, **extra)
        # DefaultFlowCallback (first in the list) has decided what the Trainer does next.
        if getattr(control, "should_evaluate", False):
            self._phase("eval")
        elif getattr(control, "should_save", False):
            self._phase("checkpoint")

    def on_prediction_step(self, args, state, control, **kwargs):
        if self.monitor is not None and self.monitor.current_phase != "eval":
            self._phase("eval")

    def on_evaluate(self, args, state, control, **kwargs):
        self._phase("checkpoint" if getattr(control, "should_save", False) else "train")

    def on_save(self, args, state, control, **kwargs):
        self._phase("train")

    def on_train_end(self, args, state, control, **kwargs):
        if self.monitor is None:
            return
        self.monitor.end()
        if self._own_monitor:
            self.monitor.close()
