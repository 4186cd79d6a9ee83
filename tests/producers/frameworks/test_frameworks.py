"""Lightning and Hugging Face Trainer runs on tiny models emit well-formed events with phases.

Real training loops (CPU, a few seconds each); events captured through the monitor's sink
and validated against the wire format. Skipped without the frameworks
(``pip install -e '.[train-test]'``).
"""

from __future__ import annotations

import threading

import pytest

from stepwatch.models.wire.events import parse_event
from stepwatch.producers.monitor import RankMonitor

torch = pytest.importorskip("torch", reason="torch not installed (pip install -e '.[train-test]')")


class Capture:
    def __init__(self) -> None:
        self.events: list[dict] = []
        self.lock = threading.Lock()

    def __call__(self, batch: list[dict]) -> None:
        with self.lock:
            self.events.extend(batch)


def check_events(events: list[dict]) -> tuple[list, list[str]]:
    parsed = [parse_event(e) for e in events]  # raises on anything off the wire format
    steps = [e for e in parsed if e.kind == "step"]
    phases = [e.phase for e in parsed if e.kind == "phase"]
    assert all(e.job == "fw-job" for e in parsed)
    for s in steps:
        assert s.rank == 0 and s.world_size == 1
        assert s.compute_time is not None and s.step_time > 0
    return steps, phases


def test_lightning_fit_emits_steps_and_phases(tmp_path):
    pl = pytest.importorskip("lightning.pytorch", reason="lightning not installed (pip install -e '.[train-test]')")
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from stepwatch.producers.lightning import StepwatchCallback

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(8, 2)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return nn.functional.cross_entropy(self.net(x), y)

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log("val_loss", nn.functional.cross_entropy(self.net(x), y))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    sink = Capture()
    callback = StepwatchCallback(job="fw-job", sink=sink, heartbeat_interval=0.2, environ={})
    trainer = pl.Trainer(max_steps=24, val_check_interval=8, limit_val_batches=2, accelerator="cpu", devices=1,
                         default_root_dir=tmp_path, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[callback], num_sanity_val_steps=0)
    trainer.fit(Tiny(), DataLoader(data, batch_size=4), DataLoader(data, batch_size=4))
    assert callback.monitor._closed  # teardown closed it
    steps, phases = check_events(sink.events)
    assert [s.step for s in steps] == list(range(24))
    assert all(s.samples == 4 for s in steps)
    assert steps[0].total_steps == 24 and {s.total_steps for s in steps} <= {24, None}  # max_steps, now and then
    assert phases[0] == "train" and phases[-1] == "end"
    assert "eval" in phases and "checkpoint" in phases
    assert phases.count("eval") >= 2
    assert callback.monitor.stats()["dropped"] == 0


def test_hf_trainer_emits_steps_and_phases(tmp_path):
    transformers = pytest.importorskip("transformers", reason="transformers not installed "
                                                              "(pip install -e '.[train-test]')")
    from torch import nn
    from torch.utils.data import Dataset

    from stepwatch.producers.hf import StepwatchTrainerCallback

    class Data(Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            return {"x": torch.randn(8, generator=g), "labels": torch.tensor(i % 2)}

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(8, 2)

        def forward(self, x, labels=None):
            logits = self.net(x)
            loss = nn.functional.cross_entropy(logits, labels)
            return {"loss": loss, "logits": logits}

    monitor = RankMonitor(job="fw-job", rank=0, world_size=1, sink=Capture(), heartbeat_interval=0.2, environ={})
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), max_steps=20, per_device_train_batch_size=4, per_device_eval_batch_size=8,
        eval_strategy="steps", eval_steps=8, save_strategy="steps", save_steps=10, logging_steps=5,
        report_to=[], use_cpu=True, dataloader_num_workers=0, disable_tqdm=True)
    trainer = transformers.Trainer(model=Tiny(), args=args, train_dataset=Data(), eval_dataset=Data(),
                                   callbacks=[StepwatchTrainerCallback(monitor)])
    trainer.train()
    monitor.close()
    steps, phases = check_events(monitor._sink.events)
    assert [s.step for s in steps] == list(range(20))
    assert steps[0].total_steps == 20 and {s.total_steps for s in steps} <= {20, None}
    assert phases[0] == "train" and phases[-1] == "end"
    assert "eval" in phases and "checkpoint" in phases
    # Steps are always measured in the train phase; eval and checkpoint are announced before the pause.
    assert {s.phase for s in steps} == {"train"}
    assert monitor.sent == monitor.produced and monitor.dropped == 0
