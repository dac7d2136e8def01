"""Lightning rules a review found missing: each test fails on the behaviour before its fix."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).parent))

import accelkit  # noqa: E402
from helpers.models import RegressionModule, quiet_trainer, regression_data  # noqa: E402


class SkipsSecondBatch(RegressionModule):
    """Zero weights, SGD lr=1; training_step returns None on batch 1."""

    def __init__(self) -> None:
        super().__init__(lr=1.0)
        nn.init.zeros_(self.layer.weight)
        nn.init.zeros_(self.layer.bias)
        self.weights: list[torch.Tensor] = []

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss = super().training_step(batch, batch_idx)
        return None if batch_idx == 1 else loss

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.weights.append(self.layer.weight.detach().clone())


def test_a_skipped_batch_moves_no_weight(tmp_path):
    """As Lightning's closure: the gradients are zeroed, no backward runs, the step moves nothing."""
    model = SkipsSecondBatch()
    quiet_trainer(tmp_path, max_epochs=1, limit_train_batches=3, num_sanity_val_steps=0,
                  limit_val_batches=0).fit(model)
    assert not torch.equal(model.weights[0], torch.zeros_like(model.weights[0]))
    torch.testing.assert_close(model.weights[1], model.weights[0], rtol=0, atol=0)
    assert not torch.equal(model.weights[2], model.weights[1])


class MonitoredStepLR(RegressionModule):
    """A StepLR whose dict carries a 'monitor' key (Lightning users leave it there for any scheduler)."""

    def __init__(self) -> None:
        super().__init__()
        self.lrs: list[float] = []

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=1.0)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(opt, 1, 0.5),
                                                   "monitor": "val_loss"}}

    def on_train_epoch_start(self) -> None:
        self.lrs.append(self.trainer.optimizers[0].param_groups[0]["lr"])


def test_monitor_is_only_used_by_plateau_schedulers(tmp_path):
    model = MonitoredStepLR()
    quiet_trainer(tmp_path, max_epochs=4).fit(model)
    assert model.lrs == [1.0, 0.5, 0.25, 0.125]  # stepped without the metric (it is not an epoch number)


def test_val_check_interval_longer_than_an_epoch_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="val_check_interval=10 must be <= the number of training batches per "
                                         "epoch \\(4\\).*check_val_every_n_epoch=None"):
        quiet_trainer(tmp_path, max_epochs=2, val_check_interval=10).fit(RegressionModule())


class OldHooks(RegressionModule):
    def validation_epoch_end(self, outputs: Any) -> None:
        pass

    def on_epoch_end(self) -> None:
        pass


def test_lightning_1x_hooks_are_refused_with_their_replacement(tmp_path):
    with pytest.raises(NotImplementedError, match="validation_epoch_end was removed.*on_validation_epoch_end.*"
                                                  "on_epoch_end was removed"):
        quiet_trainer(tmp_path, max_epochs=1).fit(OldHooks())


class TwoLoadersNoIndex(RegressionModule):
    def val_dataloader(self) -> list[DataLoader]:
        return [DataLoader(regression_data(8, seed=1), batch_size=4), DataLoader(regression_data(8, seed=2),
                                                                                 batch_size=4)]


def test_several_loaders_need_a_dataloader_idx_parameter(tmp_path):
    with pytest.raises(TypeError, match="validation_step runs over 2 loaders but takes no dataloader_idx"):
        quiet_trainer(tmp_path, max_epochs=1).validate(TwoLoadersNoIndex())


class RecordsOrder(RegressionModule):
    """A shuffled training loader; records the first batch's targets."""

    def __init__(self) -> None:
        super().__init__()
        self.first: list[torch.Tensor] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if batch_idx == 0:
            self.first.append(batch[1].flatten().clone())
        return super().training_step(batch, batch_idx)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(regression_data(32), batch_size=8, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(regression_data(16, seed=1), batch_size=8, shuffle=True)


def test_the_sanity_check_does_not_change_the_training_order(tmp_path):
    orders = []
    for steps in (0, 2):
        torch.manual_seed(123)
        model = RecordsOrder()
        quiet_trainer(tmp_path, max_epochs=1, num_sanity_val_steps=steps).fit(model)
        orders.append(model.first[0])
    torch.testing.assert_close(orders[0], orders[1], rtol=0, atol=0)


def test_callback_metrics_start_empty_for_each_run(tmp_path):
    trainer = quiet_trainer(tmp_path, max_epochs=1)
    model = RegressionModule()
    trainer.fit(model)
    assert "train_loss_epoch" in trainer.callback_metrics
    trainer.test(model, verbose=False)
    assert set(trainer.callback_metrics) == {"test_loss"}


class RankZeroMetric(RegressionModule):
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_score", torch.nn.functional.mse_loss(self(x), y), rank_zero_only=True)


@pytest.mark.slow
def test_a_monitor_on_a_rank_zero_only_metric_fails_instead_of_hanging(tmp_path):
    trainer = quiet_trainer(tmp_path, max_epochs=1, devices=2, strategy="ddp_spawn", num_sanity_val_steps=0,
                            callbacks=[accelkit.callbacks.EarlyStopping(monitor="val_score")])
    with pytest.raises(accelkit.WorkerError, match="EarlyStopping monitors 'val_score', which is logged with "
                                                   "rank_zero_only=True"):
        trainer.fit(RankZeroMetric())


class WithLBFGS(RegressionModule):
    def configure_optimizers(self) -> Any:
        return torch.optim.LBFGS(self.parameters(), lr=0.1)


def test_an_optimizer_that_needs_its_closure_is_refused_clearly(tmp_path):
    with pytest.raises(NotImplementedError, match="LBFGS.step\\(\\) re-evaluates the loss through its closure"):
        quiet_trainer(tmp_path, max_epochs=1).fit(WithLBFGS())
