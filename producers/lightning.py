"""PyTorch Lightning adapter: ``Trainer(callbacks=[StepwatchCallback()])``.

Each training batch is a step (numbered per batch, identically on every rank); the time
between batches (Lightning fetching the next batch) counts as data wait; validation is
the ``eval`` phase and a checkpoint save the ``checkpoint`` phase; the end of ``fit`` sends
``end``. Under a DDP strategy the stepwatch comm hook is registered, so ``compute_time``
excludes waiting in the gradient all-reduce. Configuration as for :class:`RankMonitor`
(arguments or environment); rank, world size and local GPU come from the trainer.

Imports ``lightning`` (or the older ``pytorch_lightning``) when this module is imported;
``import stepwatch`` never does.
"""

from __future__ import annotations

import logging
from typing import Any

try:
    import lightning.pytorch as pl
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]

from .monitor import RankMonitor

log = logging.getLogger(__name__)

__all__ = ["StepwatchCallback"]


def _batch_size(batch: Any) -> int | None:
    try:
        first = batch[0] if isinstance(batch, (list, tuple)) else (
            next(iter(batch.values())) if isinstance(batch, dict) else batch)
        return int(first.shape[0])
    except Exception:  # silent: a batch without a first tensor: its size is unknown (None), not an error
        return None


#: ``total_steps`` (the trainer's ``max_steps``; the escalation ladder's horizon, docs/events.md) rides on the first
#: step event and every this many after: an envelope with it takes the worker's per-event decoder.
TOTAL_STEPS_EVERY = 500


class StepwatchCallback(pl.Callback):
    """Reports steps, phases and collectives of this rank to stepwatch; never raises into training."""

    def __init__(self, monitor: RankMonitor | None = None, *, time_collectives: bool = True,
                 **monitor_kwargs: Any) -> None:
        super().__init__()
        self.monitor = monitor
        self._own_monitor = monitor is None
        self._monitor_kwargs = monitor_kwargs
        self._time_collectives = time_collectives
        self._timer = None
        self._steps_sent = 0

    def _safe(self, what: str, fn, *args, **kwargs) -> None:
        try:
            if self.monitor is not None:
                fn(*args, **kwargs)
        except Exception as exc:  # never into the training loop
            if self.monitor is not None:
                self.monitor._error(f"lightning {what}", exc)

    def setup(self, trainer, pl_module, stage: str) -> None:
        if self.monitor is None and stage == "fit":
            try:
                kwargs = dict(rank=trainer.global_rank, world_size=trainer.world_size, gpu=trainer.local_rank)
                kwargs.update(self._monitor_kwargs)
                self.monitor = RankMonitor(**kwargs)
            except Exception as exc:
                log.warning("stepwatch: monitor not started: %r", exc)

    def on_fit_start(self, trainer, pl_module) -> None:
        if self.monitor is None or not self._time_collectives:
            return
        try:
            from torch.nn.parallel import DistributedDataParallel

            model = getattr(trainer.strategy, "model", None)
            if isinstance(model, DistributedDataParallel):
                from .torch_hooks import attach_ddp

                self._timer = attach_ddp(model, self.monitor)
        except Exception as exc:
            self.monitor._error("lightning comm hook", exc)

    def on_train_start(self, trainer, pl_module) -> None:
        self._safe("train start", self.monitor.phase, "train")

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        m = self.monitor
        if m is None:
            return
        if m.current_phase == "checkpoint":
            self._safe("phase", m.phase, "train")
        m.data_end()  # the batch was fetched between the previous batch's end and now
        m.begin_step()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        m = self.monitor
        if m is None:
            return
        extra = {}
        if batch_idx % TOTAL_STEPS_EVERY == 0 or self._steps_sent == 0:  # now and then: batches keep the fast decoder
            total = getattr(trainer, "max_steps", -1)  # -1: unset (estimated_stepping_batches may load data: not cheap)
            if isinstance(total, int) and not isinstance(total, bool) and total > 0:
                extra["total_steps"] = total
        self._steps_sent += 1
        m.end_step(samples=_batch_size(batch), **extra)
        m.data_begin()

    def on_validation_start(self, trainer, pl_module) -> None:
        self._safe("eval", self.monitor.phase, "eval")

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.training or getattr(trainer.state, "fn", None) == "fit":
            self._safe("eval end", self.monitor.phase, "train")

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        # Called while the checkpoint is being built, before it is written; the next batch ends it.
        self._safe("checkpoint", self.monitor.phase, "checkpoint")

    def on_train_end(self, trainer, pl_module) -> None:
        self._safe("end", self.monitor.end)

    def on_exception(self, trainer, pl_module, exception) -> None:
        # A crashed run is not "finished": no ``end``; flush what we have, briefly.
        if self.monitor is not None and self._own_monitor:
            self.monitor.close(timeout=2.0)

    def teardown(self, trainer, pl_module, stage: str) -> None:
        if self.monitor is not None and self._own_monitor and stage == "fit":
            self.monitor.close()
