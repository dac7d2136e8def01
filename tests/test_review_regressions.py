"""Regression tests for loop bugs found in review: each failed before its fix."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, IterableDataset

sys.path.insert(0, str(Path(__file__).resolve().parent))

import accelkit  # noqa: E402
from helpers.models import RegressionModule, quiet_trainer, regression_data  # noqa: E402


class EpochEndLogging(RegressionModule):
    def on_train_epoch_end(self) -> None:
        # the epoch aggregate of the training steps is visible here, and logs made here count
        self.log("seen_train_loss", self.trainer.callback_metrics["train_loss_epoch"])

    def on_validation_epoch_end(self) -> None:
        self.log("val_summary", 2.0)


def test_logs_in_epoch_end_hooks_are_epoch_metrics(tmp_path):
    trainer = quiet_trainer(tmp_path, max_epochs=2)
    model = EpochEndLogging()
    trainer.fit(model, val_dataloaders=DataLoader(regression_data(8, seed=1), batch_size=4))
    metrics = trainer.callback_metrics
    assert metrics["seen_train_loss"] == metrics["train_loss_epoch"]
    assert metrics["val_summary"] == 2.0
    assert trainer.validate(model, DataLoader(regression_data(8, seed=1), batch_size=4))[0]["val_summary"] == 2.0


class Stream(IterableDataset):
    """Ten samples with no ``__len__``."""

    def __iter__(self):
        data = regression_data(10)
        return iter([data[i] for i in range(10)])


def test_a_partial_accumulation_window_is_stepped_even_without_a_loader_length(tmp_path):
    sized = quiet_trainer(tmp_path, max_epochs=2, accumulate_grad_batches=2)
    sized_model = RegressionModule()
    sized.fit(sized_model, DataLoader(regression_data(10), batch_size=2))
    stream = quiet_trainer(tmp_path, max_epochs=2, accumulate_grad_batches=2)
    stream_model = RegressionModule()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the trainer may warn that it cannot shard an iterable dataset
        stream.fit(stream_model, DataLoader(Stream(), batch_size=2))
    assert sized.global_step == stream.global_step == 6  # 5 batches, windows of 2 -> 3 steps per epoch
    assert all(p.grad is None for p in stream_model.parameters())  # nothing left over after fit
    for a, b in zip(sized_model.parameters(), stream_model.parameters()):
        assert torch.equal(a, b)


def test_no_training_batches_stops_instead_of_looping(tmp_path):
    trainer = quiet_trainer(tmp_path, max_steps=5, limit_train_batches=0)
    with pytest.warns(UserWarning, match="no training is done"):
        trainer.fit(RegressionModule())
    assert trainer.global_step == 0 and trainer.current_epoch == 0


def test_a_process_group_the_user_made_survives_fit(tmp_path):
    from accelkit.strategies.ddp import find_free_port

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{find_free_port()}", rank=0, world_size=1)
    try:
        quiet_trainer(tmp_path, strategy="ddp", max_epochs=1).fit(RegressionModule())
        assert dist.is_initialized()
    finally:
        dist.destroy_process_group()


class PlateauOnStepLoss(RegressionModule):
    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.lr)
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "monitor": "train_loss"}}


def test_a_scheduler_can_monitor_a_metric_logged_per_step_and_per_epoch(tmp_path):
    trainer = quiet_trainer(tmp_path, max_epochs=2)
    trainer.fit(PlateauOnStepLoss())
    assert trainer.callback_metrics["train_loss"] == trainer.callback_metrics["train_loss_epoch"]


class LogsOnce(RegressionModule):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if batch_idx == 0 and self.current_epoch == 0:
            self.log("once", 123.0)
        return super().training_step(batch, batch_idx)


def test_a_value_logged_once_is_written_once(tmp_path):
    trainer = quiet_trainer(tmp_path, max_epochs=1, logger=True, log_every_n_steps=1)
    trainer.fit(LogsOnce())
    rows = [row for row in trainer.logger.rows if "once" in row]
    assert [row["step"] for row in rows] == [1]


def test_progress_bar_metrics_do_not_depend_on_showing_the_bar(tmp_path, capsys):
    shown = []
    for bar in (False, True):
        trainer = quiet_trainer(tmp_path, max_epochs=1, enable_progress_bar=bar)
        trainer.fit(RegressionModule())
        shown.append(dict(trainer.progress_bar_metrics))
    assert shown[0] == shown[1]


@pytest.mark.slow
def test_save_checkpoint_after_a_spawned_fit_keeps_the_optimizer_state(tmp_path):
    trainer = quiet_trainer(tmp_path, strategy="ddp_spawn", devices=2, max_epochs=1)
    model = RegressionModule()
    trainer.fit(model)
    trainer.save_checkpoint(tmp_path / "after.ckpt")
    saved = torch.load(tmp_path / "after.ckpt", weights_only=True)
    assert len(saved["optimizer_states"]) == 1 and saved["optimizer_states"][0]["param_groups"][0]["lr"] == model.lr
    assert saved["global_step"] == trainer.global_step > 0


def test_the_module_reads_the_trainers_counters_after_fit(tmp_path):
    trainer = quiet_trainer(tmp_path, max_epochs=2)
    model = RegressionModule()
    trainer.fit(model)
    assert (model.current_epoch, model.global_step) == (trainer.current_epoch, trainer.global_step) == (2, 8)


class TrainOnly(accelkit.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)


def test_test_without_a_test_step_is_an_error_naming_the_method(tmp_path):
    loader = DataLoader(regression_data(8), batch_size=4)
    with pytest.raises(NotImplementedError, match=r"TrainOnly.test_step\(batch, batch_idx\)"):
        quiet_trainer(tmp_path).test(TrainOnly(), loader)
    with pytest.raises(NotImplementedError, match=r"TrainOnly.validation_step\(batch, batch_idx\)"):
        quiet_trainer(tmp_path).validate(TrainOnly(), loader)
